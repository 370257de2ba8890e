"""The SQLite store on real files: re-write merges, cluster reads, rollup, migration."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from slowdown.analysis.histogram import Histogram
from slowdown.analysis.store import Selection, Store, StoreError, aggregate, expand_paths, schema
from slowdown.analysis.store.records import HOUR, Record

T0 = 1_767_225_600  # 2026-01-01T00:00:00Z
OPS = ("data-read", "data-write", "md-stat", "md-read", "md-delete", "md-write")


def sample(rng: np.random.Generator, n: int = 60, mu: float = -8.0) -> np.ndarray:
    return rng.lognormal(mu, 0.7, n)


def record(host, target, op, start, values, **kw) -> Record:
    h = Histogram()
    h.record_many(values)
    return Record(host, target, op, start, h, **kw)


def test_write_read_round_trip(tmp_path):
    rng = np.random.default_rng(1)
    values = sample(rng)
    with Store(tmp_path / "a.db") as store:
        store.write([record("n1", "work", "md-stat", T0, values, errors=2, skipped=1, stuck=3.5)])
    with Store(tmp_path / "a.db", readonly=True) as store:
        (rec,) = store.records()
    assert rec.key == ("n1", "work", "md-stat", T0)
    assert (rec.errors, rec.skipped, rec.stuck, rec.span) == (2, 1, 3.5, 60)
    expected = Histogram()
    expected.record_many(values)
    assert rec.histogram == expected


def test_rewriting_a_minute_merges_never_duplicates(tmp_path):
    rng = np.random.default_rng(2)
    a, b = sample(rng, 30), sample(rng, 25, mu=-5)
    with Store(tmp_path / "a.db") as store:
        store.write([record("n1", "work", "md-stat", T0, a, errors=1, stuck=1.0)])
        store.write([record("n1", "work", "md-stat", T0, b, errors=2, skipped=4, stuck=0.5)])
        rows = store.conn.execute("SELECT count(*) FROM minutes").fetchone()[0]
        (rec,) = store.records()
    assert rows == 1
    whole = Histogram()
    whole.record_many(np.concatenate([a, b]))
    assert rec.histogram == whole
    assert (rec.errors, rec.skipped, rec.stuck) == (3, 4, 1.0)


def test_a_minute_with_only_errors_merges_with_one_with_values(tmp_path):
    with Store(tmp_path / "a.db") as store:
        store.write([Record("n1", "work", "md-read", T0, Histogram(), errors=5)])
        store.write([record("n1", "work", "md-read", T0, [0.002, 0.001])])
        (rec,) = store.records()
    assert (rec.errors, rec.histogram.count, rec.histogram.min, rec.histogram.max) == (
        5, 2, 0.001, 0.002)


def test_selection_by_glob_and_time(tmp_path):
    rng = np.random.default_rng(3)
    with Store(tmp_path / "a.db") as store:
        store.write(
            record("n1", target, op, T0 + 60 * m, sample(rng, 10))
            for target in ("home", "work") for op in OPS for m in range(5)
        )
        md = store.aggregate(Selection(targets=("work",), ops=("md-*",)))
        window = store.aggregate(Selection(ops=("data-read",), start=T0 + 60, end=T0 + 180))
    assert (md.records, md.histogram.count) == (20, 200)
    assert (window.records, window.first, window.last) == (4, T0 + 60, T0 + 120)


def test_cluster_merge_across_files_equals_merge_of_raw_samples(tmp_path):
    rng = np.random.default_rng(4)
    raw = []
    for host in ("n1", "n2", "n3"):
        with Store(tmp_path / f"{host}.db") as store:
            for m in range(10):
                values = sample(rng, 60, mu=rng.uniform(-9, -6))
                raw.append(values)
                store.write([record(host, "work", "md-stat", T0 + 60 * m, values)])
    stores = [Store(p, readonly=True) for p in expand_paths([str(tmp_path / "n*.db")])]
    merged = aggregate(stores, Selection(ops=("md-stat",)))
    whole = Histogram()
    whole.record_many(np.concatenate(raw))
    assert merged.histogram == whole
    assert merged.records == 30
    only_n2 = aggregate(stores, Selection(hosts=("n2",)))
    assert only_n2.histogram.count == 600


def test_rollup_merges_old_minutes_into_hours(tmp_path):
    rng = np.random.default_rng(5)
    recs = [record("n1", "work", op, T0 + 60 * m, sample(rng, 60), errors=m % 2, stuck=m / 10)
            for op in ("md-stat", "md-read") for m in range(3 * 60)]
    with Store(tmp_path / "a.db") as store:
        store.write(recs)
        before = store.aggregate()
        moved = store.rollup(T0 + 2 * HOUR + 1800)  # cutoff rounds down to T0 + 2 h
        assert moved == 2 * 2 * 60
        after = store.aggregate()
        assert after.histogram == before.histogram
        assert (after.errors, after.stuck) == (before.errors, before.stuck)
        spans = [r.span for r in store.records()]
        assert spans.count(HOUR) == 4 and spans.count(60) == 2 * 60
        assert store.rollup(T0 + 2 * HOUR) == 0  # nothing left to move
        # A late minute for an hour already rolled up merges into that hour.
        store.write([record("n1", "work", "md-stat", T0 + 60, [5.0])])
        store.rollup(T0 + 2 * HOUR)
        (hour,) = store.records(Selection(ops=("md-stat",), end=T0 + 1))
        assert hour.span == HOUR and hour.histogram.count == 3601 and hour.histogram.max == 5.0


def test_migration_from_an_older_schema(tmp_path):
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path, isolation_level=None)
    schema.migrate(conn, str(path), target=1)
    assert schema.version_of(conn) == 1
    conn.execute("INSERT INTO series (host, target, op) VALUES ('n1', 'work', 'md-stat')")
    conn.close()
    with pytest.raises(StoreError, match="schema version 1"):
        Store(path, readonly=True)
    with Store(path) as store:
        assert schema.version_of(store.conn) == schema.VERSION
        assert store.series() == [("n1", "work", "md-stat")]
        tables = {r[0] for r in store.conn.execute("SELECT name FROM sqlite_master")}
    assert {"baselines", "alert_state", "alert_log"} <= tables


def test_newer_schema_and_foreign_files_are_refused_untouched(tmp_path):
    newer = tmp_path / "newer.db"
    Store(newer).close()
    conn = sqlite3.connect(newer)
    conn.execute(f"PRAGMA user_version = {schema.VERSION + 1}")
    conn.close()
    with pytest.raises(StoreError, match="newer than this slowdown"):
        Store(newer)
    foreign = tmp_path / "foreign.db"
    conn = sqlite3.connect(foreign)
    conn.execute("CREATE TABLE mine (x)")
    conn.commit()
    conn.close()
    before = foreign.read_bytes()
    with pytest.raises(StoreError, match="not a slowdown database"):
        Store(foreign)
    assert foreign.read_bytes() == before
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreError, match=r"garbage\.db"):
        Store(garbage)
    assert garbage.read_bytes() == b"this is not a database" * 100


def test_missing_files_and_empty_globs_are_errors(tmp_path):
    with pytest.raises(StoreError, match="no such database"):
        expand_paths([str(tmp_path / "none-*.db")])
    with pytest.raises(StoreError, match="no such database"):
        Store(tmp_path / "absent.db", readonly=True)


WRITER = """
import sys, numpy as np
from slowdown.analysis.store import Store
from slowdown.analysis.store.records import Record
from slowdown.analysis.histogram import Histogram
store = Store(sys.argv[1])
rng = np.random.default_rng(0)
for m in range(int(sys.argv[2])):
    recs = []
    for op in ("md-stat", "md-read", "data-read"):
        h = Histogram(); h.record_many(rng.lognormal(-8, 1, 60))
        recs.append(Record("n1", "work", op, 1767225600 + 60 * m, h))
    store.write(recs)
