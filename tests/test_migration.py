"""The long migration (schema 4 -> 5) on real files: the batched fill writes what release 5's
SQL wrote, byte for byte; it reports progress inside one transaction that a kill -9 rolls back;
the service turns the reports into EXTEND_TIMEOUT_USEC and READY=1 only after the migration
(a week of records here; 90 days in tests/long/test_migration_long.py)."""

from __future__ import annotations

import os
import signal
import sqlite3
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from slowdown.analysis.histogram import Histogram, codec
from slowdown.analysis.store import Store, StoreError, schema
from slowdown.probe.runtime.systemd_notify import MigrationProgress
from testdata.migrationdata import build, copy_database, digest, migrate_sql
from tests.kit.migrationkit import gaps, migrate_under_notify

T0 = 1_767_225_600  # 2026-01-01T00:00:00Z


def histogram(values, scale: int = 5) -> Histogram:
    h = Histogram(scale)
    h.record_many(np.asarray(values, dtype=np.float64))
    return h


def raw_blob(pairs: list[tuple[int, int]], scale: int = 5, zero: int = 0) -> bytes:
    """A blob as a writer other than ``codec.encode`` could leave it (u8 counts, i16 indices)."""
    flags = 0x08 if zero else 0
    head = struct.pack("<BBb", codec.VERSION, flags, scale)
    return head + (struct.pack("<Q", zero) if zero else b"") + b"".join(
        struct.pack("<hB", i, c) for i, c in pairs)


def odd_histograms(rng: np.random.Generator) -> list[tuple]:
    """``(count, min, max, blob)`` of every shape a record's histogram takes, and some it
    should not: scales from -2 to 12, zero values, wide indices and counts, values beyond the
    buckets' range, empty ones, blobs with unsorted, repeated or zero-count pairs."""
    shapes: list[Histogram] = [
        histogram(rng.lognormal(-8, 0.5, 60)),
        histogram(rng.lognormal(-6, 2.0, 60), scale=3),
        histogram(rng.lognormal(-6, 1.0, 60), scale=0),
        histogram(rng.lognormal(-6, 1.0, 60), scale=-2),
        histogram(rng.lognormal(-20, 0.3, 50), scale=12),  # indices beyond 16 bits
        histogram([0.0] * 5 + list(rng.lognormal(-8, 0.5, 30))),  # zero values
        histogram([0.0, 0.0, 0.0]),
        histogram([0.0, 2e-3]),
        histogram([3e-4]),
        histogram([1e-9, 5e-9, 3e-3, 2000.0, 4000.0]),  # beyond the SQL buckets both ways
        histogram(np.full(300, 1e-3)),  # counts beyond 8 bits
        histogram(np.concatenate([np.full(70_000, 2e-3), rng.lognormal(-6, 1, 3600)])),
        Histogram(),
    ]
    huge = Histogram()  # counts in 64 bits, beyond what the batched sums take
    huge.buckets.add(-300, 1 << 41)
    huge.zero_count = 1 << 62
    huge.count, huge.min, huge.max = (1 << 62) + (1 << 41), 0.0, 1e-4
    shapes.append(huge)
    made = [(h.count, h.min if h.count else None, h.max if h.count else None,
             codec.encode(h, moments=False)) for h in shapes]
    made += [
        (3, 1e-4, 2e-3, raw_blob([(-300, 1), (-310, 2)])),  # unsorted
        (2, 1e-4, 2e-3, raw_blob([(-300, 1), (-300, 2)])),  # repeated (the last one counts)
        (3, 1e-4, 2e-3, raw_blob([(-310, 0), (-300, 3)])),  # an empty pair
        (4, 0.0, 2e-3, raw_blob([(-300, 2)], zero=2)),
    ]
    return made


