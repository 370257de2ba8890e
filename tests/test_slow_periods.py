"""A slow period weighs what it lasted (SPEC section 4): a tick skipped because the run before it
is still going counts, for every op, as the wait a user would have had then (the
expected-interval correction against coordinated omission).

Without it a slow minute held 4 to 7 samples (its ticks were skipped while the ops ran) and a
quiet one 60, so a window weighed a slow minute a tenth of a quiet one, and more than nine of
ten minutes had to be slow before a 10-minute median moved.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slowdown.analysis.histogram import Histogram
from slowdown.analysis.stats.baseline import rebaseline
from slowdown.analysis.store import Store
from slowdown.analysis.store.records import Record, minute_of
from slowdown.analysis.words import OPS
from slowdown.probe.recorder import Recorder
from slowdown.probe.runner import InFlight, TargetRunner
from tests.faultfs import FaultFS
from tests.servicekit import (
    TargetSpec,
    probe_cli,
    start_service,
    stop_service,
    write_config,
)

T0 = 1_795_000_000 // 3600 * 3600


# One run: each op's latency (None: failed at once), and how many ticks it made skip.
runs = st.lists(st.tuples(
    st.lists(st.one_of(st.none(), st.floats(0.0005, 4.0)), min_size=len(OPS),
             max_size=len(OPS)),
    st.integers(0, 3)), min_size=1, max_size=40)


def _play(runner: TargetRunner, plan: list) -> tuple[list[float], dict]:
    """Feed ``runner`` the events of ``plan`` in time order, as its worker and ticks would:
    a tick every second; a run starts at a tick, its ops return one after another, and each
    tick that comes while it runs is skipped (at least ``skips`` of them: a run is stretched
    to cover them). Returns the ticks' walls and, per (op, tick wall), the value expected."""
    ticks, expected, wall = [], {}, float(T0)
    for number, (latencies, skips) in enumerate(plan, 1):
        flight = InFlight(number, 0.0)
        durations = [lat or 0.001 for lat in latencies]
        stretch = max(1.0, (skips + 0.5) / max(sum(durations), 1e-9))
        returns = list(np.cumsum(durations) * stretch + wall)
        end = returns[-1]
        skip_walls = [wall + k for k in range(1, int(end - wall) + 1) if wall + k < end]
        ticks.append(wall)
        events = [(at, "return", i) for i, at in enumerate(returns)] + \
                 [(at, "skip", None) for at in skip_walls]
        for at, kind, i in sorted(events, key=lambda e: (e[0], e[1] == "skip")):
            if kind == "return":
                op, lat = OPS[i], latencies[i]
                value = None if lat is None else durations[i] * stretch
                runner._returned(flight, op, value, at, failed=lat is None)
                expected[(op, minute_of(at))] = expected.get((op, minute_of(at)), 0) + 1
            else:
                stuck = next(i for i, r in enumerate(returns) if r > at)
                begun = returns[stuck - 1] if stuck else wall
                runner._waited(flight, at, OPS[stuck], at - begun)
                ticks.append(at)
                for op in OPS:
                    expected[(op, minute_of(at))] = expected.get((op, minute_of(at)), 0) + 1
        wall = float(int(end) + 1)  # the next tick after the run ended
    return ticks, expected


@settings(max_examples=25, deadline=None, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(plan=runs)
def test_every_tick_counts_once_for_every_op_by_the_latency_of_the_run_that_held_it(
        plan, tmp_path_factory):
    """The rule, and the same counts in every command: ``stats`` and ``slowdown --json``
    over the run's window count a sample or an error per tick of each op."""
    recorder = Recorder("n1")
    runner = TargetRunner("work", Path("/nonexistent"), recorder, interval=1.0)
    ticks, expected = _play(runner, plan)
    records, _ = recorder.take(float("inf"))
    seen = {(r.op, r.start): r.histogram.count + r.errors for r in records}
    # Failed ops with no latency count as errors, the others as samples: one per tick each.
    assert {k: v for k, v in seen.items() if v} == expected
    for op in OPS:
        assert sum(v for (o, _), v in seen.items() if o == op) == len(ticks)
    database = tmp_path_factory.mktemp("ticks") / "n1.db"
    with Store(database) as store:
        store.write(records)
    start, end = minute_of(ticks[0]), minute_of(ticks[-1]) + 60
    table = json.loads(_read("stats", "--db", str(database), "--since", f"@{start}",
                             "--until", f"@{end}", "--json"))
    counted = {row["op"]: row["count"] + row["errors"] for row in table["ops"]}
    shown = json.loads(_read("--db", str(database), "--at", f"@{end}", "--json"))
    hour = {o["op"]: o["count"] + o["errors"] for t in shown["targets"]
            for w in t["windows"] if w["window"] == 3600 for o in w["ops"]}
    for op in OPS:
        assert counted[op] == len(ticks), (op, table)
        if end - start <= 3600:
            assert hour[op] == len(ticks), (op, shown)


def _read(*args: str) -> str:
    from click.testing import CliRunner

    from slowdown.analysis.cli.main import main

    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_a_skipped_tick_takes_each_ops_latency_and_the_stuck_ops_age_at_least():
    recorder = Recorder("n1")
    runner = TargetRunner("work", Path("/nonexistent"), recorder, interval=1.0)
    flight = InFlight(1, 0.0)
    t = float(T0)
    runner._returned(flight, "data-read", 0.002, t + 0.002)
    runner._waited(flight, t + 1.0, "data-write", 0.998)  # data-write stuck 1 s so far
    runner._returned(flight, "data-write", 1.5, t + 1.502)
    runner._waited(flight, t + 2.0, "md-stat", 0.498)
    runner._returned(flight, "md-stat", 0.7, t + 2.202)
    records, _ = recorder.take(float("inf"))
    by_op = {r.op: r.histogram for r in records}
    assert by_op["data-read"].count == 3 and by_op["data-read"].max < 0.0021
    assert by_op["data-write"].count == 3 and by_op["data-write"].min >= 1.49
    assert by_op["md-stat"].count == 3 and by_op["md-stat"].min >= 0.69
    assert "md-read" not in by_op  # never reached: no guess


def _quiet(store: Store, host: str, target: str, start: int, end: int) -> None:
    """Quiet minutes (60 samples of about a millisecond each) of every op."""
    rng = np.random.default_rng(7)
    records = []
    for minute in range(start, end, 60):
        for op in OPS:
            h = Histogram()
            h.record_many(rng.lognormal(np.log(0.001), 0.2, 60))
            records.append(Record(host, target, op, minute, h))
    store.write(records)


def _slowdown(config: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "slowdown.analysis.cli.main", "--config",
                           str(config), *args], capture_output=True, text=True, timeout=60)


