"""The kill -9 loop shared by tests/test_reliability_crash.py (CI) and tests/long/.

Each cycle starts the real service (`slowdown-probe run`, a subprocess) with its wall clock
a second or two before a minute boundary (libfaketime offset; the monotonic clock is real),
in a minute of its own that no other cycle uses, so that a minute flush falls inside the
cycle and every row of a minute comes from one cycle. Then it is killed with SIGKILL:

- ``random``: at a random moment from its start-up to past its flush (stratified, so that
  start-up, probing, the flush and after it all get their share);
- ``boundary``: 0-15 ms after the boundary, while the minute flush runs (it starts at the
  boundary and commits a few milliseconds later): before, inside or after its transaction;
- ``wal``: the instant the database's WAL file changes after the boundary (the flush's
  commit is being written), plus 0-5 ms;
- ``after``: 1.5-2 s after the boundary, when the minute must be in the database.

After every kill, a copy of the database (file, -wal, -shm: the original is left to the next
start to recover) must pass ``PRAGMA integrity_check``, hold every row it held before,
unchanged, no (series, start) twice, new rows only for the cycle's minute (the minute in
progress at the kill is never there), and no row with more results than ticks could have
happened; and when the kill came 1.5 s or more after the boundary of a minute the service had
probed, that minute must be there: at most the minute in progress at a kill is lost.
"""

from __future__ import annotations

import json
import math
import os
import random
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import psutil

from tests.kit.reliabilitykit import offset_env, snapshot
from tests.kit.servicekit import (
    TargetSpec,
    output,
    prepared,
    start_service,
    stop_service,
    wait_for,
)

INTERVAL = 0.5
OPS = 6
MUST_BE_WRITTEN_AFTER = 1.5  # seconds after the boundary: the flush has long committed
PROBED_BEFORE = 1.5  # the service started this long before the boundary: the minute has data


@dataclass
class Cycle:
    index: int
    mode: str
    minute: int  # the cycle's minute (fake wall clock); the next one is in progress at the kill
    launch: float  # fake wall time of the start
    kill: float  # fake wall time of the kill
    started: float | None  # fake wall time the service said it started (live state), if seen
    wal_changed: float | None  # wal mode: seconds after the boundary the WAL changed
    written: bool  # the minute's rows are in the database after the kill
    rows: int