print("done", flush=True)
"""


def test_concurrent_reader_while_the_writer_works(tmp_path):
    path = tmp_path / "live.db"
    Store(path).close()
    minutes = 300
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(minutes)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    seen = []
    with Store(path, readonly=True) as reader:
        while writer.poll() is None:
            agg = reader.aggregate()
            assert agg.histogram.count == 180 * agg.records // 3 * 1  # whole transactions only
            seen.append(agg.records)
            time.sleep(0.005)
        _, err = writer.communicate()
        assert writer.returncode == 0, err
        final = reader.aggregate()
    assert seen == sorted(seen), "a reader saw records disappear"
    assert len(set(seen)) > 3, "the reader did not overlap the writer"
    assert final.records == 3 * minutes and final.histogram.count == 180 * minutes


def test_bytes_per_minute_record(tmp_path):
    """A minute of 60 samples, histogram included, stays well under 600 bytes on disk."""
    rng = np.random.default_rng(6)
    path = tmp_path / "size.db"
    with Store(path) as store:
        for m in range(0, 24 * 60, 60):
            store.write(
                record("node-0001.cluster.example.org", "work", op, T0 + 60 * (m + k),
                       sample(rng, 60, mu=-9 if op.startswith("md") else -6))
                for op in OPS for k in range(60)
            )
        store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        store.conn.execute("VACUUM")
        rows = store.conn.execute("SELECT count(*) FROM minutes").fetchone()[0]
    per_row = Path(path).stat().st_size / rows
    assert rows == 6 * 24 * 60
    assert per_row < 600, per_row


def test_two_openers_of_a_brand_new_file_both_succeed(tmp_path):
    """Two connections creating the same new database at once: one migrates, the other
    waits or sees the finished schema, never a half-made "foreign" file."""
    import threading

    failures: list[str] = []

    def opener(path: Path, go: threading.Barrier) -> None:
        go.wait()
        try:
            Store(path).close()
        except Exception as exc:  # any failure is the finding
            failures.append(repr(exc))

    for i in range(150):
        path = tmp_path / f"new{i}.db"
        go = threading.Barrier(2)
        threads = [threading.Thread(target=opener, args=(path, go)) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert failures == []


def _minutes_in(path: Path) -> int:
    """Minute records in the file alone, as a copy without its -wal holds them."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return conn.execute("SELECT count(*) FROM minutes").fetchone()[0]
    except sqlite3.OperationalError:  # no such table: not even the schema reached the file
        return 0
    finally:
        conn.close()


def test_a_checkpoint_puts_what_was_written_into_the_file_alone(tmp_path):
    """What cp or rsync copies (the file, not its -wal) holds every write once the writer has
    checkpointed; a reader's open snapshot holds back only what came after it, until the next."""
    db, rng = tmp_path / "a.db", np.random.default_rng(2)
    with Store(db) as store:
        store.write([record("n1", "work", "md-stat", T0, sample(rng))])
        shutil.copyfile(db, tmp_path / "before.db")
        assert store.checkpoint()
        shutil.copyfile(db, tmp_path / "after.db")
        reader = sqlite3.connect(db)
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM minutes").fetchone()  # its snapshot: 1 record
        store.write([record("n1", "work", "md-stat", T0 + 60, sample(rng))])
        assert not store.checkpoint()  # the new minute is after the reader's snapshot
        shutil.copyfile(db, tmp_path / "held.db")
        reader.rollback()
        reader.close()
        assert store.checkpoint()
        shutil.copyfile(db, tmp_path / "later.db")
    assert _minutes_in(tmp_path / "before.db") == 0
    assert _minutes_in(tmp_path / "after.db") == 1
    assert _minutes_in(tmp_path / "held.db") == 1
    assert _minutes_in(tmp_path / "later.db") == 2
