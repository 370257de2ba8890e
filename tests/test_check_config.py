"""`slowdown-probe check-config` says what a valid file still gets wrong: a target whose
parent is missing (an error where `prepare` could not make the target, as it makes no parents),
an interval so short that the probe loads what it measures (a warning, said at the service's
start too), and what `[fleet]` means."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from slowdown.probe.command.main import main
from tests.kit.cli_runner import runner


def write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


def with_here(tmp_path: Path, more: str = "") -> Path:
    """A config whose first target, "here", lies in tmp_path/fs (made); ``more`` follows it."""
    (tmp_path / "fs").mkdir()
    config = write(tmp_path / "slowdown.toml", f"""
        database = "{tmp_path}/db/slowdown.db"
        [[target]]
        name = "here"
        path = "{tmp_path}/fs/probe"
        """)
    config.write_text(config.read_text() + textwrap.dedent(more).lstrip("\n"))
    return config


def check_config(path: Path, env: dict[str, str] | None = None):
    return runner().invoke(main, ["check-config", str(path)], env=env)


# -- a target's parent ---------------------------------------------------------------------

def test_a_target_whose_parent_is_missing_is_an_error_as_prepare_fails_there(tmp_path):
    config = with_here(tmp_path, f"""
        [[target]]
        name = "lost"
        path = "{tmp_path}/fs/gone/deeper/probe"
        """)
    result = check_config(config)
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines() == [
        f"{config}:7: target[2].path: its parent {tmp_path}/fs/gone/deeper does not exist "
        f"(nor does {tmp_path}/fs/gone): prepare makes the target directory probe but not its "
        f"parents; make {tmp_path}/fs/gone/deeper on the filesystem to probe, or correct the "
        "path"]
    assert result.stdout.splitlines()[-1] == "configuration has 1 error (on standard error)"
    assert "target lost" in result.stdout  # the summary and its footprints, all the same
    # What the error says is what prepare does: it fails there and makes nothing.
    done = runner().invoke(main, ["--config", str(config), "prepare", "--no-progress",
                                  "--target", "lost"])
    assert done.exit_code == 1, done.output
    assert sorted(p.name for p in (tmp_path / "fs").iterdir()) == []


def test_an_existing_parent_says_nothing(tmp_path):
    config = with_here(tmp_path)
    result = check_config(config)
    assert result.exit_code == 0 and result.stderr == "", result.output
    assert result.stdout.splitlines()[-1] == "configuration OK"


def test_the_built_in_target_whose_parents_prepare_makes_is_a_warning(tmp_path):
    data = tmp_path / "nothing-yet" / "share"
    env = {"HOME": str(tmp_path), "XDG_DATA_HOME": str(data), "XDG_CONFIG_HOME":
           str(tmp_path / "config"), "SLOWDOWN_CONFIG": ""}
    result = runner().invoke(main, ["check-config"], env=env)
    assert result.exit_code == 0, result.output
    (warning,) = result.stderr.splitlines()
    assert warning == (f"warning: target[1].path: {tmp_path}/nothing-yet does not exist; "
                       f"prepare makes it, and the target below it, in {tmp_path}")
    assert result.stdout.splitlines()[-1] == "configuration OK"


@pytest.mark.root
@pytest.mark.timeout(60)
def test_a_target_on_a_hung_filesystem_is_a_warning_within_seconds(faultfs, tmp_path):
    config = write(tmp_path / "slowdown.toml", f"""
        database = "{tmp_path}/db/slowdown.db"
        [[target]]
        name = "hung"
        path = "{faultfs.mountpoint}/probe"
        """)
    faultfs.hang(["getattr"], path="probe")
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "slowdown.probe.command.main", "check-config",
                           str(config)], capture_output=True, text=True, timeout=30)
    took = time.monotonic() - started
    faultfs.release()
    assert done.returncode == 0, done.stderr
    assert done.stderr == (f"warning: {config}:4: target[1].path: {faultfs.mountpoint}/probe "
                           "did not answer within 2s (a hung filesystem?); not checked\n")
    assert took < 10, took


# -- a short interval ------------------------------------------------------------------------

def test_an_interval_under_100ms_is_a_warning_saying_what_it_costs(tmp_path):
    config = write(tmp_path / "slowdown.toml", f"""
        database = "{tmp_path}/db/slowdown.db"
        interval = "0.001s"
        [[target]]
        name = "here"
        path = "{tmp_path}"
        """)
    result = check_config(config)
    assert result.exit_code == 0, result.output
    assert result.stderr == (
        f"warning: {config}:2: interval: 1ms is under 100ms: each tick runs all six ops of a "
        "target (a 1 MiB read, a 1 MiB write, 4 metadata ops), so this node alone asks "
        "1.95GiB/s and 4,000 metadata ops/s of each target's filesystem, the probe's load "
        "then weighs on the latency it measures, and a tick that comes while the last run "
        "still goes is skipped; the default is 1s\n")
    assert result.stdout.splitlines()[-1] == "configuration OK"
    config.write_text(config.read_text().replace('"0.001s"', '"100ms"'))
    result = check_config(config)
    assert result.exit_code == 0 and result.stderr == "", result.output


@pytest.mark.timeout(60)
def test_the_service_logs_the_short_interval_as_it_starts(tmp_path):
    config = write(tmp_path / "slowdown.toml", f"""
        database = "{tmp_path}/db/slowdown.db"
        interval = "50ms"
        [[target]]
        name = "here"
        path = "{tmp_path}/here"
        data_file = "own"
        data_size = "16MiB"
        pool_files = 100
        pool_dirs = 10
        """)
    done = subprocess.run([sys.executable, "-m", "slowdown.probe.command.main",
                           "--config", str(config),
                           "run", "--prepare", "--duration", "1s"], capture_output=True,
                          text=True, timeout=50)
    assert done.returncode == 0, done.stderr
    said = [line for line in done.stderr.splitlines() if "interval:" in line]
    assert len(said) == 1, done.stderr
    assert f"{config}:2: interval: 50ms is under 100ms: " in said[0]
    assert "40MiB/s and 80 metadata ops/s of each target's filesystem" in said[0]


# -- [fleet] -----------------------------------------------------------------------------------

def test_the_summary_shows_fleet(tmp_path):
    base = f"""
        database = "{tmp_path}/db/slowdown.db"
        [[target]]
        name = "here"
        path = "{tmp_path}"
        """
    config = write(tmp_path / "slowdown.toml", base)
    result = check_config(config)
    assert ("fleet          off (no verdict on a slowdown: this node or the filesystem)"
            in result.stdout.splitlines()), result.output
    write(config, base + """
        [fleet]
        databases = ["/shared/a/*.db", "/shared/b/*.db"]
        window = "10m"
        statistic = "q95"
        slow = 2.5
        share = 0.6
        min_peers = 3
        stale = "7m"
        """)
    result = check_config(config)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    at = lines.index("fleet          databases /shared/a/*.db, /shared/b/*.db")
    assert lines[at + 1] == ('               the q95 over 10m; slow at 2.5 or more; "filesystem" '
                             'when 60% or more of the fresh peers are slow; "unknown" under 3 '
                             'fresh peers (fresh: numbers newer than 7m)')
    write(config, base + '[fleet]\nprometheus = "http://127.0.0.1:9090"\ntimeout = "3s"\n')
    result = check_config(config)
    assert "fleet          Prometheus http://127.0.0.1:9090 (timeout 3s)" in result.stdout
