"""The real md-workbench continues from any stop of the real service, without an error.

The service rotates a pool (a round per second), is stopped by SIGTERM at a random moment,
then killed (-9, with its workers) at another; after each, `md-workbench -2 -X` on the pool
counts no error (every object it reads is there and holds md-workbench's pattern), and the
service then goes on with the rotation from where md-workbench left it.
"""

from __future__ import annotations

import os
import random
import re
import signal
import time
from pathlib import Path

import pytest

from tests.kit.iorkit import md_workbench
from tests.kit.servicekit import (
    TargetSpec,
    output,
    probe_cli,
    start_service,
    stop_service,
    wait_for,
    write_config,
)

DIRS, PER_DIR, SIZE = 10, 10, 3901


def status_of(ws: Path) -> str:
    return (ws / "md-workbench.status").read_text()


def pos_of(ws: Path) -> int:
    return int(re.match(r"pos: (\d+)", status_of(ws)).group(1))


def windows(ws: Path) -> list[list[int]]:
    return [sorted(int(n[5:]) for n in os.listdir(ws / "md" / f"0_{d}")) for d in range(DIRS)]


def children(pid: int) -> list[int]:
    """The worker processes of the service (each in a session of its own)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry))
    return found


def run_until_moved(config: Path, ws: Path, rng: random.Random):
    """Start the service and let it rotate for a random while (at least one step)."""
    before = windows(ws)
    proc = start_service(config)
    wait_for(lambda: windows(ws) != before, 30, step=0.05, what="the rotation to move")
    time.sleep(rng.uniform(0.2, 1.2))
    return proc


@pytest.mark.timeout(120)
def test_md_workbench_continues_after_sigterm_and_kill_9(tmp_path: Path) -> None:
    rng = random.Random()
    target = TargetSpec("t", tmp_path / "t", pool_files=DIRS * PER_DIR, pool_dirs=DIRS)
    target.path.mkdir()
    config = write_config(tmp_path / "slowdown.toml", tmp_path / "db" / "slowdown.db",
                          [target], interval="100ms")
    done = probe_cli(config, "prepare", "--no-progress")
    assert done.returncode == 0, done.stderr
    ws = target.path / ".slowdown" / "testhost"
    assert md_workbench(ws, DIRS, PER_DIR, SIZE, 1)[0] == 0  # prepare's objects verify

    # SIGTERM: the round in progress is finished, the exact round saved.
    proc = run_until_moved(config, ws, rng)
    _, log = stop_service(proc)
    pos = pos_of(ws)
    assert status_of(ws) == f"pos: {pos}\nslowdown-step: {pos * DIRS}\n", log
    assert windows(ws) == [list(range(pos, pos + PER_DIR))] * DIRS
    errors, out = md_workbench(ws, DIRS, PER_DIR, SIZE, 3)
    assert errors == 0, out
    assert pos_of(ws) == pos + 3

    # kill -9 of the service and its workers, mid-round or mid-step.
    proc = run_until_moved(config, ws, rng)
    workers = children(proc.pid)
    for pid in [proc.pid, *workers]:
        os.kill(pid, signal.SIGKILL)
    proc.wait()
    errors, out = md_workbench(ws, DIRS, PER_DIR, SIZE, 3)
    assert errors == 0, out
    after_md_workbench = pos_of(ws)

    # The service goes on from md-workbench's round; the crash's leftovers are repaired.
    proc = run_until_moved(config, ws, rng)
    _, log = stop_service(proc)
    assert " failed" not in log, log
    pos = pos_of(ws)
    assert pos > after_md_workbench
    assert windows(ws) == [list(range(pos, pos + PER_DIR))] * DIRS
    errors, out = md_workbench(ws, DIRS, PER_DIR, SIZE, 2 * PER_DIR)  # two whole rotations
    assert errors == 0, out
    assert "md-stat" not in output(proc)