def schema4(path: Path, rows_per_series: int = 300, seed: int = 7) -> None:
    """A schema-4 file whose minutes and hours hold every shape of ``odd_histograms``."""
    rng = np.random.default_rng(seed)
    shapes = odd_histograms(rng)
    conn = sqlite3.connect(path, isolation_level=None)
    schema.migrate(conn, str(path), target=4)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("BEGIN")
    for sid, (target, op) in enumerate([("a", "md-stat"), ("a", "data-read"), ("b", "md-stat")],
                                       start=1):
        conn.execute("INSERT INTO series (id, host, target, op) VALUES (?, 'n1', ?, ?)",
                     (sid, target, op))
        for table, span in (("minutes", 60), ("hours", 3600)):
            picks = rng.integers(0, len(shapes), rows_per_series).tolist()
            conn.executemany(
                f"INSERT INTO {table} (series, start, count, sum, sumsq, min, max, hist) "
                "VALUES (?, ?, ?, 0, 0, ?, ?, ?)",
                [(sid, T0 + k * span, *shapes[pick]) for k, pick in enumerate(picks)])
    conn.execute("COMMIT")
    conn.close()


def both_ways(path: Path) -> tuple[Path, Path]:
    """Two copies of the version 4 database at ``path``, beside it: sql.db migrated to 5 by
    release 5's SQL, batched.db by the store; both then opened by the store."""
    old, new = path.with_name("sql.db"), path.with_name("batched.db")
    copy_database(path, old)
    copy_database(path, new)
    migrate_sql(old)
    Store(old).close()  # the migrations after 5 alike on both
    Store(new).close()
    return old, new


def test_the_batched_fill_writes_what_the_sql_function_wrote(tmp_path, monkeypatch):
    path = tmp_path / "v4.db"
    schema4(path)
    # Batches that end inside a series and span two: the key after which the next one reads.
    monkeypatch.setattr(schema, "FILL_BATCH", 37)
    old, new = both_ways(path)
    rows, expected = digest(old)
    assert rows > 1800
    assert digest(new) == (rows, expected)
    with sqlite3.connect(new) as conn:
        assert conn.execute("SELECT count(*) FROM hours WHERE buckets IS NULL").fetchone() == (0,)


def test_two_days_of_records_migrate_to_the_same_rows_as_release_5(tmp_path):
    path = tmp_path / "v4.db"
    build(path, 2)
    old, new = both_ways(path)
    assert digest(new) == digest(old)


