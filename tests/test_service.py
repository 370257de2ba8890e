"""The probing service end to end: the real `slowdown-probe run` on real and faulty filesystems."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time

import pytest

from tests.kit.faultfs import FaultFS
from tests.kit.servicekit import (
    TargetSpec,
    live,
    prepared,
    records,
    start_live,
    start_service,
    stop_service,
    wait_for,
    wait_service,
    write_config,
)

OPS = ("data-read", "data-write", "md-stat", "md-read", "md-delete", "md-write")


def read_cli(database, *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "slowdown.analysis.cli", "--db", str(database),
                           *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.scene("whole_minutes")  # tests/kit/scenes/whole_minutes.py, beside the others
def test_whole_minutes_on_real_directories(scene_outcome):
    scene_outcome()


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_injected_latency_shows_up_in_the_records(tmp_path):
    """50 ms more per read through FUSE shows as ~50 ms more on data-read and md-read."""
    with FaultFS(tmp_path / "backing", tmp_path / "mnt") as fs:
        target = TargetSpec("fuse", fs.mountpoint)
        prepared(tmp_path, [target])
        medians = []
        for delay in (0.0, 0.05):
            fs.clear()
            if delay:
                fs.delay(["read"], delay)
            db = tmp_path / f"run-{delay}.db"
            run_config = write_config(tmp_path / f"run-{delay}.toml", db, [target])
            proc = start_service(run_config, "--duration", "14s")
            err = wait_service(proc, 60)
            assert proc.returncode == 0, err
            runs = {op: [] for op in OPS}
            for rec in records(db):
                runs[rec.op].append(rec.histogram)
            medians.append({op: statistics.median(
                [h.quantile(0.5) for h in hs if h.count]) for op, hs in runs.items()})
        fs.clear()
    plain, slow = medians
    for op in ("data-read", "md-read"):
        assert 0.040 <= slow[op] - plain[op] <= 0.080, (op, plain[op], slow[op])
    assert slow["data-write"] - plain["data-write"] < 0.02


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_a_hung_target_reads_as_slow_and_never_delays_the_other(tmp_path):
    with FaultFS(tmp_path / "backing", tmp_path / "mnt") as fs:
        hung, healthy = TargetSpec("hung", fs.mountpoint), TargetSpec("healthy", tmp_path / "ok")
        config, database = prepared(tmp_path, [hung, healthy], abandon_after="20s")
        proc = start_live(config, database)
        try:
            first_tick = time.time()  # the live state appears just after the first tick
            started = live(database)["started"]
            time.sleep(3)
            hang_start = time.time()
            fs.hang("*")
            ages = []
            while time.time() - hang_start < 40:  # the stuck age is visible live, growing
                flights = live(database)["targets"]["hung"]["in_flight"]
                ages.append(max((f["age"] for f in flights), default=0.0))
                if len(ages) == 15:  # and the read side shows it as it happens
                    watch = read_cli(database, "watch", "--count", "1")
                    assert "STUCK" in watch and "hung" in watch, watch
                    now = json.loads(read_cli(database, "--json"))
                    hung_now = next(t for t in now["targets"] if t["target"] == "hung")
                    one_minute = hung_now["windows"][0]
                    assert any(o["raised_to_stuck"] and o["observed"] >= 10
                               for o in one_minute["ops"]), one_minute
                time.sleep(1)
            assert max(ages) >= 35, ages
            assert live(database)["targets"]["hung"]["abandoned_workers"] >= 1
            fs.release()
            wait_for(lambda: not live(database)["targets"]["hung"]["in_flight"], 15,
                     what="the hung target to recover")
            time.sleep(3)
            fs.hang("*")  # hang again, and stop the service in the middle of it
            wait_for(lambda: any(f["age"] > 2 for f in
                                 live(database)["targets"]["hung"]["in_flight"]), 10,
                     what="the second hang")
            # Stop after a minute with ticks in it is flushed, so that some minute ended before
            # the stop (the run is ~55 s: most runs have crossed the boundary by now).
            flushed = (int(first_tick) // 60 + 1) * 60 + 2
            time.sleep(max(0.0, flushed - time.time()))
            stopped_at = time.time()
            took, err = stop_service(proc, timeout=20)
        finally:
            if proc.poll() is None:
                proc.kill()
            fs.release()
    assert took < 10, f"exit took {took:.1f} s"
    assert proc.returncode == 0, err
    healthy_ops = [r for r in records(database, targets=("healthy",)) if r.op == "data-read"]
    completed = sum(r.histogram.count for r in healthy_ops)
    expected = stopped_at - started - 2  # the first tick comes within two seconds
    assert completed >= 0.99 * expected, (completed, expected)
    # A hang that delayed the healthy target would skip its ticks for 40 s; one op of its own
    # over a second (a local disk on a machine busy with other jobs) skips one.
    assert sum(r.skipped for r in healthy_ops) <= 0.01 * expected, healthy_ops
    hung_recs = records(database, targets=("hung",))
    assert max(r.stuck for r in hung_recs) >= 30, "no minute recorded the stuck age"
    longest = max(r.histogram.max for r in hung_recs if r.histogram.count)
    assert 35 <= longest <= 55, f"the hung op was not recorded whole: {longest}"
    # Every minute that ended before the stop is stored, for both targets.
    minutes = {r.start for r in records(database) if r.start < int(stopped_at) // 60 * 60}
    first = min(minutes)
    assert minutes == set(range(first, int(stopped_at) // 60 * 60, 60))


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_eio_and_enospc_are_counted_as_errors_and_the_service_keeps_running(tmp_path):
    with FaultFS(tmp_path / "backing", tmp_path / "mnt") as fs:
        target = TargetSpec("fuse", fs.mountpoint)
        config, database = prepared(tmp_path, [target])
        proc = start_live(config, database)
        try:
            time.sleep(2)
            fs.fail(["read"], "EIO")
            time.sleep(4)
            fs.clear()
            fs.fail(["write", "create"], "ENOSPC")
            time.sleep(4)
            fs.clear()
            before = live(database)["targets"]["fuse"]["ticks"]
            time.sleep(4)
            state = live(database)["targets"]["fuse"]
            assert proc.poll() is None, "the service exited on a target fault"
            assert state["ticks"] > before
            assert "lat" in state["last"]["data-read"], state["last"]
        finally:
            _, err = stop_service(proc)
    assert proc.returncode == 0, err
    errors = {op: 0 for op in OPS}
    counts = dict(errors)
    for rec in records(database):
        errors[rec.op] += rec.errors
        counts[rec.op] += rec.histogram.count
    for op in ("data-read", "md-read", "data-write", "md-write"):
        assert errors[op] >= 2, (op, errors)
    assert all(counts[op] > 0 for op in OPS), counts
    assert "EIO" in err and "ENOSPC" in err


@pytest.mark.timeout(120)
def test_the_live_state_is_rewritten_in_place_every_second(tmp_path):
    """One file, overwritten in place (no new file renamed over it each second), padded to
    whole KiB, fresh, and read whole every time by the read side's reader."""
    from slowdown.analysis.store.live import read_live

    config, database = prepared(tmp_path, [TargetSpec("one", tmp_path / "one")])
    path = database.with_name(database.name + ".live.json")
    proc = start_service(config, "--duration", "9s")
    try:
        wait_for(path.exists, 15, what="the live state")
        inodes, ticks = set(), []
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            inodes.add(path.stat().st_ino)
            assert path.stat().st_size % 1024 == 0
            state = read_live(database)
            assert state is not None and state["pid"] == proc.pid
            assert abs(state["updated"] - time.time()) < 2.0
            ticks.append(state["targets"]["one"]["ticks"])
            time.sleep(0.05)
    finally:
        err = wait_service(proc, 30)
    assert proc.returncode == 0, err
    assert len(inodes) == 1, inodes
    assert ticks == sorted(ticks) and ticks[-1] - ticks[0] >= 3, ticks
    assert not list(path.parent.glob("*.tmp"))
