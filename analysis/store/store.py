"""The SQLite store: minute and hour records, read back merged across hosts, ops and files.

One file in WAL mode, so readers (the ``slowdown`` command, Grafana) never block the writer.
Writing a record whose (host, target, op, start) exists merges into it inside SQLite
(an upsert with the ``hist_merge`` function), so a re-written minute never duplicates.
"""

from __future__ import annotations

import glob
import json
import os
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

from slowdown.analysis.histogram import codec
from slowdown.analysis.store import schema, server_records, sql_functions, ten_minute_records
from slowdown.analysis.store.file_identity import FileIdentity
from slowdown.analysis.store.open_files import READERS, read_only_uri
from slowdown.analysis.store.records import (
    HOUR,
    MERGED,
    MINUTE,
    NODE_FIELDS,
    Aggregate,
    NodeContext,
    Record,
)
from slowdown.analysis.store.selection import Selection, named, plain_globs
from slowdown.analysis.store.sql_functions import derived
from slowdown.analysis.store.window import aggregate_rows

TABLES = {MINUTE: "minutes", HOUR: "hours"}
_COLUMNS = f"count, errors, skipped, sum, sumsq, min, max, stuck, {schema.STUCK_END}, hist"
_DERIVED = ", ".join(schema.DERIVED_COLUMNS)  # for SQL readers, see schema.py


class StoreError(Exception):
    """A database that cannot be opened, read or written; the message names the file."""


