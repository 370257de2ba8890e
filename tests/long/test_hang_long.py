"""A target hung for ten minutes under the real service, next to a healthy one.

Opt-in (tests/long, ``--long``); about 12 minutes; needs root (FUSE):

    python -m pytest --long -s tests/long/test_hang_long.py

Injected: every operation on the FUSE target hangs for 600 s (default abandon_after, 30 s),
then released; a minute later it hangs again and the service is stopped in the middle of it.
Observed every 10 s: the stuck age live, the abandoned workers (at most 2), the service's
threads, memory and child processes (bounded), the healthy target's ticks (not one lost).
Afterwards: every minute of the run is in the database for both targets (a hang reads as slow,
never as no data), each records the longest stuck age, the hung op is recorded whole (about
600 s) in the minute it completed, and the service stopped within 10 s, exit 0, mid-hang.
The summary it prints is in docs/RELIABILITY.md.
"""

from __future__ import annotations

import json
import time

import psutil
import pytest

from tests.kit.faultfs import FaultFS
from tests.kit.fixtures_fs import require_root
from tests.kit.servicekit import (
    TargetSpec,
    live,
    output,
    prepared,
    records,
    start_live,
    stop_service,
    wait_for,
)

HANG = 600.0


@pytest.mark.timeout(1200)
def test_a_ten_minute_hang(tmp_path):
    require_root("FUSE")
    with FaultFS(tmp_path / "backing", tmp_path / "mnt") as fs:
        hung = TargetSpec("hung", fs.mountpoint, data_size="16MiB", pool_files=100,
                          pool_dirs=10)
        healthy = TargetSpec("healthy", tmp_path / "healthy", data_size="16MiB",
                             pool_files=100, pool_dirs=10)
        healthy.path.mkdir()
        config, database = prepared(tmp_path, [hung, healthy])
        proc = start_live(config, database)
        samples = []
        try:
            started = live(database)["started"]
            service = psutil.Process(proc.pid)
            time.sleep(10)
            fs.hang("*")
            hang_start = time.time()
            while time.time() - hang_start < HANG:
                state = live(database)["targets"]
                samples.append({
                    "t": round(time.time() - hang_start),
                    "age": round(max((f["age"] for f in state["hung"]["in_flight"]),
                                     default=0.0), 1),
                    "abandoned": state["hung"]["abandoned_workers"],
                    "skipped": state["hung"]["skipped"],
                    "healthy_ticks": state["healthy"]["ticks"],
                    "threads": service.num_threads(),
                    "rss_mib": round(service.memory_info().rss / 2**20, 1),
                    "children": len(service.children()),
                })
                assert proc.poll() is None, output(proc)
                time.sleep(10)
            fs.release()
            released = time.time()
            wait_for(lambda: not live(database)["targets"]["hung"]["in_flight"], 30,
                     what="the hung target to recover")
            recovered = time.time() - released
            time.sleep(60)
            fs.hang("*")
            wait_for(lambda: any(f["age"] > 3 for f in
                                 live(database)["targets"]["hung"]["in_flight"]), 15,
                     what="the second hang")
            stopped_at = time.time()
            took, err = stop_service(proc, timeout=20)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            fs.release()
    assert proc.returncode == 0, err
    assert took < 10, took
    ages = [s["age"] for s in samples]
    assert ages[-1] >= HANG - 15 and ages == sorted(ages), ages
    assert max(s["abandoned"] for s in samples) == 2
    assert max(s["children"] for s in samples) <= 4, samples  # 2 current workers, 2 abandoned
    assert max(s["threads"] for s in samples) - min(s["threads"] for s in samples) <= 4, samples
    assert max(s["rss_mib"] for s in samples) - samples[0]["rss_mib"] < 20, samples
    ticks = [s["healthy_ticks"] for s in samples]
    assert all(9 <= b - a <= 11 for a, b in zip(ticks, ticks[1:])), ticks
    healthy_recs = [r for r in records(database, targets=("healthy",))]
    hung_recs = records(database, targets=("hung",))
    expected = stopped_at - started - 2
    completed = sum(r.histogram.count for r in healthy_recs if r.op == "data-read")
    assert completed >= 0.99 * expected, (completed, expected)
    assert sum(r.skipped + r.errors for r in healthy_recs) == 0
    # Every minute of the run, both targets: the hang reads as slow, never as no data.
    last = int(stopped_at) // 60 * 60
    for recs in (healthy_recs, hung_recs):
        minutes = {r.start for r in recs if r.start < last}
        assert minutes == set(range(min(minutes), last, 60)), sorted(minutes)
    stuck = sorted((r.start, r.stuck) for r in hung_recs if r.stuck > 0)
    assert max(s for _, s in stuck) >= HANG - 60, stuck
    longest = max(r.histogram.max for r in hung_recs if r.histogram.count)
    assert HANG - 5 <= longest <= HANG + 40, longest
    summary = {
        "hang_s": HANG, "recovered_s": round(recovered, 1), "stop_took_s": round(took, 2),
        "longest_latency_s": round(longest, 1),
        "max_stuck_s": round(max(s for _, s in stuck), 1),
        "minutes_with_stuck": len({t for t, _ in stuck}),
        "max_abandoned": max(s["abandoned"] for s in samples),
        "max_children": max(s["children"] for s in samples),
        "threads": [min(s["threads"] for s in samples), max(s["threads"] for s in samples)],
        "rss_mib": [min(s["rss_mib"] for s in samples), max(s["rss_mib"] for s in samples)],
        "hung_skipped_ticks": samples[-1]["skipped"],
        "healthy_completed": completed, "healthy_expected": round(expected),
        "healthy_skipped_or_errors": 0,
    }
    print("HANG-SUMMARY " + json.dumps(summary))