def test_progress_goes_from_none_to_all_then_commits(tmp_path, monkeypatch):
    path = tmp_path / "v4.db"
    schema4(path, rows_per_series=100)
    monkeypatch.setattr(schema, "FILL_BATCH", 64)
    every: list[schema.Progress] = []
    with Store(path, migration_progress=every.append) as store:
        assert schema.version_of(store.conn) == schema.VERSION
        assert store.conn.in_transaction is False
    # Migration 8 (the tens of the 300 minute records) reports after 5, a series at a time.
    tens = [p for p in every if p.version == 8]
    assert [(p.done, p.committing) for p in tens] == [(0, False), (100, False), (200, False),
                                                      (300, False), (300, True)]
    reports = [p for p in every if p.version != 8]
    assert every == reports + tens
    total = 3 * 2 * 100
    assert reports[0] == schema.Progress(5, 0, total)
    last = reports[-1]
    assert (last.version, last.done, last.total, last.committing) == (5, total, total, True)
    done = [p.done for p in reports[:-1]]
    assert done == sorted(done) and done[-1] == total
    assert not any(p.committing for p in reports[:-1])
    assert max(np.diff(done)) <= 64 and len(reports) == 2 + 2 * -(-300 // 64)  # two tables
    # Nothing left to rewrite: no report at all (a new file, or one already at 5).
    later: list[schema.Progress] = []
    Store(path, migration_progress=later.append).close()
    Store(tmp_path / "new.db", migration_progress=later.append).close()
    assert later == []


def test_a_record_the_sql_function_refuses_fails_the_migration_and_leaves_version_4(tmp_path):
    path = tmp_path / "v4.db"
    schema4(path, rows_per_series=50)
    h = histogram([1e-3, 2e-3])
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("INSERT INTO minutes (series, start, count, min, max, hist) "  # values, but
                 "VALUES (1, ?, 2, NULL, NULL, ?)", (T0 - 60, codec.encode(h, moments=False)))
    conn.close()  # ... no min and max
    before = digest(path)
    assert before[0] > 300
    with pytest.raises(StoreError):
        Store(path)
    assert digest(path) == before
    copy = tmp_path / "sql.db"
    copy_database(path, copy)
    with pytest.raises(sqlite3.OperationalError):  # release 5 refused it too
        migrate_sql(copy)


KILLED_CHILD = """
import sys, time
from slowdown.analysis.store import Store
def progress(p):
    print(p.done, p.total, p.committing, flush=True)
    if p.done * 3 >= p.total:
        time.sleep(3600)  # killed here, inside the migration's transaction
Store(sys.argv[1], migration_progress=progress)
"""


def test_kill_9_mid_migration_leaves_schema_4_intact(tmp_path):
    path = tmp_path / "v4.db"
    build(path, 3)
    before = digest(path)
    child = subprocess.Popen([sys.executable, "-c", KILLED_CHILD, str(path)],
                             stdout=subprocess.PIPE, text=True)
    try:
        for line in child.stdout:
            done, total, _ = line.split()
            if int(done) * 3 >= int(total):
                break
        else:
            raise AssertionError(f"the child ended before a third: {child.wait()}")
        wal = Path(f"{path}-wal")
        assert wal.stat().st_size > 1 << 20, "nothing of the migration reached the file yet"
        os.kill(child.pid, signal.SIGKILL)
        assert child.wait(timeout=10) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        child.stdout.close()
    assert 0 < int(done) < int(total)
    assert digest(path) == before  # version 4, its schema and every row as they were
    with Store(path) as store:  # and the next start migrates it whole
        assert schema.version_of(store.conn) == schema.VERSION
    clean = tmp_path / "clean.db"
    build(clean, 3)
    Store(clean).close()
    assert digest(path) == digest(clean)


class Sent:
    """A notifier that keeps what it would send."""

    def __init__(self) -> None:
        self.messages: list[tuple[str, ...]] = []

    def extend_timeout(self, seconds: float, status: str = "") -> bool:
        self.messages.append((f"EXTEND_TIMEOUT_USEC={int(seconds * 1e6)}", f"STATUS={status}"))
        return True


def test_migration_progress_extends_at_most_every_period_and_always_at_the_commit():
    now = [100.0]
    sent = Sent()
    report = MigrationProgress(sent, every=2.0, extend=30.0, clock=lambda: now[0])
    total = 1_000_000
    for done in range(0, total + 1, 25_000):  # a quarter of a second a batch
        report(schema.Progress(5, done, total))
        now[0] += 0.25
    report(schema.Progress(5, total, total, committing=True, wal_bytes=500_000_000))
    assert sent.messages[0] == ("EXTEND_TIMEOUT_USEC=30000000",
                                "STATUS=migrating the database: 0 % (0 of 1,000,000 records, "
                                "schema 4 to 5)")
    assert sent.messages[1][1] == ("STATUS=migrating the database: 20 % (200,000 of 1,000,000 "
                                   "records, schema 4 to 5)")
    assert [m[0] for m in sent.messages[:-1]] == ["EXTEND_TIMEOUT_USEC=30000000"] * 6
    # The first, one every 2 s of 10 s, and the commit: time to write 1 GB at 10 MB/s.
    assert sent.messages[-1] == ("EXTEND_TIMEOUT_USEC=100000000",
                                 "STATUS=migrating the database: committing, 1,000,000 records, "
                                 "schema 4 to 5")
    assert len(sent.messages) == 1 + 5 + 1
    # The next migration that rewrites records starts its own count at once.
    report(schema.Progress(8, 0, 500))
    assert sent.messages[-1] == ("EXTEND_TIMEOUT_USEC=30000000",
                                 "STATUS=migrating the database: 0 % (0 of 500 records, "
                                 "schema 7 to 8)")


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_the_service_extends_its_start_timeout_through_a_week_long_migration(tmp_path):
    run = migrate_under_notify(tmp_path, days=7)
    print(f"build {run.build_seconds:.1f} s, READY after {run.ready - run.spawned:.1f} s, "
          f"{len(run.extends)} extensions, longest gap {max(gaps(run)):.2f} s")
