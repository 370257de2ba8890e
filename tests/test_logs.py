"""The service's log lines: every one carries its journald priority, config errors and
uncaught exceptions included (stderr is a pipe here, as under systemd)."""

from __future__ import annotations

import io
import logging
import re
import sys
import threading
import warnings

from slowdown.probe import logs
from tests.servicekit import probe_cli


def test_a_bad_config_under_systemd_is_an_error_line_naming_file_line_and_key(tmp_path):
    config = tmp_path / "slowdown.toml"
    config.write_text('interval = "fast"\n[[target]]\nname = "a"\npath = "relative"\n')
    done = probe_cli(config, "run", "--duration", "1s", timeout=30)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) >= 2, done.stderr
    assert all(line.startswith("<3>") for line in lines), done.stderr
    assert any(re.search(rf"{re.escape(str(config))}:1: interval: ", line) for line in lines)
    assert any(re.search(rf"{re.escape(str(config))}:4: target\[1\]\.path", line)
               for line in lines), done.stderr


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
    lines = stream.getvalue().splitlines()
    crash = [line for line in lines if "uncaught exception in thread flusher" in line]
    assert len(crash) == 1 and crash[0].startswith("<2>")
    assert "RuntimeError: boom | second line" in crash[0]  # the traceback on the same line
    assert any(line.startswith("<4>") and "numbers may be off" in line for line in lines)
