"""The database volume fills up or turns read-only: probing goes on, minutes wait in memory.

End to end, two services at once, each with its database on a volume of its own:
- a 4 MiB tmpfs that a test file fills to the last block (ENOSPC), later deleted;
- an ext4 image mounted ``errors=remount-ro`` whose filesystem error hook turns it read-only
  under the open database (as a disk error does), later unmounted, fsck'ed and mounted again.
Both break just after start-up and stay broken through two minute flushes; after the repair,
the next flush must write every minute, whole, once. The recorder's bound (at least 60
minutes, then the oldest go first, said in the log) is checked directly, on 300 minutes.
"""

from __future__ import annotations

import logging
import re
import time
from collections import Counter

import numpy as np
import pytest

from slowdown.analysis.histogram import Histogram
from slowdown.analysis.store.records import NodeContext
from slowdown.analysis.words import OPS
from slowdown.probe.recorder import Recorder
from tests.datakit import fill as fill_database
from tests.datakit import lognormal
from tests.faultfs.realfs import tmpfs
from tests.fixtures_fs import require_root
from tests.reliabilitykit import ext4_volume, fill, offset_env, offset_to, snapshot
from tests.servicekit import (
    TargetSpec,
    output,
    probe_cli,
    start_service,
    stop_service,
    wait_for,
    write_config,
)

WRITE_FAILED = re.compile(r"cannot write the database (\S+) \((.*?)\); probing goes on")
WRITABLE_AGAIN = re.compile(r"database writable again after \d+ s; (\d+) buffered minute "
                            r"records written")


def _service(tmp_path, name, volume, launch_at):
    target = TargetSpec(name, tmp_path / f"target-{name}", data_size="4MiB", pool_files=20,
                        pool_dirs=2)
    target.path.mkdir()
    database = volume / "slowdown.db"
    past = int(time.time()) // 60 * 60 - 86400
    fill_database(database, past, 30, lognormal(0.002), host="testhost", targets=("old",))
    config = write_config(tmp_path / f"{name}.toml", database, [target])
    done = probe_cli(config, "prepare", "--no-progress")
    assert done.returncode == 0, done.stderr
    offset = offset_to(launch_at)
    proc = start_service(config, env=offset_env(offset))
    return proc, database, offset, snapshot(database).minutes


@pytest.mark.slow
@pytest.mark.timeout(360)
def test_full_and_read_only_database_volumes(tmp_path):
    require_root("database volumes")
    with tmpfs(tmp_path / "full", 4 << 20) as small, ext4_volume(tmp_path / "ro") as ext4:
        full_proc, full_db, full_offset, full_before = _service(tmp_path, "full", small.path, 55)
        ro_proc, ro_db, ro_offset, ro_before = _service(tmp_path, "ro", ext4.point, 55)
        procs = (full_proc, ro_proc)
        try:
            for db in (full_db, ro_db):  # up: the database is open, the first ticks ran
                wait_for(lambda db=db: db.with_name(db.name + ".live.json").exists(), 15,
                         what="the live state")
            filler = fill(small.path)
            ext4.fail()
            broke = time.time()
            # Two minute flushes fail: the first at the boundary after the start (the
            # services were started at second 55 of their clocks), the next a minute later.
            second_failure = max((broke + off) // 60 * 60 + 120 - off
                                 for off in (full_offset, ro_offset))
            time.sleep(max(0.0, second_failure - time.time()) + 3)
            for failures, proc in _said(procs, WRITE_FAILED):
                assert len(failures) == 1, output(proc)  # said once, with the reason
            (where, why), = WRITE_FAILED.findall(output(full_proc))
            assert where == str(full_db) and "full" in why, why
            (where, why), = WRITE_FAILED.findall(output(ro_proc))
            assert where == str(ro_db) and ("readonly" in why or "I/O" in why), why
            assert not any(WRITABLE_AGAIN.search(output(p)) for p in procs)
            # Space returns; the volume is repaired and mounted again.
            filler.unlink()
            ext4.repair()
            repaired = time.time()
            # Each service's next flush, by its own clock: the second service was started
            # after the first one's preparation, seconds later on a busy machine.
            next_flush = {off: (repaired + off) // 60 * 60 + 60 - off
                          for off in (full_offset, ro_offset)}
            time.sleep(max(0.0, max(next_flush.values()) - time.time()))
            # That flush writes every buffered minute with its fsyncs: seconds on a busy machine.
            deadline = time.time() + 20
            while time.time() < deadline and not all(a for a, _ in _said(procs, WRITABLE_AGAIN)):
                time.sleep(0.2)
            for again, proc in _said(procs, WRITABLE_AGAIN):
                assert len(again) == 1 and int(again[0]) >= 3 * len(OPS), output(proc)
            results = [(full_db, full_offset, full_before), (ro_db, ro_offset, ro_before)]
        finally:
            outcome = [stop_service(p) for p in procs if p.poll() is None]
        for proc in procs:
            assert proc.returncode == 0, output(proc)
            print("\n".join(line for line in output(proc).splitlines()
                            if "database" in line and "recorder" in line))
        assert len(outcome) == 2
        for database, offset, before in results:
            snap = snapshot(database)
            assert snap.integrity == "ok" and snap.duplicates == 0
            for key, row in before.items():  # what was there before the fault is intact
                assert snap.minutes[key] == row
            per_minute: dict[int, Counter] = {}
            for (sid, start), (count, errors, skipped, *_) in snap.minutes.items():
                _, target, op = snap.series[sid]
                if target in ("full", "ro"):
                    per_minute.setdefault(start, Counter())[op] += count + errors + skipped
            broken_minute = int(broke + offset) // 60 * 60
            whole = [m for m in sorted(per_minute)
                     if broken_minute < m < next_flush[offset] + offset - 60]
            # The minutes lived through while the volume was broken are there, whole: one
            # result (or skip) per tick, every tick of every op, nothing twice.
            assert len(whole) >= 1, sorted(per_minute)
            for m in [broken_minute, *whole]:
                assert sorted(per_minute[m]) == sorted(OPS), (m, per_minute[m])
            for m in whole:
                assert all(59 <= n <= 61 for n in per_minute[m].values()), (m, per_minute[m])


