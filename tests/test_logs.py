"""The service's log lines: under systemd's journal each carries its priority and no time (the
journal dates it); anywhere else each starts with its ISO time and zone. Config errors and
uncaught exceptions included, one line per event."""

from __future__ import annotations

import datetime as dt
import io
import logging
import os
import re
import subprocess
import sys
import threading
import time
import warnings

from slowdown.probe.runtime import logs

BAD = 'interval = "fast"\n[[target]]\nname = "a"\npath = "relative"\n'
DATED = re.compile(r"(\S+) (DEBUG|INFO|WARNING|ERROR|CRITICAL) (\S+): (.*)")


def run_bad_config(tmp_path, journal: str | None) -> str:
    """`slowdown-probe run` of a bad configuration, its stderr in a file; ``journal``: what
    $JOURNAL_STREAM says ("file": that file's device and inode, as systemd sets it)."""
    config = tmp_path / "slowdown.toml"
    config.write_text(BAD)
    log = tmp_path / "stderr.log"
    with open(log, "wb") as err:
        st = os.fstat(err.fileno())
        env = {k: v for k, v in os.environ.items() if k != "JOURNAL_STREAM"}
        if journal is not None:
            env["JOURNAL_STREAM"] = f"{st.st_dev}:{st.st_ino}" if journal == "file" else journal
        done = subprocess.run([sys.executable, "-m", "slowdown.probe.command.main", "--config",
                               str(config), "run", "--duration", "1s"], stdout=subprocess.PIPE,
                              stderr=err, env=env, timeout=30)
    assert done.returncode == 2
    return log.read_text()


def test_a_bad_config_under_systemd_is_an_error_line_naming_file_line_and_key(tmp_path):
    text = run_bad_config(tmp_path, "file")
    config = tmp_path / "slowdown.toml"
    lines = text.strip().splitlines()
    assert len(lines) >= 2, text
    assert all(line.startswith("<3>slowdown.probe: ") for line in lines), text
    assert any(re.search(rf"{re.escape(str(config))}:1: interval: ", line) for line in lines)
    assert any(re.search(rf"{re.escape(str(config))}:4: target\[1\]\.path", line)
               for line in lines), text


def test_lines_that_no_journal_dates_carry_an_iso_time_with_its_zone(tmp_path):
    """A file or a pipe, and a stream systemd's $JOURNAL_STREAM does not name (a service
    whose stderr was sent elsewhere inherits it all the same)."""
    for journal in (None, "12:345678"):
        before = time.time()
        text = run_bad_config(tmp_path, journal)
        lines = text.strip().splitlines()
        assert len(lines) >= 2, text
        for line in lines:
            match = DATED.fullmatch(line)
            assert match and not line.startswith("<"), line
            moment = dt.datetime.fromisoformat(match.group(1))
            assert moment.utcoffset() is not None, line  # the zone is said
            assert before - 1 <= moment.timestamp() <= time.time() + 1, line
            assert match.group(2, 3) == ("ERROR", "slowdown.probe"), line
        assert any(": interval: " in line for line in lines), text


def test_uncaught_exceptions_and_warnings_become_single_prioritised_lines(monkeypatch):
    stream = io.StringIO()
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)
    monkeypatch.setattr(threading, "excepthook", threading.excepthook)
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        logs.setup(stream=stream)

        def fail() -> None:
            raise RuntimeError("boom\nsecond line")

        thread = threading.Thread(target=fail, name="flusher")
        thread.start()
        thread.join()
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.warn("numbers may be off", RuntimeWarning, stacklevel=1)
    finally:
        logging.captureWarnings(False)
        root.handlers[:] = handlers
        root.setLevel(level)
    lines = stream.getvalue().splitlines()  # no journal: dated lines, each with its level
    crash = [line for line in lines if "uncaught exception in thread flusher" in line]
    assert len(crash) == 1 and DATED.fullmatch(crash[0]).group(2) == "CRITICAL", lines
    assert "RuntimeError: boom | second line" in crash[0]  # the traceback on the same line
    assert any(DATED.fullmatch(line).group(2) == "WARNING" and "numbers may be off" in line
               for line in lines), lines
