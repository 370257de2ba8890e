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
]

VERSION = len(MIGRATIONS)


class SchemaError(Exception):
    """The file is not a slowdown database this version can use."""


def version_of(conn: sqlite3.Connection) -> int:
    return conn.execute("PRAGMA user_version").fetchone()[0]


def check(conn: sqlite3.Connection, path: str) -> int:
    """Version of an existing database; refuses foreign files and newer schemas."""
    app = conn.execute("PRAGMA application_id").fetchone()[0]
    version = version_of(conn)
    if app != APPLICATION_ID:
        tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
        if tables or version:
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
