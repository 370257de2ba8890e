"""The database schema and its forward migrations.

``PRAGMA user_version`` holds the schema version; ``PRAGMA application_id`` marks the file as
ours, so that slowdown never writes into an SQLite file some other program owns. Each
migration runs in the transaction that also bumps the version: a crash mid-way leaves the
previous version intact.
"""

from __future__ import annotations

import sqlite3

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
# buckets line up with the Prometheus endpoint's (probe/metrics.py: the same edges at scale 1).
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
    # those buckets' bounds. The store fills them on every write, merge and rollup; the
    # updates below fill the records written before (needs the store's SQL functions).
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
    UPDATE minutes SET {derived_assignments("hist", "min", "max")};
    UPDATE hours SET {derived_assignments("hist", "min", "max")};
    """,
]

VERSION = len(MIGRATIONS)


class SchemaError(Exception):
    """The file is not a slowdown database this version can use."""


def version_of(conn: sqlite3.Connection) -> int:
    return conn.execute("PRAGMA user_version").fetchone()[0]


def check(conn: sqlite3.Connection, path: str) -> int:
    """Version of an existing database; refuses foreign files and newer schemas.

    The three reads share one read transaction: another process migrating a brand-new file
    between them would otherwise make it look like a foreign one (tables, but no id yet).
    """
    own = not conn.in_transaction
    if own:
        conn.execute("BEGIN")
    try:
        app = conn.execute("PRAGMA application_id").fetchone()[0]
        version = version_of(conn)
        tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
    finally:
        if own:
            conn.execute("COMMIT")
    if app != APPLICATION_ID and (tables or version):
        raise SchemaError(f"{path}: not a slowdown database (refusing to touch it)")
    if version > VERSION:
        raise SchemaError(
            f"{path}: schema version {version} is newer than this slowdown knows ({VERSION}); "
            "upgrade slowdown to read it"
        )
    return version


def _statements(script: str) -> list[str]:
    return [part.strip() for part in script.split(";") if part.strip()]


def migrate(conn: sqlite3.Connection, path: str, target: int = VERSION) -> int:
    """Bring the schema forward to ``target``; returns the version found before.

    Each step re-reads the version under ``BEGIN IMMEDIATE``, so two processes opening a new
    file at once migrate it once. ``conn`` must be in autocommit mode (isolation_level None).
    """
    found = check(conn, path)
    for version in range(found, target):
        conn.execute("BEGIN IMMEDIATE")
        try:
            if version_of(conn) == version:
                for statement in _statements(MIGRATIONS[version]):
                    conn.execute(statement)
                conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                conn.execute(f"PRAGMA user_version = {version + 1}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    return found
