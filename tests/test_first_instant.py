"""What the readers say of a service from its first instant to its last: "preparing" while the
first `slowdown-probe run --prepare` makes the workspaces (no database yet: it used to say "no
such database"), "collecting" once it starts, and, as soon as it is known to have stopped (its
last live state says so, or its process is gone), `check` is UNKNOWN: it used to stay OK for
three minutes. The real service as a subprocess; the prepare held on a FUSE mount."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from slowdown.analysis.units import format_clock
from slowdown.analysis.view.service_states import LIVE_FRESH
from testdata.datakit import fill, lognormal
from tests.kit.reliabilitykit import offset_env, offset_to
from tests.kit.servicekit import (
    TargetSpec,
    live,
    prepared,
    start_service,
    stop_service,
    wait_for,
    write_config,
)


def read(config, *args: str, offset: float = 0.0) -> subprocess.CompletedProcess:
    """`slowdown --config CONFIG ARGS...`, its clock ``offset`` seconds from the real one."""
    return subprocess.run([sys.executable, "-m", "slowdown.analysis.cli", "--config",
                           str(config), *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **offset_env(offset)})


def state(config, offset: float = 0.0) -> str:
    done = read(config, "--json", offset=offset)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)["services"][0]["state"]


@pytest.mark.root
@pytest.mark.timeout(60)
def test_a_first_prepare_alone_is_said_and_then_nothing_is_claimed(faultfs, tmp_path):
    database = tmp_path / "db" / "slowdown.db"
    config = write_config(tmp_path / "slowdown.toml", database,
                          [TargetSpec("one", faultfs.mountpoint / "t")])
    faultfs.hang(["mkdir"], path="t")
    with open(tmp_path / "prepare.log", "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "slowdown.probe.command.main", "--config",
                                 str(config), "prepare", "--no-progress"],
                                stdout=log, stderr=subprocess.STDOUT)
    try:
        faultfs.wait_hung(timeout=30)
        done = read(config)
        assert done.returncode == 0, done.stdout + done.stderr
        assert done.stdout.split()[2:4] == ["one", "preparing"], done.stdout
    finally:
        faultfs.release()
        assert proc.wait(timeout=30) == 0, (tmp_path / "prepare.log").read_text()
    done = read(config)  # prepared, no service: as before, nothing to show
    assert done.returncode == 1 and "no such database" in done.stderr, done.stderr
    assert "slowdown-probe" not in done.stderr
    assert not database.with_name(database.name + ".start.json").exists()


@pytest.mark.root
@pytest.mark.timeout(120)
def test_the_first_slowdown_says_preparing_then_collecting(faultfs, tmp_path):
    database = tmp_path / "db" / "slowdown.db"  # no directory yet, as in a new account
    config = write_config(tmp_path / "slowdown.toml", database,
                          [TargetSpec("one", faultfs.mountpoint / "t")])
    faultfs.hang(["mkdir"], path="t")  # prepare held as it makes the target directory
    proc = start_service(config, "--prepare")
    try:
        faultfs.wait_hung(timeout=30)
        assert not database.exists()
        done = read(config)
        assert done.returncode == 0, done.stdout + done.stderr
        (line,) = done.stdout.splitlines()
        assert line.split()[2:4] == ["one", "preparing"] and " since " in line, line
        doc = json.loads(read(config, "--json").stdout)
        assert doc["services"][0]["state"] == "preparing"
        assert doc["targets"][0]["service"]["state"] == "preparing"
        done = read(config, "check")
        assert done.returncode == 3 and done.stdout.startswith(
            "SLOWDOWN UNKNOWN - one preparing since "), done.stdout
        done = read(config, "watch", "--count", "1")
        assert done.returncode == 0, done.stderr
        assert "one  preparing since " in done.stdout
        assert "service on testhost: not running yet: preparing the workspaces" in done.stdout
        done = read(config, "stats")  # no numbers to tabulate: the error says what goes on
        assert done.returncode == 1
        assert done.stderr.startswith(f"Error: {database}: no such database: slowdown-probe "
                                      f"(PID {proc.pid}) is preparing the workspaces since ")
        done = read(config, "--target", "nosuch")  # the names it will probe are known
        assert done.returncode == 1 and 'no target "nosuch"' in done.stderr
        assert "its targets: one" in done.stderr, done.stderr
        faultfs.release()
        wait_for(lambda: state(config) == "collecting", 60, what="the service to start")
        (line,) = read(config).stdout.splitlines()
        assert line.split()[2:4] == ["one", "collecting"] and "first numbers at" in line
    finally:
        faultfs.release()  # a prepare held in the mount could not stop
        stop_service(proc)
    assert not database.with_name(database.name + ".start.json").exists()  # its own, removed


@pytest.fixture
def one_target(tmp_path):
    return prepared(tmp_path, [TargetSpec("one", tmp_path / "one")])


@pytest.mark.timeout(120)
@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_check_is_unknown_as_soon_as_the_service_is_known_to_have_stopped(one_target, how):
    config, database = one_target
    offset = offset_to(52)  # the first minute is written 8 s after the start
    proc = start_service(config, env=offset_env(offset))
    try:
        wait_for(lambda: read(config, "check", offset=offset).returncode == 0, 40,
                 step=0.5, what="check OK on the first minute")
        os.kill(proc.pid, how)
        proc.wait(timeout=15)
        last = live(database)["updated"]
        done = read(config, "check", offset=offset)
        asked = time.time() + offset
    finally:
        stop_service(proc)
    assert done.returncode == 3, done.stdout
    assert done.stdout.startswith("SLOWDOWN UNKNOWN - service stopped; numbers from "), \
        done.stdout
    if how == signal.SIGKILL:  # no word from it: its last live state still looked fresh
        assert asked - last < LIVE_FRESH, (asked, last)
    (line,) = read(config, offset=offset).stdout.splitlines()
    assert "service stopped; numbers from " in line, line


def test_check_over_a_cluster_judges_the_running_and_names_the_stopped(tmp_path):
    """n1's service runs (work), n2's stopped a minute ago, saying so (scratch): scratch is
    UNKNOWN, work is judged; live states written by the test in the service's form."""
    now = time.time()
    minute = int(now // 60 * 60)
    for host, target, live_state in (
            ("n1", "work", {"updated": now}),
            ("n2", "scratch", {"updated": minute - 50, "stopped": minute - 50})):
        db = tmp_path / f"{host}.db"
        fill(db, minute - 3600, 60, lognormal(0.001), host=host, targets=(target,))
        db.with_name(db.name + ".live.json").write_text(json.dumps({
            "host": host, "pid": 1, "started": minute - 3600, "interval": 1.0,
            "targets": {target: {"ticks": 3600, "last_tick": live_state["updated"],
                                 "in_flight": [], "last": {}}}, **live_state}))
    done = subprocess.run([sys.executable, "-m", "slowdown.analysis.cli", "check", "--db",
                           str(tmp_path / "n*.db"), "-w", "100", "-c", "1000"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 3, done.stdout
    text = done.stdout.split(" | ")[0]
    assert text.startswith("SLOWDOWN UNKNOWN - median over 10m: scratch service stopped on "
                           f"n2; numbers from {format_clock(minute - 60, time.time())}, "), text
    assert ", work 1.0 (" in text, text
    assert "'work'=" in done.stdout and "'scratch'=" not in done.stdout
