"""Two slow minutes of ten on a FUSE filesystem, against a quiet hour whose baseline is in
force: a slow period weighs what it lasted (SPEC section 4; tests/test_slow_periods.py holds
the rule's property). Run by tests/test_scenes.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from slowdown.analysis.histogram import Histogram
from slowdown.analysis.stats.baseline import rebaseline
from slowdown.analysis.store import Store
from slowdown.analysis.store.records import Record
from slowdown.analysis.words import OPS
from tests.kit.faultfs import FaultFS
from tests.kit.servicekit import (
    TargetSpec,
    probe_cli,
    start_service,
    stop_service,
    write_config,
)


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


def scene(tmp_path: Path) -> None:
    """Every filesystem call 300 ms slower for the last two minutes of ten (a FUSE fault
    filesystem), after quiet minutes whose baseline is in force: the 10-minute window counts
    a sample per tick of each op, its q85 reads the slow level and check at q85 is CRITICAL;
    the hour's median stays where it was. (Asked once the filesystem is quick again, and
    made quick before the second slow minute's flush: while an op is in flight longer than a
    tick, every window is raised to its age, SPEC 4.)"""
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
            # Quick again half a second before the second slow minute ends, so that nothing is
            # in flight longer than a tick at its flush: an op (or the probe's own work after
            # its ops, the md round's status file) in flight there raises every window to its
            # age until the next minute is written (SPEC 4).
            time.sleep(max(0.0, start + 119.5 - time.time()))
            fs.clear()
            time.sleep(max(0.0, start + 120 + 6 - time.time()))  # two minutes flushed
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
            # (the ticks the last slow run held take the latencies of its ops that ran after
            # the filesystem was quick again: the nearest measurement of each op)
            assert rec.histogram.quantile(0.5) >= 0.3, (op, rec.histogram.quantile(0.5))
    windows = {w["window"]: w for t in shown["targets"] for w in t["windows"]}
    for o in windows[600]["ops"]:
        assert o["count"] >= 100 + 450, o  # the quiet ones and one per slow tick
        assert o["observed"] >= 0.3, o
    assert check.returncode == 2 and check.stdout.startswith("SLOWDOWN CRITICAL"), check.stdout
    hour = {w["window"]: w for t in median["targets"] for w in t["windows"]}[3600]
    assert hour["slowdown"] < 1.5, hour
