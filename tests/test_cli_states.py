"""`slowdown`, `--json`, `-v`, `check` and `watch` say which state the service of each database
is in: collecting its first minute, running, or stopped (with the age of its newest numbers).

The real service runs as a subprocess. Its wall clock and the readers' are shifted together by
libfaketime (the monotonic clock is real), so that a test starts at a chosen second of a minute:
no minute boundary falls inside the collecting phase by chance, or one comes within seconds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from slowdown.analysis.cli.main import main
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
)


@pytest.fixture
def one_target(tmp_path):
    """A configuration with one prepared target; returns (config, database)."""
    return prepared(tmp_path, [TargetSpec("one", tmp_path / "one")])


def read(database, *args: str, offset: float = 0.0) -> subprocess.CompletedProcess:
    """`slowdown --db DATABASE ARGS...` in a process whose wall clock is ``offset`` seconds
    from the real one (the service's offset: both see the same time)."""
    return subprocess.run([sys.executable, "-m", "slowdown.analysis.cli", "--db", str(database),
                           *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **offset_env(offset)})


def state_of(database, offset: float) -> dict:
    done = read(database, "--json", offset=offset)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def collecting(database, offset: float) -> dict | None:
    """The state while no op happens to be in flight for longer than the interval: on a busy
    machine one may be at the moment of reading, and a target with an op in flight that long
    is shown with its windows (stuck), which is not the state this test reads."""
    doc = state_of(database, offset)
    return doc if doc["targets"] and doc["targets"][0]["windows"] == [] else None


def calm_read(database, *args: str, offset: float, until):
    """``slowdown ARGS`` read again, for up to 15 s, until ``until(done)``: as in ``collecting``,
    an op (or the probe's own work after its ops: the md round's status file, written and
    renamed) may be in flight longer than the interval at the moment of reading on a busy
    machine, and the target is then shown stuck, not collecting."""
    def once():
        done = read(database, *args, offset=offset)
        return done if done.returncode in (0, 3) and until(done) else None
    return wait_for(once, 15, step=0.5, what=f"`slowdown {' '.join(args)}` with no op stuck")


def stopped(database, offset: float) -> dict | None:
    doc = state_of(database, offset)
    return doc if doc["services"][0]["state"] == "stopped" else None


@pytest.mark.timeout(120)
def test_collecting_then_stopped_with_a_real_service(one_target):
    config, database = one_target
    offset = offset_to(5)  # the service starts at second 5: its first minute ends in ~55 s
    proc = start_service(config, env=offset_env(offset))
    try:
        wait_for(lambda: database.with_name(database.name + ".live.json").exists(), 20,
                 what="the live state")
        started = live(database)["started"]

        # -- collecting: every form says so, and when the first numbers come ----------------
        doc = wait_for(lambda: collecting(database, offset), 15, step=0.5,
                       what="a reading with no op in flight longer than the interval")
        (target,) = doc["targets"]
        service = target["service"]
        due = (started // 60 + 1) * 60  # the minute boundary after the first tick
        assert target["target"] == "one" and target["windows"] == []
        assert service["state"] == "collecting"
        assert service["since"] == started and service["first_numbers_at"] == due
        assert service["newest_record"] is None and service["age"] is None
        (db,) = doc["services"]
        assert (db["database"], db["host"], db["state"], db["targets"]) == \
            (str(database), "testhost", "collecting", {"one": "collecting"})
        # (the live state is rewritten every second: the reading may meet a rewrite made
        # just after it took its time)
        assert db["first_numbers_at"] == due and db["last_seen"] <= doc["time"] + 1.0
        now = doc["time"]  # the service's clock: a date is said across midnight
        said = (f"collecting since {format_clock(started, now)}, "
                f"first numbers at {format_clock(due, now)}")

        done = calm_read(database, offset=offset, until=lambda d: "(stuck)" not in d.stdout)
        assert done.returncode == 0, done.stderr
        (line,) = done.stdout.splitlines()
        assert line.split()[2] == "one" and line.endswith(said), line
        assert line.split()[1] == time.strftime("%Z")  # the clock with its zone

        done = calm_read(database, "-v", offset=offset,  # the same line; no table of nothing
                         until=lambda d: "(stuck)" not in d.stdout)
        assert done.returncode == 0, done.stderr
        assert [v.split(None, 2)[2] for v in done.stdout.splitlines()] == \
            [line.split(None, 2)[2]]

        done = calm_read(database, "check", offset=offset, until=lambda d: d.returncode == 3)
        assert done.returncode == 3, done.stdout
        assert done.stdout == f"SLOWDOWN UNKNOWN - one {said}\n"

        done = calm_read(database, "watch", "--count", "1", offset=offset,
                         until=lambda d: "stuck" not in d.stdout)
        assert done.returncode == 0, done.stderr
        assert f"one  {said}" in done.stdout
        assert "service on testhost: running, collecting its first minute" in done.stdout
    finally:
        stop_service(proc)

    # -- stopped: the partial minute was written at exit; its numbers are shown as old -------
    doc = wait_for(lambda: stopped(database, offset), LIVE_FRESH + 10, step=0.5,
                   what="the live state to go stale")
    (target,) = doc["targets"]
    minute = int(started // 60 * 60)
    assert target["windows"] and target["service"]["state"] == "stopped"
    assert target["service"]["newest_record"] == minute
    assert target["service"]["age"] == pytest.approx(doc["time"] - minute, abs=0.01)
    assert doc["services"][0]["targets"] == {"one": "stopped"}

    done = read(database, offset=offset)
    assert done.returncode == 0, done.stderr
    (line,) = done.stdout.splitlines()
    assert "slowdown median  1m " in line
    assert f"service stopped; numbers from {format_clock(minute, doc['time'])}, " in line

    later = offset + 600  # ten minutes on: the numbers are stale for check
    done = read(database, "check", offset=later)
    assert done.returncode == 3, done.stdout
    said = format_clock(minute, doc["time"] + 600)
    assert done.stdout.startswith(f"SLOWDOWN UNKNOWN - service stopped; numbers from {said}, 1")
    assert "m ago" in done.stdout

    done = read(database, "watch", "--count", "1", offset=offset)
    assert done.returncode == 0, done.stderr
    assert "service stopped; numbers from" in done.stdout
    assert "service on testhost: not running (last seen " in done.stdout


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_the_first_numbers_come_when_announced_then_running(one_target):
    """Started at second 50: collecting until the minute boundary announced, running from just
    after it (the first minute's records), stopped after SIGTERM."""
    config, database = one_target
    offset = offset_to(50)
    proc = start_service(config, env=offset_env(offset))
    try:
        wait_for(lambda: database.with_name(database.name + ".live.json").exists(), 20,
                 what="the live state")
        first = state_of(database, offset)["targets"][0]["service"]
        assert first["state"] == "collecting"
        due = first["first_numbers_at"]
        assert due % 60 == 0 and 0 < due - first["since"] <= 12
        seen = []
        while True:
            doc = state_of(database, offset)
            seen.append((doc["time"], doc["targets"][0]["service"]["state"]))
            if seen[-1][1] == "running" or doc["time"] > due + 10:
                break
            time.sleep(0.3)
        assert all(state == "collecting" for t, state in seen if t < due - 0.5), seen
        when, state = seen[-1]
        assert state == "running" and due <= when < due + 3, seen
        service = doc["targets"][0]["service"]
        assert service["newest_record"] == due - 60 and service["first_numbers_at"] is None
        assert doc["services"][0]["state"] == "running"
        done = read(database, offset=offset)
        assert done.returncode == 0 and "slowdown median  1m " in done.stdout, done.stdout
        assert "service stopped" not in done.stdout and "collecting" not in done.stdout
        done = read(database, "check", "-w", "1000", "-c", "1000", offset=offset)
        assert done.returncode == 0 and done.stdout.startswith("SLOWDOWN OK - "), done.stdout
        wait_for(lambda: live(database)["targets"]["one"]["last_tick"] >= due + 1, 10,
                 what="a tick in the minute after the first")  # its part is written at exit
    finally:
        stop_service(proc)
    doc = wait_for(lambda: stopped(database, offset), LIVE_FRESH + 10, step=0.5,
                   what="the live state to go stale")
    assert doc["targets"][0]["service"]["newest_record"] == due  # the partial minute at exit


def test_nothing_to_show_is_exit_1_with_the_reason(tmp_path):
    runner = CliRunner()
    result = runner.invoke(main, ["--db", str(tmp_path / "none.db")])
    assert result.exit_code == 1 and "no such database" in result.output
    empty = tmp_path / "empty.db"
    fill(empty, 0, 0, lognormal(0.001))  # a database with no record, and no service
    result = runner.invoke(main, ["--db", str(empty)])
    assert result.exit_code == 1
    assert "no minute record" in result.output and "no service is running" in result.output
    result = runner.invoke(main, ["--db", str(empty), "check"])
    assert result.exit_code == 3 and result.output.startswith("SLOWDOWN UNKNOWN - no data")
    # watch waits on a database that exists (its service may be starting); not on none
    result = runner.invoke(main, ["--db", str(empty), "watch", "--count", "2", "--interval", "0"])
    assert result.exit_code == 0 and result.output.count("no service is running") == 2
    result = runner.invoke(main, ["--db", str(tmp_path / "none.db"), "watch", "--count", "2"])
    assert result.exit_code == 1 and "no such database" in result.output


def test_a_cluster_names_the_host_whose_service_stopped(tmp_path):
    """Two hosts' files: n1's service runs, n2's stopped 10 minutes ago (live states written
    by the test in the service's form); the line of numbers names n2, the JSON says each."""
    now = time.time()
    minute = int(now // 60 * 60)
    for host, newest, updated in (("n1", minute, now), ("n2", minute - 600, minute - 590)):
        db = tmp_path / f"{host}.db"
        fill(db, newest - 3600, 61, lognormal(0.001), host=host, targets=("work",))
        db.with_name(db.name + ".live.json").write_text(json.dumps({
            "host": host, "pid": 1, "started": newest - 3600, "updated": updated,
            "interval": 1.0, "targets": {"work": {"ticks": 3600, "last_tick": updated,
                                                  "in_flight": [], "last": {}}}}))
    result = CliRunner().invoke(main, ["--db", str(tmp_path / "n*.db")])
    assert result.exit_code == 0, result.output
    numbers, merged = result.output.rstrip().splitlines()
    assert numbers.endswith("(provisional baseline, service stopped on n2)")
    assert merged.endswith("merged 2 of 2 hosts (2 files)")  # n2's records are in the hour
    doc = json.loads(CliRunner().invoke(main, ["--db", str(tmp_path / "n*.db"),
                                               "--json"]).output)
    assert doc["targets"][0]["service"]["state"] == "running"
    assert doc["targets"][0]["service"]["hosts"] == {"n1": "running", "n2": "stopped"}
    assert [(s["host"], s["state"], s["newest_record"]) for s in doc["services"]] == \
        [("n1", "running", minute), ("n2", "stopped", minute - 600)]
    alone = CliRunner().invoke(main, ["--db", str(tmp_path / "n2.db")])
    said = format_clock(minute - 600, time.time())  # with its date across midnight
    assert f"service stopped; numbers from {said}, 10m ago" in alone.output
