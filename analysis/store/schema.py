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


def derived_rows(rows: list[tuple]) -> tuple[list[tuple], list[tuple]]:
    """The derived columns of records ``(series, start, hist, min, max)``, a batch at a time
    with numpy, as ``store.derived`` gives them for each decoded histogram, float for float
    and character for character (tests/test_migration.py holds it to that):
    ``([(p50, p90, p95, p99, buckets, series, start), ...], [(series, start) left over])``.

    Left over, for the SQL function to do (or to fail on, as it did), are the records whose
    histogram is not a well-formed blob of this encoding (another version or scale, a damaged
    body, indices not strictly ascending, a count beyond int64 sums) or that hold values but
    lack a float min and max.
    """
    import numpy as np

    from slowdown.analysis.histogram import codec, mapping_for
    from slowdown.analysis.histogram.histogram import rank
    from slowdown.analysis.histogram.mapping import MAX_SCALE, MIN_SCALE

    HUGE = 1 << 40  # values in one bucket: above, a record goes the SQL function's way

    def ints(parts: list[np.ndarray]) -> np.ndarray:
        return np.concatenate([p.astype(np.int64) for p in parts] or [np.empty(0, np.int64)])

    plain = [i for i, row in enumerate(rows)
             if type(row[2]) is bytes and len(row[2]) >= 3 and row[2][0] == codec.VERSION
             and MIN_SCALE <= (row[2][2] ^ 0x80) - 0x80 <= MAX_SCALE]
    odd = set(range(len(rows))).difference(plain)
    blobs = [rows[i][2] for i in plain]
    m = len(plain)
    scales = np.array([b[2] for b in blobs], np.uint8).view(np.int8).astype(np.int64)
    zero = np.zeros(m, np.int64)
    labels, indices, counts = [], [], []  # label: the record's position in ``plain``
    for s in np.unique(scales).tolist():
        members = np.flatnonzero(scales == s)
        try:
            groups, zeros, _ = codec.decode_blobs([blobs[i] for i in members], members, s)
        except codec.DecodeError:  # left to the SQL function, which names the damage
            odd.update(plain[i] for i in members.tolist())
            continue
        zero[members] = zeros
        odd.update(plain[i] for i in members[(zeros >= HUGE) | (zeros < 0)].tolist())
        for g in groups:
            odd.update(plain[i] for i in np.unique(g.label[g.count >= HUGE]).tolist())
            labels.append(g.label)
            indices.append(g.index)
            counts.append(g.count)
    label, index, count = ints(labels), ints(indices), ints(counts)
    if (label[1:] < label[:-1]).any():  # several layouts: each record's pairs in blob order
        order = np.argsort(label, kind="stable")
        label, index, count = label[order], index[order], count[order]
    unordered = (label[1:] == label[:-1]) & (index[1:] <= index[:-1])
    odd.update(plain[i] for i in np.unique(label[1:][unordered]).tolist())
    first = np.searchsorted(label, np.arange(m), "left")
    reached = np.concatenate(([0], np.cumsum(count)))  # values in all pairs before each
    total = zero + reached[np.searchsorted(label, np.arange(m), "right")] - reached[first]
    low, high = [rows[i][3] for i in plain], [rows[i][4] for i in plain]
    bounded = np.array([type(a) is float and type(b) is float for a, b in zip(low, high)],
                       bool)
    odd.update(plain[i] for i in np.flatnonzero(~bounded & (total > 0)).tolist())
    lo = np.array([a if type(a) is float else 0.0 for a in low], np.float64)[:, None]
    hi = np.array([b if type(b) is float else 0.0 for b in high], np.float64)[:, None]

    # Quantiles as Histogram.values_at_ranks takes them: the value of the rank's bucket kept
    # within [min, max]; rank 1 is the min, the last the max, a rank in the zero bucket
    # max(0, min).
    sizes, back = np.unique(total, return_inverse=True)
    ranks = np.array([[rank(q, size) for q in DERIVED_QUANTILES] for size in sizes.tolist()],
                     np.int64).reshape(len(sizes), len(DERIVED_QUANTILES))[back.ravel()]
    value = np.zeros(ranks.shape)
    if len(index):
        at = np.searchsorted(reached[1:], reached[first][:, None] + ranks - zero[:, None])
        at = np.minimum(at, len(index) - 1)  # (ranks in the zero bucket: not used)
        pair_scale = scales[label[at]]
        for s in np.unique(pair_scale).tolist():
            here = pair_scale == s
            unique, where = np.unique(index[at][here], return_inverse=True)
            bucket_value = mapping_for(s).value
            value[here] = np.array([bucket_value(i) for i in unique.tolist()])[where.ravel()]
    value = np.where(lo > value, lo, value)  # min(max(value, min), max), as Python's
    value = np.where(hi < value, hi, value)
    quantile = np.where(ranks == 1, lo, np.where(
        ranks == total[:, None], hi, np.where(
            ranks <= zero[:, None], np.where(lo > 0.0, lo, 0.0), value)))

    # Bucket counts at BUCKETS_SCALE, the zero count in the lowest bucket, as JSON text.
    shift = scales[label] - BUCKETS_SCALE if len(set(scales.tolist())) > 1 \
        else np.int64(scales[0] - BUCKETS_SCALE if m else 0)
    coarse = np.clip(np.where(shift >= 0, index >> np.maximum(shift, 0),
                              index << np.maximum(-shift, 0)), BUCKETS_LOWEST, BUCKETS_HIGHEST)
    owner, amount = label, count
    zeros = np.flatnonzero(zero)
    if len(zeros):  # each record's zero count before its pairs: in the lowest bucket
        owner = np.concatenate((zeros, label))
        owned = np.argsort(owner, kind="stable")
        owner = owner[owned]
        coarse = np.concatenate((np.full(len(zeros), BUCKETS_LOWEST), coarse))[owned]
        amount = np.concatenate((zero[zeros], count))[owned]
    run = np.flatnonzero(np.concatenate(
        ([True], (owner[1:] != owner[:-1]) | (coarse[1:] != coarse[:-1])))) if len(owner) \
        else np.empty(0, np.int64)
    summed = np.add.reduceat(amount, run) if len(run) else np.empty(0, np.int64)
    kept = summed != 0
    owner, coarse, summed = owner[run][kept], coarse[run][kept], summed[kept]
    # A few hundred distinct (bucket, count) pairs in a batch: each written once.
    pair = (coarse - BUCKETS_LOWEST) + summed * (BUCKETS_HIGHEST - BUCKETS_LOWEST + 1)
    distinct, which = np.unique(pair, return_inverse=True)
    width = BUCKETS_HIGHEST - BUCKETS_LOWEST + 1
    texts = [f'"{p % width + BUCKETS_LOWEST}":{p // width}' for p in distinct.tolist()]
    parts = [texts[j] for j in which.ravel().tolist()]
    bounds = np.searchsorted(owner, np.arange(m + 1)).tolist()

    empty = (None,) * len(DERIVED_QUANTILES)
    done = []
    for k, (i, qs, n) in enumerate(zip(plain, quantile.tolist(), total.tolist())):
        if i not in odd:
            row = rows[i]
            done.append((*(qs if n else empty),
                         "{" + ",".join(parts[bounds[k]:bounds[k + 1]]) + "}", row[0], row[1]))
    return done, [tuple(rows[i][:2]) for i in sorted(odd)]


def _fill_baseline_histograms(conn: sqlite3.Connection, table: str,
                              report: Callable[[int], None]) -> None:
    from slowdown.analysis.store.period_histograms import fill_baseline_histograms

    fill_baseline_histograms(conn, table, report)


FILLS = {5: Fill(("minutes", "hours"), _fill_derived),
         6: Fill(("baselines",), _fill_baseline_histograms)}