@pytest.mark.root
@pytest.mark.slow
@pytest.mark.timeout(400)
def test_two_slow_minutes_in_ten_read_slow_at_q85_and_leave_the_hour_median(tmp_path):
    """Every filesystem call 300 ms slower for the last two minutes of ten (a FUSE fault
    filesystem), after quiet minutes whose baseline is in force: the 10-minute window counts
    a sample per tick of each op, its q85 reads the slow level and check at q85 is CRITICAL;
    the hour's median stays where it was. (Asked once the filesystem is quick again: while
    an op is in flight longer than a tick, every window is raised to its age, SPEC 4.)"""
    with FaultFS(tmp_path / "backing", tmp_path / "mnt") as fs:
        database = tmp_path / "db" / "slowdown.db"
        config = write_config(tmp_path / "slowdown.toml", database,
                              [TargetSpec("slow", fs.mountpoint, pool_files=20, pool_dirs=2,
                                          data_size="4MiB")])
        done = probe_cli(config, "prepare", "--no-progress")
        assert done.returncode == 0, done.stderr
        # Start at the next minute; the quiet hour before it, its baseline in force 11
        # minutes before (before any window read below begins).
        start = int(time.time() // 60 * 60 + 60)
        with Store(database) as store:
            _quiet(store, "testhost", "slow", start - 3600, start)
            rebaseline(store, start - 660, "quiet hour", start - 3600, start - 660,
                       statistics=("median", "q85"))
        fs.delay("*", 0.3)
        time.sleep(max(0.0, start - time.time() + 0.5))
        proc = start_service(config)
        try:
            time.sleep(max(0.0, start + 120 + 1 - time.time()))  # two slow minutes flushed
            fs.clear()  # quick again: nothing stays in flight to raise a window to its age
            time.sleep(6)
            check = _slowdown(config, "check", "--stat", "q85", "--window", "10m")
            shown = json.loads(_slowdown(config, "--json", "--stat", "q85").stdout)
            median = json.loads(_slowdown(config, "--json", "--stat", "median").stdout)
        finally:
            fs.clear()
            _, log = stop_service(proc)
    with Store(database, readonly=True) as store:
        slow = [r for r in store.records() if r.start >= start]
    for op in OPS:
        # A sample per tick: the first minute began with the service's start (its workers
        # lock their workspaces first, through the slow filesystem too); the second is whole.
        # Counting completed probes alone, a minute held 4 or 5 here (55 of 60 ticks skipped).
        for minute, ticks in ((start, 45), (start + 60, 57)):
            (rec,) = [r for r in slow if r.op == op and r.start == minute]
            assert rec.histogram.count + rec.errors >= ticks, (op, minute, rec, log)
            assert rec.histogram.min >= 0.3, (op, rec.histogram.min)
    windows = {w["window"]: w for t in shown["targets"] for w in t["windows"]}
    for o in windows[600]["ops"]:
        assert o["count"] >= 100 + 450, o  # the quiet ones and one per slow tick
        assert o["observed"] >= 0.3, o
    assert check.returncode == 2 and check.stdout.startswith("SLOWDOWN CRITICAL"), check.stdout
    hour = {w["window"]: w for t in median["targets"] for w in t["windows"]}[3600]
    assert hour["slowdown"] < 1.5, hour
