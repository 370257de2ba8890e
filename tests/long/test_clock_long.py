"""Wall clock steps under the running service: an hour forward, an hour back, 35 s back.

Opt-in (tests/long, ``--long``; about a minute):

    python -m pytest --long -s tests/long/test_clock_long.py

The real service runs under libfaketime with a control file (tests/kit/reliabilitykit.py): a
step applies at once to the service and its workers; the monotonic clock is not faked, as on
a real machine. One target is a FUSE mount whose reads take 300 ms more, so ops are in
flight across the steps; the other is a plain directory.

Observed: ticks and the live state go on after every step; no latency is negative or
stretched by a step; a minute never holds more results than seconds were lived in it (time
lived again after a step back is not recorded twice: the minutes already measured keep what
they had); the log says what happened; the service stops cleanly.
"""

from __future__ import annotations

import re
import time
from collections import Counter

import pytest

from tests.kit.faultfs import FaultFS
from tests.kit.reliabilitykit import SteppedClock, offset_to, snapshot
from tests.kit.servicekit import (
    TargetSpec,
    live,
    output,
    prepared,
    start_service,
    stop_service,
    wait_for,
    wait_live,
)

HOUR = 3600.0
WAITED = 10.0  # the longest wait a held tick may count here, far below the smallest step
DELAY = 0.3  # seconds added to every read through the FUSE target


def _resumed(database, clock: SteppedClock, ticks: int = 3, timeout: float = 8.0) -> None:
    """Wait until the live state is written by the clock as it is now and shows ``ticks``
    more ticks done by that clock: the jobs follow the step."""

    def state():
        s = live(database)
        fresh = clock.now() - 3 <= s["updated"] <= clock.now() + 1
        return fresh and sum(t["ticks"] for t in s["targets"].values()) // 2

    first = wait_for(state, timeout, step=0.1, what="the live state on the new time")
    wait_for(lambda: (state() or 0) >= first + ticks, timeout, step=0.1,
             what=f"{ticks} ticks on the new time")


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_clock_steps_forward_and_back(tmp_path):
    with FaultFS(tmp_path / "backing", tmp_path / "mnt") as fs:
        slow, plain = TargetSpec("fuse", fs.mountpoint), TargetSpec("plain", tmp_path / "plain")
        plain.path.mkdir()
        config, database = prepared(tmp_path, [slow, plain])
        fs.delay(["read"], DELAY)
        clock = SteppedClock(tmp_path)
        clock.set(offset_to(40))  # the service's clock starts at second 40 of a minute K
        minute = int(clock.now()) // 60 * 60
        proc = start_service(config, env=clock.env())
        lived: list[tuple[float, float]] = []  # spans of the service's clock, as lived
        cursor = 0.0

        def step_at(second: float, by: float) -> None:
            """At ``second`` of the service's clock (from the start of minute K), step it."""
            nonlocal cursor
            delay = minute + second - clock.now()
            assert delay > 0, f"late for the step at {second}"
            time.sleep(delay)
            before = clock.now()
            clock.step(by)
            lived.append((cursor, before))
            cursor = clock.now()

        try:
            wait_live(database)
            cursor = live(database)["started"]
            _resumed(database, clock)
            # K:50 -> K+60:50, an hour forward; the flush at K+61:00 writes K and K+60.
            step_at(50, HOUR)
            _resumed(database, clock)
            time.sleep(minute + HOUR + 61 - clock.now())
            # K+61:05 -> K+1:05, an hour back; ticks and the live state go on.
            step_at(HOUR + 65, -HOUR)
            _resumed(database, clock)
            # K+1:15 -> K+61:15, an hour forward again: past where the clock was.
            step_at(75, HOUR)
            _resumed(database, clock)
            # K+61:25 -> K+60:50, 35 s back, into minutes already written and measured.
            step_at(HOUR + 85, -35)
            _resumed(database, clock)
            # K+60:59 -> K+61:34, forward again, and stop a few seconds later.
            step_at(HOUR + 59, 35)
            _resumed(database, clock, 2)
            assert proc.poll() is None, output(proc)
            lived.append((cursor, clock.now()))
        finally:
            _, err = stop_service(proc)
            fs.clear()
    assert proc.returncode == 0, err
    print("\n".join(line for line in err.splitlines() if "clock" in line))
    for direction, seconds in (("forward", "3600.0"), ("back", "3600.0"), ("back", "35.0"),
                               ("forward", "35.0")):
        assert f"wall clock stepped {direction} by {seconds} s" in err, err
    left_out = sum(int(n) for n in re.findall(r"(\d+) results fell into time already measured",
                                              err))
    assert left_out >= 6 * 2 * 10, err  # ~10 s back in the hour, ~10 s back in the 35 s step
    snap = snapshot(database)
    assert snap.integrity == "ok" and snap.duplicates == 0
    per_minute: dict[int, Counter] = {}
    for (sid, start), (count, errors, skipped, total, longest, _) in snap.minutes.items():
        _, target, op = snap.series[sid]
        per_minute.setdefault(start, Counter())[op] += count + errors + skipped
        if count:  # no negative latency, none stretched by a step (35 s or an hour)
            low = DELAY * 0.95 if (target, op) in (("fuse", "data-read"), ("fuse", "md-read")) \
                else 0.0
            shortest = snap.minutes[(sid, start)][5]
            # A tick skipped while a run still goes counts as its wait (docs/WINDOWS.md): the
            # workers' start through the slow mount holds the first ticks for about 2 s.
            assert 0 <= shortest <= longest < WAITED, (target, op, start, longest)
            assert low <= total / count, (target, op, start, total / count)
    # Distinct seconds of the service's clock lived in each minute: no op of a minute holds
    # more results than ticks could have happened in them (two targets, a tick a second).
    seconds: dict[int, set[int]] = {}
    for a, b in lived:
        for t in range(int(a), int(b) + 1):
            seconds.setdefault(t // 60 * 60, set()).add(t)
    assert sorted(per_minute) == sorted({minute, minute + HOUR, minute + HOUR + 60}), (
        sorted(per_minute), minute)
    for m, by_op in per_minute.items():
        for op, n in by_op.items():
            assert n <= 2 * (len(seconds[m]) + 1), (m - minute, op, n, len(seconds[m]))
    # The minute K+60 was written at K+61:00 and lived again after the 35 s step back: it
    # keeps what it had (10 seconds of results, not 19).
    assert all(n <= 2 * 11 for n in per_minute[minute + HOUR].values()), per_minute