def _set_wal(conn: sqlite3.Connection, timeout: float) -> None:
    """``PRAGMA journal_mode = WAL``, retried: on a brand-new file that another process is
    setting up at the same moment, SQLite answers "database is locked" at once instead of
    waiting for the busy timeout."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def _refuse_copy(conn: sqlite3.Connection, path: Path) -> None:
    """A copy published to a shared directory (probe/exporters/publish.py) is read, never
    written: what was written into it would be lost at the next publish, and it would become
    WAL there."""
    try:
        row = conn.execute("SELECT value FROM state WHERE key = 'published'").fetchone()
    except sqlite3.OperationalError:  # a new file, or one from before the state table
        return
    if row is not None:
        try:
            mark = json.loads(row[0])
        except ValueError:
            mark = None
        mark = mark if isinstance(mark, dict) else {}
        raise StoreError(f"{path}: a copy published by host {mark.get('host', '?')}, read only; "
                         "write to that node's own database (its next copy carries it)")


def _upsert(table: str) -> str:
    merged = ("hist_merge(hist, excluded.hist)",  # blob, min and max after the merge
              "coalesce(min(min, excluded.min), min, excluded.min)",
              "coalesce(max(max, excluded.max), max, excluded.max)")
    return f"""
        INSERT INTO {table} (series, start, {_COLUMNS}, {_DERIVED})
        VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
        ON CONFLICT (series, start) DO UPDATE SET
            {schema.derived_assignments(*merged)},
            {schema.STUCK_END} = max({schema.STUCK_END}, excluded.{schema.STUCK_END}),{MERGED}
    """


class Store:
    """One database file. Writers migrate the schema forward; readers only check it."""

    def __init__(self, path: str | os.PathLike, readonly: bool = False, timeout: float = 10.0,
                 check_same_thread: bool = True,
                 migration_progress: Callable[[schema.Progress], None] | None = None,
                 create: bool = True):
        """``migration_progress``: called as a long migration moves (see ``schema.migrate``).
        ``create``: a writer may make a new database (the service); without, it writes only
        into a file that is already one (``slowdown rebaseline``), never into an empty or
        another program's file."""
        self.path = Path(path)
        self.readonly = readonly
        self._series: dict[tuple[str, str, str], int] = {}
        self._server_series: dict[tuple[str, str, str, str], int] = {}
        self._timeout, self._check_same_thread = timeout, check_same_thread
        self._watch_wal: str | None = None  # an immutable reader's cue to reconnect
        self._released = False  # a reader closed by the bound on open files (open_files.py)
        self._uri: str | None = None
        self.files: FileIdentity | None = None  # a writer's files, once open (``moved``)
        # What a visit of a cluster view read for a later question of the same command
        # (cluster_windows.py), each answer taken once: ("newest",), ("seen", start, end, hosts).
        self.known: dict[tuple, object] = {}
        try:
            if (readonly or not create) and not self.path.exists():
                raise StoreError(f"{self.path}: no such database")
            if readonly:
                self._conn = self._connect_reader()
            else:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._conn = self._connect(self.path)
            version = schema.check(self._conn, str(self.path))  # before anything is written
            if version == 0 and (readonly or not create):  # nothing of slowdown's in it
                raise StoreError(schema.not_slowdown(self.path))
            self.version = version if readonly else schema.VERSION
            if readonly:
                if not schema.READABLE_FROM <= version <= schema.VERSION:
                    raise StoreError(
                        f"{self.path}: schema version {version}, this slowdown reads "
                        f"{schema.VERSION}; open it once for writing (the service does) to migrate"
                    )
                READERS.using(self)
            else:
                _refuse_copy(self._conn, self.path)  # before WAL: never on a shared copy
                _set_wal(self.conn, timeout)
                self.conn.execute("PRAGMA synchronous = FULL")
                schema.migrate(self.conn, str(self.path), progress=migration_progress)
                # The files this connection writes, noted to see them go (file_identity.py).
                self.files = FileIdentity.at(self.path)
        except schema.SchemaError as exc:
            self._abandon()
            raise StoreError(str(exc)) from None
        except sqlite3.DatabaseError as exc:
            self._abandon()
            raise StoreError(f"{self.path}: {exc}") from None

    def moved(self) -> str | None:
        """For a writer: None while the files it writes are the files at its path, else what
        happened to them, in words (``file_identity.py``); readers: always None."""
        try:
            return self.files.changed() if self.files is not None else None
        except OSError as exc:
            return f"cannot look at it ({exc.strerror or exc})"

    def elsewhere_state(self) -> tuple:
        """What ``opened_elsewhere`` needs to know of this reader, opened and checked here."""
        return self.version, self._uri, self._watch_wal

    @classmethod
    def opened_elsewhere(cls, path: str | os.PathLike, state: tuple) -> Store:
        """A reader of a file another process opened and checked a moment ago
        (``view/opened_files.py``): closed until first used, then connected as after a
        ``release`` (open_files.py), without a second schema check."""
        store = cls.__new__(cls)
        store.path = Path(path)
        store.readonly = True
        store._series, store._server_series = {}, {}
        store._timeout, store._check_same_thread = 10.0, True
        store.version, store._uri, store._watch_wal = state
        store._released = True
        store._conn = None  # type: ignore[assignment]
        store.known = {}
        store.files = None
        return store

    def _abandon(self) -> None:
        """A file refused while opening: its connection (if any) closed at once."""
        if hasattr(self, "_conn"):
            READERS.forget(self)
            self._conn.close()

    def _connect(self, database: str | Path, uri: bool = False) -> sqlite3.Connection:
        conn = sqlite3.connect(database, uri=uri, timeout=self._timeout, isolation_level=None,
                               check_same_thread=self._check_same_thread)
        conn.execute(f"PRAGMA busy_timeout = {int(self._timeout * 1000)}")
        sql_functions.register(conn)
        return conn

    def _connect_reader(self) -> sqlite3.Connection:
        """(Again after a release: an immutable URI is kept while no writer has started.)"""
        if self._uri is None or os.path.exists(self._watch_wal or ""):
            uri = read_only_uri(self.path)
            self._watch_wal = f"{self.path.resolve()}-wal" if "immutable=1" in uri else None
            self._uri = uri if self._watch_wal is not None else None
        return self._connect(self._uri or uri, uri=True)

    @property
    def conn(self) -> sqlite3.Connection:
        """The connection. A reader opened ``immutable`` (no writer then) connects again once
        a writer has started (its ``-wal`` file appeared): an immutable connection would never
        see what the writer commits. The old connection is left to close when its last cursor
        goes, so a query running on it ends undisturbed."""
        if self._released:  # closed to bound the open files: open again
            self._released = False
            self._conn = self._connect_reader()
        elif self._watch_wal is not None and os.path.exists(self._watch_wal):
            self._conn = self._connect_reader()
        if self.readonly:
            READERS.using(self)
        return self._conn

    def release(self) -> None:
        """Close a reader's connection until it is next used (open_files.py)."""
        if not self._released:
            self._released = True
            self._conn.close()

    def close(self) -> None:
        self._watch_wal = None
        READERS.forget(self)
        self._released = False
        if self._conn is not None:  # None: opened elsewhere, never used here
            self._conn.close()

    def checkpoint(self) -> bool:
        """Copy the WAL's commits into the database file, without waiting for any reader
        (PASSIVE), so that a copy of the file alone (``cp``, ``rsync``, a backup tool that
        knows nothing of ``-wal``) holds what was written. False when a reader's snapshot
        held some of it back or SQLite refused; the next call copies the rest."""
        try:
            busy, frames, copied = self.conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        except sqlite3.Error:
            return False
        return busy == 0 and frames == copied

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writing -----------------------------------------------------------------------------

    def _series_id(self, host: str, target: str, op: str) -> int:
        key = (host, target, op)
        sid = self._series.get(key)
        if sid is None:
            self.conn.execute(
                "INSERT OR IGNORE INTO series (host, target, op) VALUES (?, ?, ?)", key
            )
            sid = self.conn.execute(
                "SELECT id FROM series WHERE host = ? AND target = ? AND op = ?", key
            ).fetchone()[0]
            self._series[key] = sid
        return sid

    def _server_series_id(self, host: str, target: str, op: str, server: str) -> int:
        key = (host, target, op, server)
        sid = self._server_series.get(key)
        if sid is None:
            self.conn.execute("INSERT OR IGNORE INTO server_series (host, target, op, server) "
                              "VALUES (?, ?, ?, ?)", key)
            sid = self.conn.execute(
                "SELECT id FROM server_series WHERE host = ? AND target = ? AND op = ? "
                "AND server = ?", key).fetchone()[0]
            self._server_series[key] = sid
        return sid

    def write(self, records: Iterable[Record], node: Iterable[NodeContext] = (),
              state: dict[str, object] | None = None,
              servers: Iterable[server_records.ServerRecord] = ()) -> int:
        """Write (or merge into) records, node context, service state and per-server records
        (``server_records.py``) in one transaction.

        Returns how many records were written.
        """
        rows: dict[str, list[tuple]] = {}
        minutes: list[tuple] = []  # with their histograms, for their tens
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            for rec in records:
                if rec.start % rec.span:
                    raise ValueError(f"record start {rec.start} is not aligned to {rec.span} s")
                h = rec.histogram
                row = (
                    self._series_id(rec.host, rec.target, rec.op), rec.start, h.count,
                    rec.errors, rec.skipped, h.sum, h.sumsq,
                    h.min if h.count else None, h.max if h.count else None,
                    rec.stuck, rec.stuck_end, codec.encode(h, moments=False), *derived(h),
                )
                rows.setdefault(TABLES[rec.span], []).append(row)
                if rec.span == MINUTE:
                    minutes.append((*row[:11], h))
            for table, table_rows in rows.items():
                self.conn.executemany(_upsert(table), table_rows)
            self.conn.executemany(ten_minute_records.UPSERT, ten_minute_records.rows_of(minutes))
            self.conn.executemany(server_records.UPSERT,
                                  server_records.rows_of(servers, self._server_series_id))
            self.conn.executemany(
                f"INSERT OR REPLACE INTO node (host, start, {', '.join(NODE_FIELDS)}) "
                f"VALUES (?, ?{', ?' * len(NODE_FIELDS)})",
                [(n.host, n.start, *(n.values.get(f) for f in NODE_FIELDS)) for n in node],
            )
            now = int(time.time())
            self.conn.executemany(
                "INSERT OR REPLACE INTO state (key, value, at) VALUES (?, ?, ?)",
                [(k, json.dumps(v), now) for k, v in (state or {}).items()],
            )
            self.conn.execute("COMMIT")
        except BaseException:
            self._rollback()
            self._series.clear()  # ids inserted in the rolled-back transaction are gone
            self._server_series.clear()
            raise
        return sum(len(r) for r in rows.values())

    def rollup(self, before: int) -> int:
        """Merge minute records older than ``before`` (rounded down to the hour) into hours.

        One transaction: the minutes are deleted only together with the hours being written.
        Returns the number of minute records merged.
        """
        cutoff = int(before) // HOUR * HOUR
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            moved, first = self.conn.execute(
                "SELECT count(*), min(start) FROM minutes WHERE start < ?", (cutoff,)
            ).fetchone()
            self.conn.execute(
                f"""INSERT INTO hours (series, start, {_COLUMNS})
                    SELECT series, start - start % {HOUR}, sum(count), sum(errors), sum(skipped),
                           sum(sum), sum(sumsq), min(min), max(max), max(stuck),
                           latest(start, {schema.STUCK_END}), hist_sum(hist)
                    FROM minutes WHERE start < ? GROUP BY series, start - start % {HOUR}
                    ORDER BY 1, 2
                """
                + _upsert("hours")[_upsert("hours").index("ON CONFLICT"):],
                (cutoff,),
            )
            if moved:  # the hours written or merged into get their derived columns anew
                self.conn.execute(
                    f"UPDATE hours SET {schema.derived_assignments('hist', 'min', 'max')} "
                    "WHERE start >= ? AND start < ?", (first - first % HOUR, cutoff))
            self.conn.execute("DELETE FROM minutes WHERE start < ?", (cutoff,))
            self.conn.execute(f"DELETE FROM {ten_minute_records.TABLE} WHERE start < ?", (cutoff,))
            # Per-server records go with the minutes they came from (no hourly form: the
            # question they answer, which server is slow, is asked of the recent past).
            self.conn.execute("DELETE FROM server_tens WHERE start < ?", (cutoff,))
            self.conn.execute("COMMIT")
        except BaseException:
            self._rollback()
            raise
        return moved

    def _rollback(self) -> None:
        """Roll back what is left of a failed transaction: SQLite has already rolled back
        one whose COMMIT failed on a full disk, and the error to report is that one."""
        if self.conn.in_transaction:
            self.conn.execute("ROLLBACK")

    # -- reading -----------------------------------------------------------------------------

    def _rows(self, selection: Selection, columns: str, order: str = "",
              whole_tens: bool = False) -> Iterator[tuple]:
        reads = [(span, table, *selection.where("r", span)) for span, table in TABLES.items()]
        tens = ten_minute_records
        inner = tens.inner(int(selection.start), int(selection.end)) if whole_tens and \
            selection.start is not None and selection.end is not None else None
        if inner is not None and tens.holds(self.version):  # its tens in place of minutes
            names, params = selection.series_where()
            reads[0] = (*reads[0][:2], f"{reads[0][2]} AND NOT (r.start >= ? AND r.start < ?)",
                        [*reads[0][3], *inner])
            reads.append((tens.TEN, tens.TABLE, f"{names} AND r.start >= ? AND r.start < ?",
                          [*params, *inner]))
        for span, table, where, params in reads:
            sql = (
                f"SELECT {span}, s.host, s.target, s.op, r.start, {columns} "
                f"FROM series s CROSS JOIN {table} r ON r.series = s.id WHERE {where} {order}"
            )
            try:
                yield from self.conn.execute(sql, params)
            except sqlite3.DatabaseError as exc:
                raise StoreError(f"{self.path}: {exc}") from None

    def aggregate_rows(self, selection: Selection, whole_tens: bool = False) -> Iterator[tuple]:
        """The selection's rows as ``aggregate_rows`` merges them (one query per table), for
        callers that split one read among several aggregates: every record that overlaps
        the selection's range, whole. ``whole_tens``: the ten-minute records wholly inside
        the range in place of their minutes (``ten_minute_records.py``: the same merge, sums to
        their rounding), for reads of long periods."""
        return self._rows(selection, aggregate_columns(self.version), whole_tens=whole_tens)

    def records(self, selection: Selection = Selection()) -> Iterator[Record]:
        """Every record that overlaps the selection (hours after minutes), each decoded and
        whole."""
        columns = ("r.count, r.errors, r.skipped, r.sum, r.sumsq, r.min, r.max, r.stuck, "
                   f"{schema.stuck_end_of(self.version)}, r.hist")
        for span, host, target, op, start, count, errors, skipped, s, ss, lo, hi, stuck, end, \
                blob in self._rows(selection, columns, "ORDER BY r.start"):
            h = codec.decode(blob, count, s, ss, lo, hi)
            yield Record(host, target, op, start, h, errors, skipped, stuck, span, end)

    def aggregate(self, selection: Selection = Selection()) -> Aggregate:
        """All records of the selection merged into one (vectorised over the histograms)."""
        return aggregate([self], selection)

    def state(self, key: str, default: object = None) -> object:
        """A value of the service's state kept with the data (e.g. a rotation position)."""
        row = self.conn.execute("SELECT value FROM state WHERE key = ?", (key,)).fetchone()
        return default if row is None else json.loads(row[0])

    def node(self, selection: Selection = Selection()) -> list[NodeContext]:
        """Node context rows of the selection's hosts and time range, oldest first."""
        clauses, params = [], []
        if selection.hosts:
            clauses.append("(" + " OR ".join("host GLOB ?" for _ in selection.hosts) + ")")
            params.extend(selection.hosts)
        if selection.start is not None:
            clauses.append("start >= ?")
            params.append(int(selection.start))
        if selection.end is not None:
            clauses.append("start < ?")
            params.append(int(selection.end))
        rows = self.conn.execute(
            f"SELECT host, start, {', '.join(NODE_FIELDS)} FROM node "
            f"WHERE {' AND '.join(clauses) or '1'} ORDER BY start, host",
            params,
        )
        return [NodeContext(r[0], r[1], dict(zip(NODE_FIELDS, r[2:]))) for r in rows]

    def series(self) -> list[tuple[str, str, str]]:
        return [tuple(r) for r in self.conn.execute(
            "SELECT host, target, op FROM series ORDER BY host, target, op")]

    def minute_records(self, host: str, since: int) -> int:
        """How many minute records of ``host`` start at ``since`` or later."""
        return self.conn.execute(
            "SELECT count(*) FROM minutes r JOIN series s ON s.id = r.series "
            "WHERE s.host = ? AND r.start >= ?", (host, since)).fetchone()[0]

    def latest_start(self, selection: Selection = Selection()) -> int | None:
        """Start of the newest minute record in the selection, or None."""
        newest = self.known.pop(("newest",), None)
        if newest is not None and selection.start is None and selection.end is None \
                and selection.pairs is None and plain_globs(selection):
            return max((start for series, start in newest.items()
                        if start is not None and named(series, selection)), default=None)
        where, params = selection.where()
        row = self.conn.execute(
            f"SELECT max(r.start) FROM minutes r JOIN series s ON s.id = r.series WHERE {where}",
            params,
        ).fetchone()
        return row[0]


