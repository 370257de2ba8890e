"""A slow period weighs what it lasted (SPEC section 4): a tick skipped because the run before it
is still going counts, for every op, as the wait a user would have had then (the
expected-interval correction against coordinated omission).

Without it a slow minute held 4 to 7 samples (its ticks were skipped while the ops ran) and a
quiet one 60, so a window weighed a slow minute a tenth of a quiet one, and more than nine of
ten minutes had to be slow before a 10-minute median moved.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slowdown.analysis.store import Store
from slowdown.analysis.store.records import minute_of
from slowdown.analysis.words import OPS
from slowdown.probe.runtime.recorder import Recorder
from slowdown.probe.runtime.runner import InFlight, TargetRunner

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