def _wal_stamp(database: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(f"{database}-wal")
    except FileNotFoundError:
        return None
    return (st.st_mtime_ns, st.st_size)


def _started(database: Path, pid: int) -> float | None:
    try:
        state = json.loads(database.with_name(database.name + ".live.json").read_text())
    except (OSError, ValueError):
        return None
    return state.get("started") if state.get("pid") == pid else None


def _sleep_until(moment: float) -> None:
    delay = moment - time.time()
    if delay > 0:
        time.sleep(delay)


def workers_of(workspace: Path) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info.get("cmdline") or []
        if "slowdown.probe.probes.worker" in cmdline and str(workspace) in cmdline:
            found.append(proc)
    return found


def crash_loop(tmp_path: Path, cycles: int, seed: int = 1) -> list[Cycle]:
    rng = random.Random(seed)
    target = TargetSpec("crash", tmp_path / "target", data_size="4MiB", pool_files=20,
                        pool_dirs=2)
    target.path.mkdir(parents=True)
    config, database = prepared(tmp_path, [target], interval=f"{INTERVAL}s")
    base = int(time.time()) // 60 * 60 - 3 * 86400  # minutes of their own, three days back
    before = snapshot(database).minutes
    results: list[Cycle] = []
    for i in range(cycles):
        mode = "after" if i % 10 == 9 else ("random", "wal", "boundary", "wal")[i % 4]
        minute = base + 180 * i
        # "boundary" starts early enough that the service is up when its minute ends (a
        # slow start would make the kill land in start-up, not in the flush); "random" earlier
        # still, so that a start slowed by a busy machine leaves time probing before the end.
        lead = {"after": rng.uniform(3.0, 3.5), "random": rng.uniform(3.0, 4.0),
                "boundary": rng.uniform(1.5, 2.5)}.get(mode, rng.uniform(0.5, 2.5))
        offset = minute + 60 - lead - time.time()
        boundary = minute + 60 - offset  # the real time the service's minute ends
        proc = start_service(config, env=offset_env(offset))
        launch = time.time() + offset
        wal_changed = None
        try:
            if mode == "random":  # stratified: start-up, probing, flush and after alike
                stratum = (i // 4) % 10
                _sleep_until(time.time() + 0.2 + (lead + 2.3) * (stratum + rng.random()) / 10)
            elif mode == "boundary":
                _sleep_until(boundary + rng.uniform(0, 0.015))
            elif mode == "wal":
                _sleep_until(boundary - 0.05)
                stamp = _wal_stamp(database)
                while time.time() < boundary + 2.0:
                    if _wal_stamp(database) != stamp:
                        wal_changed = time.time() - boundary
                        break
                    time.sleep(0.0005)
                time.sleep(rng.uniform(0, 0.005))
            else:
                _sleep_until(boundary + rng.uniform(MUST_BE_WRITTEN_AFTER, 2.0))
            killed_at = time.time() + offset
            proc.kill()
            proc.wait(timeout=10)
            started = _started(database, proc.pid)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        snap = snapshot(database)
        where = f"cycle {i} ({mode}, killed {killed_at - (minute + 60):+.3f} s from the boundary)"
        assert snap.integrity == "ok", f"{where}: {snap.integrity}\n{output(proc)}"
        assert snap.duplicates == 0, where
        for key, row in before.items():
            assert snap.minutes.get(key) == row, f"{where}: row {key} changed or lost"
        new = {k: v for k, v in snap.minutes.items() if k not in before}
        assert all(start == minute for _, start in new), (where, sorted(new))
        possible = math.floor((minute + 60 - launch) / INTERVAL) + 1
        for key, (count, errors, skipped, _, longest, shortest) in new.items():
            assert count + errors + skipped <= possible, (where, key, count, errors, skipped)
            assert longest is None or 0 <= shortest <= longest < 5, (where, key, longest)
        written = bool(new)
        if (killed_at >= minute + 60 + MUST_BE_WRITTEN_AFTER and started is not None
                and started <= minute + 60 - PROBED_BEFORE):
            assert len(new) == OPS, f"{where}: the minute before the kill is missing\n" \
                                    f"{output(proc)}"
        results.append(Cycle(i, mode, minute, launch, killed_at, started, wal_changed, written,
                             len(new)))
        before = snap.minutes
        proc.log_path.unlink()  # type: ignore[attr-defined]
    # The workers of killed services see their input close and exit by themselves.
    workspace = target.path / ".slowdown" / "testhost"
    deadline = time.monotonic() + 15
    while workers_of(workspace) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not workers_of(workspace), "workers of killed services are still running"
    # And the service still runs cleanly on the database that took all those kills.
    minute = base + 180 * cycles
    offset = minute + 45 - time.time()  # its clock at 15 s before the minute's end
    proc = start_service(config, env=offset_env(offset))
    wait_for(lambda: _started(database, proc.pid), 14,  # up, on a busy machine too
             what="the clean start's first tick")
    _sleep_until(minute + 60 - offset + 2)  # after the minute's flush
    _, err = stop_service(proc)
    assert proc.returncode == 0, err
    snap = snapshot(database)
    assert snap.integrity == "ok" and snap.duplicates == 0
    assert sum(1 for _, start in snap.minutes if start == minute) == OPS, err
    return results


def summary(results: list[Cycle]) -> dict:
    """What the loop saw, per kill mode: for docs/RELIABILITY.md."""
    by_mode: dict[str, Counter] = {}
    for c in results:
        seen = by_mode.setdefault(c.mode, Counter())
        seen["kills"] += 1
        seen["minute written"] += c.written
        probed = c.started is not None and c.started <= c.minute + 60 - PROBED_BEFORE
        if c.started is None:
            seen["killed before the service was up"] += 1
        elif c.kill < c.minute + 60:
            seen["killed while probing, before the boundary"] += 1
        elif probed and not c.written:
            seen["killed in the flush before its commit (minute lost)"] += 1
        elif probed:
            seen["killed after the commit"] += 1
        if c.wal_changed is not None:
            seen["killed once the WAL changed"] += 1
    summary: dict = {mode: dict(counter) for mode, counter in by_mode.items()}
    delays = sorted(c.wal_changed for c in results if c.wal_changed is not None)
    if delays:
        summary["wal changed after the boundary (ms)"] = {
            "median": round(1e3 * delays[len(delays) // 2], 1), "max": round(1e3 * delays[-1], 1)}
    return summary
