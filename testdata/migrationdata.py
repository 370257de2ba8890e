"""The schema-4 database of the long migration (schema 4 -> 5) and release 5's migration as it
ran, for bench/bench_migrate.py and tests/test_migration.py: ``build`` writes days of minute
records as the service of release 4 wrote them (histograms drawn from a pool of 1,024 per op, so
that it builds in seconds), ``copy_database`` copies one checkpointed, ``migrate_sql`` runs
release 5's migration as frozen in release5-migration5.sql (its statements, ending in ``UPDATE
... SET`` the ``hist_derived`` SQL function per column and record), ``digest`` hashes every
row, typed."""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
import struct
import time
from pathlib import Path

import numpy as np

from slowdown.analysis.histogram import Histogram, codec
from slowdown.analysis.store import schema, sql_functions
from slowdown.analysis.store.records import MINUTE

T0 = 1_767_225_600  # 2026-01-01T00:00:00Z
DAY = 86400
HOST = "node01"
TARGETS = ("scratch", "work")
OPS = ("data-read", "data-write", "md-stat", "md-read", "md-delete", "md-write")
MD_MEDIAN, DATA_MEDIAN, SIGMA = 200e-6, 3e-3, 0.5  # lognormal latencies, seconds
PER_MINUTE = 60
POOL = 1024  # distinct histograms per op
EMPTY_EVERY = 997  # every so many minutes of a series: errors only, an empty histogram
SEED = 20260101


# -- the schema-4 database ---------------------------------------------------------------------

def _pool(rng: np.random.Generator, median: float) -> list[tuple]:
    """``(count, sum, sumsq, min, max, blob)`` of POOL histograms of one op."""
    pool = []
    for values in rng.lognormal(np.log(median), SIGMA, (POOL, PER_MINUTE)):
        h = Histogram()
        h.record_many(values)
        pool.append((h.count, h.sum, h.sumsq, h.min, h.max, codec.encode(h, moments=False)))
    return pool


def build(path: Path, days: int, seed: int = SEED, t0: int = T0) -> int:
    """A database at schema version 4 (the project's own migrations) holding ``days`` of
    minute records of 2 targets x 6 ops from ``t0`` on, as the service of release 4 wrote
    them; returns the number of records. Rows go in with one ``executemany`` in key order."""
    rng = np.random.default_rng(seed)
    empty = codec.encode(Histogram(), moments=False)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        schema.migrate(conn, str(path), target=4)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = OFF")  # a scratch file: the build, not the test
        conn.execute("BEGIN")
        rows = []
        minutes = days * DAY // MINUTE
        pools = {op: _pool(rng, MD_MEDIAN if op.startswith("md-") else DATA_MEDIAN)
                 for op in OPS}
        for target in TARGETS:
            for op in OPS:
                sid = conn.execute("INSERT INTO series (host, target, op) VALUES (?, ?, ?)",
                                   (HOST, target, op)).lastrowid
                pool = pools[op]
                picks = rng.integers(0, POOL, minutes).tolist()
                for m, pick in enumerate(picks):
                    if m % EMPTY_EVERY == sid:
                        rows.append((sid, t0 + m * MINUTE, 0, PER_MINUTE, 0, 0.0, 0.0, None,
                                     None, 0.0, empty))
                    else:
                        count, s, ss, lo, hi, blob = pool[pick]
                        rows.append((sid, t0 + m * MINUTE, count, 0, 0, s, ss, lo, hi, 0.0,
                                     blob))
        conn.executemany(
            "INSERT INTO minutes (series, start, count, errors, skipped, sum, sumsq, min, max, "
            "stuck, hist) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
        conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    return len(rows)


def copy_database(source: Path, dest: Path) -> None:
    """A copy of a database, checkpointed first: then the file alone is all of it."""
    conn = sqlite3.connect(source)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    for suffix in ("", "-wal", "-shm"):
        Path(f"{dest}{suffix}").unlink(missing_ok=True)
    shutil.copyfile(source, dest)


def connect(path: Path) -> sqlite3.Connection:
    """A connection as the store's writer sets it up, without migrating."""
    conn = sqlite3.connect(path, isolation_level=None)
    sql_functions.register(conn)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    return conn


def build_at(path: Path, version: int, days: int = 1) -> None:
    """``build``'s file migrated up to schema ``version`` only: a file an older release
    wrote (8: the release before per-server records)."""
    build(path, days)
    conn = sqlite3.connect(path, isolation_level=None)
    sql_functions.register(conn)
    schema.migrate(conn, str(path), target=version)
    conn.close()


RELEASE5_MIGRATION = Path(__file__).with_name("release5-migration5.sql")


def release5_statements() -> list[str]:
    """The statements of release 5's migration 5, as frozen in release5-migration5.sql."""
    statements, current = [], ""
    for line in RELEASE5_MIGRATION.read_text().splitlines(keepends=True):
        current += line
        if sqlite3.complete_statement(current):
            statements.append(current.strip())
            current = ""
    assert not current.strip(), "release5-migration5.sql ends inside a statement"
    return statements


def migrate_sql(path: Path) -> float:
    """Release 5's migration 5 as it ran: its statements (the records updated by the SQL
    function), as frozen in release5-migration5.sql. Returns the seconds from BEGIN to the end
    of COMMIT."""
    statements = release5_statements()
    conn = connect(path)
    try:
        t0 = time.perf_counter()
        conn.execute("BEGIN IMMEDIATE")
        assert schema.version_of(conn) == 4
        for statement in statements:
            conn.execute(statement)
        conn.execute(f"PRAGMA application_id = {schema.APPLICATION_ID}")
        conn.execute("PRAGMA user_version = 5")
        conn.execute("COMMIT")
        return time.perf_counter() - t0
    finally:
        conn.close()


def digest(path: Path) -> tuple[int, str]:
    """Rows and a hash of every row of every table, each value typed (floats by their bits),
    and of the schema's text and version."""
    h = hashlib.blake2b()
    rows = 0
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        h.update(repr(conn.execute("PRAGMA user_version").fetchone()).encode())
        for name, sql in conn.execute("SELECT name, sql FROM sqlite_master ORDER BY name"):
            h.update(f"{name}\0{sql}\0".encode())
        tables = [r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        for table in tables:
            for row in conn.execute(f"SELECT * FROM {table} ORDER BY 1, 2"):
                rows += 1
                for v in row:
                    if type(v) is float:
                        h.update(b"f" + struct.pack("<d", v))
                    elif type(v) is bytes:
                        h.update(b"b%d:" % len(v) + v)
                    else:
                        text = repr(v).encode()
                        h.update(b"%s%d:" % (type(v).__name__[:1].encode(), len(text)) + text)
                h.update(b"\n")
    finally:
        conn.close()
    return rows, h.hexdigest()