class FlakyStore:
    """Fails while ``broken``; remembers every record it wrote."""

    def __init__(self) -> None:
        self.broken = True
        self.written: list[tuple[str, str, int, int]] = []
        self.nodes: list[int] = []

    def write(self, records, nodes=(), state=None) -> int:
        if self.broken:
            raise OSError(28, "database or disk is full")
        self.written += [(r.target, r.op, r.start, r.histogram.count) for r in records]
        self.nodes += [n.start for n in nodes]
        return len(records)



def _said(procs, pattern: re.Pattern) -> list[tuple[list, object]]:
    """What each service, still running, said that matches ``pattern``."""
    found = []
    for proc in procs:
        assert proc.poll() is None, f"the service exited:\n{output(proc)}"
        found.append((pattern.findall(output(proc)), proc))
    return found

def test_the_buffer_keeps_at_least_an_hour_bounded_and_writes_it_once(caplog):
    caplog.set_level(logging.INFO, logger="slowdown.probe.recorder")
    recorder = Recorder("n1", database="/var/lib/slowdown/slowdown.db")
    assert recorder.max_buffered_minutes >= 60
    store = FlakyStore()
    t0 = 1_700_000_000 // 60 * 60
    minutes = 300
    for m in range(minutes):
        for s in range(0, 60, 10):
            recorder.result("work", "md-stat", 0.001 + s * 1e-5, t0 + 60 * m + s)
        recorder.node(NodeContext("n1", t0 + 60 * m, {"load1": 1.0}))
        assert not recorder.flush(store, t0 + 60 * (m + 1) + 0.5)
        assert recorder.pending_minutes() == min(m + 1, recorder.max_buffered_minutes)
    failing = [r for r in caplog.records if "cannot write the database" in r.getMessage()]
    assert len(failing) == 1 and "/var/lib/slowdown/slowdown.db" in failing[0].getMessage()
    assert "database or disk is full" in failing[0].getMessage()
    dropped = [r for r in caplog.records if "dropped" in r.getMessage()]
    assert dropped and recorder.dropped == minutes - recorder.max_buffered_minutes
    # Results of the minute in progress while the volume is still broken.
    recorder.result("work", "md-stat", 0.002, t0 + 60 * minutes + 1)
    store.broken = False
    assert recorder.flush(store, t0 + 60 * (minutes + 1) + 0.5)
    kept = list(range(minutes - recorder.max_buffered_minutes, minutes + 1))
    assert sorted(start for _, _, start, _ in store.written) == [t0 + 60 * m for m in kept]
    assert all(count == 6 for _, _, start, count in store.written if start < t0 + 60 * minutes)
    assert len(store.nodes) == len(set(store.nodes)) == recorder.max_buffered_minutes
    assert any("writable again" in r.getMessage() for r in caplog.records)
    assert recorder.pending_minutes() == 0
    assert recorder.flush(store, t0 + 60 * (minutes + 2) + 0.5)  # nothing is written twice
    assert len(store.written) == len(kept)


def test_results_recorded_while_a_minute_waits_are_merged_not_lost():
    recorder = Recorder("n1")
    store = FlakyStore()
    t0 = 1_700_000_000 // 60 * 60
    recorder.result("work", "md-stat", 0.001, t0 + 59.9)
    assert not recorder.flush(store, t0 + 60.0)
    recorder.result("work", "md-stat", 0.002, t0 + 59.95)  # a late straggler of that minute
    store.broken = False
    assert recorder.flush(store, t0 + 120.0)
    assert store.written == [("work", "md-stat", t0, 2)]


def test_histograms_survive_put_back_exactly():
    recorder = Recorder("n1")
    store = FlakyStore()
    t0 = 1_700_000_000 // 60 * 60
    values = np.random.default_rng(0).lognormal(-6, 1, 500)
    expected = Histogram()
    for i, v in enumerate(values):
        recorder.result("work", "data-read", float(v), t0 + (i % 60))
        expected.record(float(v))
    for k in range(5):
        assert not recorder.flush(store, t0 + 60 * (k + 1))
    records, _ = recorder.take(t0 + 60)
    (rec,) = records
    assert rec.histogram.count == expected.count
    assert rec.histogram.quantile(0.99) == expected.quantile(0.99)
