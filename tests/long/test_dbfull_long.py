"""The database volume fills up or turns read-only under the real service, end to end.

Opt-in (tests/long, ``--long``; root; about 2 minutes):

    python -m pytest --long -s tests/long/test_dbfull_long.py

Two services at once, each with its database on a volume of its own: a 4 MiB tmpfs that a test
file fills to the last block (ENOSPC), later deleted; an ext4 image mounted ``errors=remount-ro``
whose error hook turns it read-only under the open database, later unmounted, fsck'ed and
mounted again. Both break just after start-up and stay broken through two minute flushes;
after the repair, the next flush must write every minute, whole, once. The recorder's side
(minutes kept in memory, bounded, written once) runs in CI: tests/test_reliability_dbfull.py.
Results: docs/RELIABILITY.md.
"""

from __future__ import annotations

import time
from collections import Counter

import pytest

from slowdown.analysis.words import OPS
from tests.kit.dbfullkit import WRITABLE_AGAIN, WRITE_FAILED, _said, _service
from tests.kit.faultfs.realfs import tmpfs
from tests.kit.fixtures_fs import require_root
from tests.kit.reliabilitykit import ext4_volume, fill, snapshot
from tests.kit.servicekit import output, stop_service, wait_for


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
