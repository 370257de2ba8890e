"""The database schema and its forward migrations.

``PRAGMA user_version`` holds the schema version; ``PRAGMA application_id`` marks the file as
ours, so that slowdown never writes into an SQLite file some other program owns. Each
migration runs in the transaction that also bumps the version: a crash mid-way leaves the
previous version intact.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass

from slowdown.analysis.store import server_records, ten_minute_records, weekly_histograms

APPLICATION_ID = 0x534C4457  # "SLDW"

_RECORD_COLUMNS = """
    series  INTEGER NOT NULL REFERENCES series(id),
    start   INTEGER NOT NULL,          -- unix seconds, UTC, start of the span
    count   INTEGER NOT NULL,          -- successful ops (the histogram's values)
    errors  INTEGER NOT NULL DEFAULT 0,
    skipped INTEGER NOT NULL DEFAULT 0,
    sum     REAL NOT NULL DEFAULT 0,   -- seconds
    sumsq   REAL NOT NULL DEFAULT 0,   -- seconds squared
    min     REAL,                      -- seconds, NULL when count = 0
    max     REAL,
    stuck   REAL NOT NULL DEFAULT 0,   -- longest age of an op in flight, seconds
    hist    BLOB NOT NULL,             -- exponential histogram, see analysis/codec.py
    PRIMARY KEY (series, start)
"""

# Columns for SQL readers that cannot decode the histogram blobs (Grafana's SQLite plugin):
# quantiles of each record's histogram, and its counts per bucket at the coarse scale
# BUCKETS_SCALE as JSON ``{"index": count}``. Values at or below 2**-20 s (about 1 us) count
# in bucket BUCKETS_LOWEST, values above 2**10 s (about 17 min) in BUCKETS_HIGHEST, so the
# buckets line up with the Prometheus endpoint's (probe/exporters/metrics.py: the same edges
# at scale 1).
BUCKETS_SCALE = 2
BUCKETS_LOWEST = -81
BUCKETS_HIGHEST = 40
DERIVED_QUANTILES = (0.5, 0.9, 0.95, 0.99)
DERIVED_COLUMNS = ("p50", "p90", "p95", "p99", "buckets")


def derived_assignments(hist: str, low: str, high: str) -> str:
    """``p50 = hist_derived(...), ...``: the derived columns recomputed from a histogram blob
    and its min and max (SQL function registered by the store)."""
    return ", ".join(f"{column} = hist_derived({hist}, {low}, {high}, {i})"
                     for i, column in enumerate(DERIVED_COLUMNS))


def _latency_bucket_rows() -> str:
    """``(idx, lower, upper, value)`` of every bucket of the ``buckets`` column, as SQL."""
    from slowdown.analysis.histogram.mapping import ExponentialMapping

    m = ExponentialMapping(BUCKETS_SCALE)
    rows = [f"({BUCKETS_LOWEST}, NULL, {m.upper_bound(BUCKETS_LOWEST)!r}, "
            f"{m.upper_bound(BUCKETS_LOWEST)!r})"]
    rows += [f"({i}, {m.lower_bound(i)!r}, {m.upper_bound(i)!r}, {m.value(i)!r})"
             for i in range(BUCKETS_LOWEST + 1, BUCKETS_HIGHEST)]
    rows.append(f"({BUCKETS_HIGHEST}, {m.lower_bound(BUCKETS_HIGHEST)!r}, NULL, "
                f"{m.lower_bound(BUCKETS_HIGHEST)!r})")
    return ", ".join(rows)


STUCK_END = "stuck_end"  # schema 7's column (older files: ``stuck_end_of``)


def stuck_end_of(version: int, alias: str = "r") -> str:
    """The SQL of a record's stuck age at its end, on a file of schema ``version``: the column,
    or on an older file (read as it is) its stuck age, as every window took it before."""
    return f"{alias}.{STUCK_END}" if version >= 7 else f"{alias}.stuck"


MIGRATIONS: list[str] = [
    # 1: series and their minute and hour records.
    f"""
    CREATE TABLE series (
        id     INTEGER PRIMARY KEY,
        host   TEXT NOT NULL,
        target TEXT NOT NULL,
        op     TEXT NOT NULL,
        UNIQUE (host, target, op)
    );
    CREATE TABLE minutes ({_RECORD_COLUMNS}) WITHOUT ROWID;
    CREATE TABLE hours ({_RECORD_COLUMNS}) WITHOUT ROWID;
    CREATE INDEX minutes_by_start ON minutes (start);
    CREATE INDEX hours_by_start ON hours (start);
    """,
    # 2: baselines with their validity periods, and alert state that survives restarts.
    """
    CREATE TABLE baselines (
        id           INTEGER PRIMARY KEY,
        target       TEXT NOT NULL,
        op           TEXT NOT NULL,
        statistic    TEXT NOT NULL,
        value        REAL NOT NULL,       -- expected latency, seconds
        samples      INTEGER NOT NULL,    -- values behind it
        data_from    INTEGER NOT NULL,    -- span of the data it was computed from
        data_to      INTEGER NOT NULL,
        valid_from   INTEGER NOT NULL,    -- in force from (unix seconds)
        valid_to     INTEGER,             -- until, NULL while in force
        provisional  INTEGER NOT NULL DEFAULT 0,
        reason       TEXT,
        computed_at  INTEGER NOT NULL
    );
    CREATE INDEX baselines_lookup ON baselines (target, op, statistic, valid_from);
    CREATE TABLE alert_state (
        rule         TEXT NOT NULL,
        subject      TEXT NOT NULL,       -- what the rule matched, e.g. "work/md-stat"
        state        TEXT NOT NULL CHECK (state IN ('ok', 'pending', 'firing', 'resolved')),
        since        INTEGER NOT NULL,    -- when the current state began
        fired_at     INTEGER,
        resolved_at  INTEGER,
        last_sent    INTEGER,
        value        REAL,                -- the value that moved it into this state
        details      TEXT,                -- JSON
        PRIMARY KEY (rule, subject)
    );
    CREATE TABLE alert_log (
        id       INTEGER PRIMARY KEY,
        at       INTEGER NOT NULL,
        rule     TEXT NOT NULL,
        subject  TEXT NOT NULL,
        event    TEXT NOT NULL,           -- firing, resolved, repeat, test
        action   TEXT NOT NULL,
        ok       INTEGER NOT NULL,
        message  TEXT
    );
    """,
    # 3: node context per minute (is it my node or the filesystem?) and service state.
    """
    CREATE TABLE node (
        host             TEXT NOT NULL,
        start            INTEGER NOT NULL,   -- unix seconds, UTC, start of the minute
        load1            REAL,               -- 1-minute load average at the end of the minute
        cpu              REAL,               -- percent of all CPUs busy over the minute
        memory           REAL,               -- percent of memory in use
        disk_read_bytes  INTEGER,            -- summed over the node's disks, in the minute
        disk_write_bytes INTEGER,
        disk_reads       INTEGER,
        disk_writes      INTEGER,
        net_rx_bytes     INTEGER,
        net_tx_bytes     INTEGER,
        PRIMARY KEY (host, start)
    ) WITHOUT ROWID;
    CREATE TABLE state (
        key    TEXT PRIMARY KEY,
        value  TEXT NOT NULL,                -- JSON
        at     INTEGER NOT NULL
    );
    """,
    # 4: alert incidents keep their severity and clearing clock, and the messages they owe
    # wait in an outbox until every action has delivered them (or given up).
    """
    ALTER TABLE alert_state ADD COLUMN severity TEXT;          -- warning, critical
    ALTER TABLE alert_state ADD COLUMN clear_since INTEGER;    -- firing, back below since
    ALTER TABLE alert_state ADD COLUMN evaluated INTEGER;      -- last evaluation minute applied
    CREATE TABLE alert_outbox (
        id          INTEGER PRIMARY KEY,
        created     INTEGER NOT NULL,
        rule        TEXT NOT NULL,
        subject     TEXT NOT NULL,
        event       TEXT NOT NULL,       -- firing, resolved, repeat, escalated
        action      INTEGER NOT NULL,    -- position of the action in the rule, from 0
        type        TEXT NOT NULL,       -- command, webhook, email
        message     TEXT NOT NULL,       -- JSON, the notification
        attempts    INTEGER NOT NULL DEFAULT 0,  -- finished attempts
        next_at     REAL NOT NULL,       -- due from, unix seconds
        lease_until REAL,                -- an attempt runs until then
        done_at     INTEGER,             -- delivered or given up
        ok          INTEGER
    );
    CREATE INDEX alert_outbox_open ON alert_outbox (done_at, next_at);
    """,
    # 5: what SQL readers need without decoding histograms (Grafana): per record the p50, p90,
    # p95 and p99 of its histogram and its bucket counts at scale 2 as JSON, with a table of
    # those buckets' bounds. The store fills them on every write, merge and rollup;
    # _fill_derived (FILLS) fills the records written before, in the same transaction.
    f"""
    ALTER TABLE minutes ADD COLUMN p50 REAL;          -- seconds, NULL when count = 0
    ALTER TABLE minutes ADD COLUMN p90 REAL;
    ALTER TABLE minutes ADD COLUMN p95 REAL;
    ALTER TABLE minutes ADD COLUMN p99 REAL;
    ALTER TABLE minutes ADD COLUMN buckets TEXT;      -- JSON {{"index": count}}, scale 2
    ALTER TABLE hours ADD COLUMN p50 REAL;
    ALTER TABLE hours ADD COLUMN p90 REAL;
    ALTER TABLE hours ADD COLUMN p95 REAL;
    ALTER TABLE hours ADD COLUMN p99 REAL;
    ALTER TABLE hours ADD COLUMN buckets TEXT;
    CREATE TABLE latency_buckets (
        idx    INTEGER PRIMARY KEY,       -- key in the buckets JSON
        lower  REAL,                      -- exclusive, seconds (NULL: the lowest)
        upper  REAL,                      -- inclusive, seconds (NULL: the highest)
        value  REAL NOT NULL              -- the value standing for the bucket's members
    );
    INSERT INTO latency_buckets (idx, lower, upper, value) VALUES {_latency_bucket_rows()};
    """,
    # 6: the histogram behind each baseline, per (target, op, data period), so that a
    # cluster's expected value is the exact merge of its hosts' baselines (never a rebuild
    # from months of records). _fill_baseline_histograms (FILLS) fills it for the baselines
    # made before, from the records they were computed from where those still hold exactly
    # the baseline's samples (a baseline whose records were pruned or merged since stays
    # without one: readers then merge its period's records).
    """
    CREATE TABLE baseline_histograms (
        target     TEXT NOT NULL,
        op         TEXT NOT NULL,
        data_from  INTEGER NOT NULL,          -- the data period, as in baselines
        data_to    INTEGER NOT NULL,
        samples    INTEGER NOT NULL,          -- values in the histogram
        hist       BLOB NOT NULL,             -- codec.encode with its moments
        PRIMARY KEY (target, op, data_from, data_to)
    ) WITHOUT ROWID;
    """,
    # 7: whether a hang is over. Per record the age, at the end of its span, of the oldest op
    # still in flight then (0: none): a window is raised to the stuck age of an op still stuck
    # at its end (the latest record of each series), not to a hang that ended and whose op
    # was recorded (docs/WINDOWS.md). Records written before: a stuck age with no completed
    # op as long (the hung op did not return within the span) was still in flight.
    f"""
    ALTER TABLE minutes ADD COLUMN {STUCK_END} REAL NOT NULL DEFAULT 0; -- seconds
    ALTER TABLE hours ADD COLUMN {STUCK_END} REAL NOT NULL DEFAULT 0;
    UPDATE minutes SET {STUCK_END} = stuck WHERE stuck > 0 AND (max IS NULL OR max < stuck);
    UPDATE hours SET {STUCK_END} = stuck WHERE stuck > 0 AND (max IS NULL OR max < stuck)
    """,
    # 8: every series' minutes merged per ten minutes, beside them (ten_minute_records.py):
    # what a cluster view reads where whole ten minutes are shown. ten_minute_records.fill
    # (FILLS) makes them for the minutes written before, in the same transaction.
    ten_minute_records.CREATE,
    # 9: per-server records: each op's latencies per (host, target, op, server, ten minutes),
    # so that a fleet's probes add up per server (server_records.py).
    server_records.CREATE,
    # 10: the histogram of each hour of the week of a baseline's data period, for
    # ``[baseline] expected = "weekly"`` (weekly_histograms.py): a cluster merges each hour's
    # exactly. Made with the baselines from then on; an older baseline has none (flat).
    weekly_histograms.CREATE,
]

VERSION = len(MIGRATIONS)
# The oldest schema a reader reads as it is (readers never migrate): schema 5 lacks only the
# baselines' histograms, which a cluster view then merges from the records (a fleet whose
# services are upgraded one by one stays readable).
READABLE_FROM = 5


class SchemaError(Exception):
    """The file is not a slowdown database this version can use."""


@dataclass(frozen=True)
class Progress:
    """How far a migration that rewrites records is, for whoever waits on it (the service
    tells systemd, so that the start timeout never runs out under a migration that moves).

    ``done`` of ``total`` records rewritten; ``committing`` once every record is and only the
    COMMIT is left: it syncs the WAL (``wal_bytes`` then, and the few MiB of pages still in
    the page cache), and its checkpoint copies the WAL into the database file and syncs that.
    """

    version: int  # the version being migrated to
    done: int
    total: int
    committing: bool = False
    wal_bytes: int = 0

    @property
    def percent(self) -> float:
        return 100.0 * self.done / self.total if self.total else 100.0


# Records rewritten between two progress reports: about 0.1 s of work (under a second even at
# the speed of release 5's SQL-only fill).
FILL_BATCH = 8192


def version_of(conn: sqlite3.Connection) -> int:
    return conn.execute("PRAGMA user_version").fetchone()[0]


def check(conn: sqlite3.Connection, path: str) -> int:
    """Version of an existing database; refuses foreign files and newer schemas.

    The three are read in one statement, so in one read transaction: another process
    migrating a brand-new file between them would otherwise make it look like a foreign one
    (tables, but no id yet).
    """
    app, version, tables = conn.execute(
        "SELECT (SELECT application_id FROM pragma_application_id), "
        "(SELECT user_version FROM pragma_user_version), "
        "(SELECT count(*) FROM sqlite_master)").fetchone()
    if app != APPLICATION_ID and (tables or version or app):  # app: another program's mark
        raise SchemaError(f"{path}: not a slowdown database (refusing to touch it)")
    if version > VERSION:
        raise SchemaError(
            f"{path}: schema version {version} is newer than this slowdown knows ({VERSION}); "
            "upgrade slowdown to read it"
        )
    return version


def not_slowdown(path: str | os.PathLike) -> str:
    """What a file of version 0 (no slowdown schema) is, for a reader, which has nothing to
    read there, and for a writer that may not create a database, which writes nothing there."""
    try:
        empty = os.stat(path).st_size == 0
    except OSError:
        empty = False
    what = "an empty file" if empty else "an SQLite file without slowdown's tables"
    return f"{path}: not a slowdown database ({what}); refusing to touch it"


def _statements(script: str) -> list[str]:
    return [part.strip() for part in script.split(";") if part.strip()]


def migrate(conn: sqlite3.Connection, path: str, target: int = VERSION,
            progress: Callable[[Progress], None] | None = None) -> int:
    """Bring the schema forward to ``target``; returns the version found before.

    Each step re-reads the version under ``BEGIN IMMEDIATE``, so two processes opening a new
    file at once migrate it once. ``conn`` must be in autocommit mode (isolation_level None).
    A step that rewrites records (``FILLS``) calls ``progress`` before the first, after every
    ``FILL_BATCH`` and before its COMMIT, all inside the step's one transaction: an error, a
    kill or a crash at any point leaves the previous version intact.
    """
    found = check(conn, path)
    for version in range(found, target):
        conn.execute("BEGIN IMMEDIATE")
        try:
            if version_of(conn) == version:
                for statement in _statements(MIGRATIONS[version]):
                    conn.execute(statement)
                fill = FILLS.get(version + 1)
                if fill is not None:
                    _run_fill(conn, path, fill, version + 1, progress)
                conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                conn.execute(f"PRAGMA user_version = {version + 1}")
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:  # SQLite may have rolled back already (a full disk)
                conn.execute("ROLLBACK")
            raise
    return found


def _run_fill(conn: sqlite3.Connection, path: str, fill: Fill, version: int,
              progress: Callable[[Progress], None] | None) -> None:
    total = sum(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
                for table in fill.tables)
    if not total:
        return
    done = 0

    def report(rows: int) -> None:
        nonlocal done
        done += rows
        if progress is not None:
            progress(Progress(version, done, total))

    report(0)
    for table in fill.tables:
        fill.run(conn, table, report)
    if progress is not None:
        try:
            wal = os.path.getsize(f"{path}-wal")
        except OSError:  # not in WAL mode
            wal = 0
        progress(Progress(version, done, total, committing=True, wal_bytes=wal))


# -- the Python work of migrations ---------------------------------------------------------------

@dataclass(frozen=True)
class Fill:
    """Records a migration rewrites after its SQL, in the same transaction: every row of
    ``tables``, ``run(conn, table, report)`` calling ``report(rows)`` after each batch."""

    tables: tuple[str, ...]
    run: Callable[[sqlite3.Connection, str, Callable[[int], None]], None]


def _fill_derived(conn: sqlite3.Connection, table: str, report: Callable[[int], None]) -> None:
    """Migration 5: the derived columns of every record, ``FILL_BATCH`` records at a time in
    the order of the primary key (each batch a fresh query after the last key: never a cursor
    open on rows being updated).

    Release 5 ran ``UPDATE ... SET {derived_assignments}`` (one ``hist_derived`` call per
    column and record, 60 to 100 us a record); this writes the same values, byte for byte
    (``derived_rows``), in about 13 us a record (bench/bench_migrate.py).
    """
    from slowdown.analysis.store.derived_fill import derived_rows

    update = (f"UPDATE {table} SET p50 = ?, p90 = ?, p95 = ?, p99 = ?, buckets = ? "
              "WHERE series = ? AND start = ?")
    select = f"SELECT series, start, hist, min, max FROM {table}"
    rows = conn.execute(f"{select} ORDER BY series, start LIMIT ?", (FILL_BATCH,)).fetchall()
    while rows:
        computed, odd = derived_rows(rows)
        conn.executemany(update, computed)
        for key in odd:  # through the store's SQL function, exactly as release 5 did
            conn.execute(f"UPDATE {table} SET {derived_assignments('hist', 'min', 'max')} "
                         "WHERE series = ? AND start = ?", key)
        report(len(rows))
        rows = conn.execute(f"{select} WHERE (series, start) > (?, ?) "
                            "ORDER BY series, start LIMIT ?", (*rows[-1][:2], FILL_BATCH)
                            ).fetchall()


def _fill_baseline_histograms(conn: sqlite3.Connection, table: str,
                              report: Callable[[int], None]) -> None:
    from slowdown.analysis.store.period_histograms import fill_baseline_histograms

    fill_baseline_histograms(conn, table, report)


FILLS = {5: Fill(("minutes", "hours"), _fill_derived),
         6: Fill(("baselines",), _fill_baseline_histograms),
         8: Fill(("minutes",), ten_minute_records.fill)}