def aggregate_columns(version: int = schema.VERSION) -> str:
    """What an aggregate needs of each record, after (span, host, target, op, start), from a
    file of schema ``version``: ``store.window`` reads the rows in this order."""
    return ("r.count, r.errors, r.skipped, r.sum, r.sumsq, r.min, r.max, r.stuck, r.hist, "
            + schema.stuck_end_of(version))


def aggregate(stores: Sequence[Store], selection: Selection = Selection(),
              whole_tens: bool = False) -> Aggregate:
    """Merge the selection over several database files (the hosts of a cluster): the window
    ``[selection.start, selection.end)``, each record counted by its overlap
    (``whole_tens``: see ``Store.aggregate_rows``)."""
    return aggregate_rows((row for store in stores
                           for row in store.aggregate_rows(selection, whole_tens)),
                          selection.start, selection.end)


def expand_paths(patterns: Iterable[str]) -> list[Path]:
    """Database files named by paths or globs; a pattern that names nothing is an error."""
    paths: dict[Path, None] = {}  # in order, each once (a set beside: thousands of files)
    for pattern in patterns:
        expanded = os.path.expanduser(pattern)
        # A file that exists is itself, even when its name holds glob syntax ("node[1].db").
        matches = [expanded] if os.path.isfile(expanded) else sorted(glob.glob(expanded))
        if not matches:
            raise StoreError(f"{pattern}: no such database")
        paths.update((Path(m), None) for m in matches)
    return list(paths)
