"""The aggregates of nested windows ending at one moment, over many files at once.

A cluster's ``slowdown`` shows a few windows (1m, 10m, 1h) for a dozen ops: a few dozen
numbers, from every host's records of the longest window (512 hosts: 368,640 minute
records). Each file gives its records of the longest window in one query, labelled by
window part; their numbers are added per (target, op, window part) in the rows' order, as
``aggregate`` adds them, and the histogram blobs of many files are decoded and summed
together with numpy into dense counts per label. A file that keeps ten-minute records
(``tens.py``) gives a part's whole tens in place of their minutes: the hour window is then
about 15 rows a series instead of 60. Each window is the sum of its part and the shorter
windows' parts. The result is what ``aggregate`` gives for each window's aggregate
(``store.window``) from the minutes (counts, extremes and histograms exactly; sums to their
rounding where tens stand in for minutes) where no window edge cuts a record: windows of
whole minutes ending on a minute, and no hour record overlapping the longest one. Otherwise it
returns None and the caller takes the general path, which counts a cut record by its overlap.
The stuck age at each window's end (``window.stuck_at_end``) comes from the latest record of
each series in the longest window, read only where some record of it holds one.
"""

from __future__ import annotations

import dataclasses
import math
import sqlite3
from collections.abc import Sequence

import numpy as np

from slowdown.analysis.histogram import Histogram, codec
from slowdown.analysis.histogram.buckets import BucketCounts
from slowdown.analysis.store import forking, tens
from slowdown.analysis.store.records import HOUR, MINUTE, Aggregate
from slowdown.analysis.store.schema import stuck_end_of
from slowdown.analysis.store.store import TABLES, Selection, Store, StoreError

# Blobs decoded together: a few MiB of pairs at a time, whatever the number of files.
CHUNK = 65536
# Files from which the reading is split between processes.
SPLIT_FROM = 64


def nested_windows(stores: Sequence[Store], names: Selection, end: int,
                   spans: Sequence[int], prepared: Prepared | None = None
                   ) -> dict[tuple[str, str, int], Aggregate] | None:
    """``(target, op, span) -> Aggregate`` of the records of ``names`` in
    ``[end - span, end)``, merged over ``stores``, for every span; None where an edge would
    cut a record (see the module's docstring). ``prepared``: these windows read already in
    the visits that opened ``stores`` (``Visit``), used if it is of the same query."""
    spans = sorted({int(s) for s in spans})
    if not spans:
        return {}
    if end % MINUTE or any(s % MINUTE for s in spans):
        return None
    width = len(spans)
    read = prepared.take(_key(names, end, spans), len(stores)) if prepared else None
    if read is None:
        query = _query(names, end, spans)
        read = _read_split(stores, query) if len(stores) >= SPLIT_FROM else _read(stores, query)
    if read is None:
        return None
    per_file, codes, parts, ends, visits = read
    _remember(stores, names, end - spans[-1], end, visits)
    sums: dict[tuple[str, str, int], list] = {}
    for groups in per_file:  # added in the order of the files, as one process adds them
        for target, op, k, numbers in groups:
            _add(sums.setdefault((target, op, k), [0, 0, 0, 0.0, 0.0, math.inf,
                                                   -math.inf, 0.0, None, None, 0.0]), numbers)
    result = {}
    for (target, op), code in codes.items():
        for k, span in enumerate(spans):
            agg = Aggregate()
            h = agg.histogram
            total, total_sq, lo, hi = 0.0, 0.0, math.inf, -math.inf
            for j in range(k + 1):
                got = sums.get((target, op, j))
                if got is None:
                    continue
                records, errors, skipped, s, ss, mn, mx, stuck, first, last, _ = got
                if code * width + j in parts:
                    h.merge(parts[code * width + j])
                agg.records += records
                agg.errors += errors
                agg.skipped += skipped
                agg.stuck = max(agg.stuck, stuck)
                agg.first = first if agg.first is None else min(agg.first, first)
                agg.last = last if agg.last is None else max(agg.last, last)
                total, total_sq, lo, hi = total + s, total_sq + ss, min(lo, mn), max(hi, mx)
            h.sum, h.sumsq, h.min, h.max = total, total_sq, lo, hi
            agg.stuck_end = max((age for latest, age in ends.get((target, op), ())
                                 if latest >= end - span), default=0.0)
            result[(target, op, span)] = agg
    return result


def _key(names: Selection, end: int, spans: Sequence[int]) -> tuple:
    return names, int(end), tuple(sorted({int(s) for s in spans}))


class Visit:
    """The windows of one query read in the visit that opens each file (``cli/opening.py``):
    ``add`` each store just opened, ``done`` at the end of a process's share of the files.
    The file is read once instead of twice (a connection, its schema and pages read again
    from the operating system: about a third of the cost of a cluster's ``slowdown``). A file
    that fails here (or holds an hour record in the window) leaves the whole visit unused:
    the windows are then read as without it, and a failure named there."""

    def __init__(self, names: Selection, end: int, spans: Sequence[int]) -> None:
        self.key = _key(names, end, spans)
        usable = self.key[2] and not (end % MINUTE or any(s % MINUTE for s in self.key[2]))
        self.reading = _Reading(_query(names, end, self.key[2])) if usable else None

    def add(self, store: Store) -> None:
        if self.reading is not None:
            try:
                used = self.reading.add(store)
            except StoreError:
                used = False
            if not used:
                self.reading = None

    def done(self) -> Read | None:
        return None if self.reading is None else self.reading.result()


@dataclasses.dataclass
class Prepared:
    """What the visits of every share read (``Visit.done``, in the files' order), joined."""

    key: tuple
    read: Read | None

    @classmethod
    def of(cls, names: Selection, end: int, spans: Sequence[int],
           reads: Sequence[Read | None]) -> Prepared:
        key = _key(names, end, spans)
        return cls(key, _joined(list(reads), len(key[2])))

    def take(self, key: tuple, files: int) -> Read | None:
        """The read, once, if it is of ``key`` and of ``files`` files."""
        read, self.read = self.read, None
        return read if key == self.key and read is not None and len(read[4]) == files \
            else None


def _query(names: Selection, end: int, spans: Sequence[int]) -> tuple:
    """(the records' statement and its parameters, each as a function of the file's schema
    version, the window's start and end, parts) of ``_read``: minutes, hours and, where a file keeps
    them, the tens wholly inside a part (``tens.py``) in one statement, labelled by window
    part."""
    part = "CASE " + " ".join(f"WHEN r.start >= {int(end - s)} THEN {k}"
                              for k, s in enumerate(spans)) + " END"
    where, params = dataclasses.replace(names, start=int(end - spans[-1]), end=int(end)).where()
    # The whole tens of each part (a part: the longer window less the shorter one), read in
    # place of their minutes from files that keep them.
    bounds = [end, *(end - s for s in spans)]
    inner = [r for r in (tens.inner(bounds[k + 1], bounds[k]) for k in range(len(spans))) if r]
    in_tens = " OR ".join(f"(r.start >= {a} AND r.start < {b})" for a, b in inner)

    def tables(version: int) -> list[tuple[str, str]]:
        """(table, its extra condition) of the records read from a file of ``version``."""
        if not inner or not tens.holds(version):
            return [(table, "") for table in TABLES.values()]
        return [(TABLES[MINUTE], f" AND NOT ({in_tens})"), (TABLES[HOUR], ""),
                (tens.TABLE, f" AND ({in_tens})")]

    def both(version: int) -> str:
        return " UNION ALL ".join(
            f"SELECT s.id AS id, s.target AS target, s.op AS op, {part} AS k, r.start AS start, "
            "r.count AS count, r.errors AS errors, r.skipped AS skipped, r.sum AS sum, "
            "r.sumsq AS sumsq, r.min AS min, r.max AS max, r.stuck AS stuck, "
            f"{stuck_end_of(version)} AS stuck_end, r.hist AS hist "
            f"FROM series s CROSS JOIN {table} r ON r.series = s.id WHERE {where}{extra}"
            for table, extra in tables(version))

    def params_of(version: int) -> list:
        return params * len(tables(version))
    return both, params_of, end - spans[-1], end, len(spans)


Read = tuple[list[list[tuple]], dict[tuple[str, str], int], dict[int, Histogram],
             dict[tuple[str, str], list[tuple[int, float]]], list[tuple[set, dict]]]


class _Reading:
    """``_read`` a file at a time: ``add`` each file (False where it holds an hour record in
    the window: the read is then of no use), ``result`` at the end."""

    def __init__(self, query: tuple) -> None:
        self.query = query
        self.per_file: list[list[tuple]] = []
        self.ends: dict[tuple[str, str], list[tuple[int, float]]] = {}
        self.codes: dict[tuple[str, str], int] = {}
        self.parts: dict[int, Histogram] = {}  # label -> the part's histogram
        self.blobs: list[bytes] = []
        self.labels: list[np.ndarray] = []
        self.visits: list[tuple[set, dict]] = []

    def add(self, store: Store) -> bool:
        statement, params_of, start, end, width = self.query
        if _hours_within(store, start, end):  # in the same visit of the file
            return False
        both, params = statement(store.version), params_of(store.version)
        try:
            names: dict[int, tuple[str, str, str]] = {}
            newest: dict[tuple[str, str, str], int | None] = {}
            for sid, host, target, op, latest in store.conn.execute(
                    "SELECT s.id, s.host, s.target, s.op, (SELECT max(m.start) FROM "
                    f"{TABLES[MINUTE]} m WHERE m.series = s.id) FROM series s"):
                names[sid] = (host, target, op)
                newest[(host, target, op)] = latest
            rows = store.conn.execute(
                "SELECT id, k, start, errors, skipped, sum, sumsq, min, max, stuck, stuck_end, "
                f"hist FROM ({both})", params).fetchall()
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{store.path}: {exc}") from None
        self.per_file.append(_sums(rows, names, self.ends))
        seen: set = set()
        if rows:  # columns at C speed: no Python work per record
            ids, ks = np.array([r[0] for r in rows]), np.array([r[1] for r in rows])
            top = int(ids.max())
            lookup = np.zeros(top + 1, np.int64)
            for sid in sorted(names):  # codes in the order of the ids, as before
                if sid <= top:
                    lookup[sid] = self.codes.setdefault(names[sid][1:], len(self.codes))
            self.labels.append(lookup[ids] * width + ks)
            self.blobs.extend(r[11] for r in rows)
            seen = {names[sid] for sid in set(ids.tolist())}
        self.visits.append((seen, newest))
        if len(self.blobs) >= CHUNK:
            _merge_into(self.parts, self.blobs, self.labels)
            self.blobs, self.labels = [], []
        return True

    def result(self) -> Read:
        _merge_into(self.parts, self.blobs, self.labels)
        self.blobs, self.labels = [], []
        return self.per_file, self.codes, self.parts, self.ends, self.visits


def _read(stores: Sequence[Store], query: tuple) -> Read | None:
    """Each file's sums per (target, op, part), in the order of the files; the code of each
    (target, op); the histogram of each label (code * parts + part); per (target, op) the
    (start, stuck_end) of each series' latest record where one of its records holds a stuck
    age at its end; per file, in the same visit, what a cluster view asks of it next (see
    ``_remember``): the series with a record in the longest window, and the start of each
    series' newest minute record. None where a file holds an hour record in the window."""
    reading = _Reading(query)
    for store in stores:
        if not reading.add(store):
            return None
    return reading.result()


def _sums(rows: list[tuple], names: dict[int, tuple[str, str, str]],
          ends: dict[tuple[str, str], list[tuple[int, float]]]) -> list[tuple]:
    """A file's ``(target, op, part, numbers)`` from its rows, each number added in the rows'
    order (records, errors, skipped, sum, sum of squares, min, max, stuck, first start, last
    start, largest stuck age at an end); and into ``ends``, of each series whose latest row
    ends with an op in flight, (its start, that age)."""
    groups: dict[tuple[str, str, int], list] = {}
    stuck_series = False
    for sid, k, start, errors, skipped, s, ss, mn, mx, stuck, end, _ in rows:
        key = (*names[sid][1:], k)
        g = groups.get(key)
        if g is None:
            groups[key] = [1, errors, skipped, s, ss, mn, mx, stuck, start, start, end]
            stuck_series = stuck_series or end > 0
            continue
        g[0] += 1
        g[1] += errors
        g[2] += skipped
        g[3] += s
        g[4] += ss
        if mn is not None:
            g[5] = mn if g[5] is None or mn < g[5] else g[5]
            g[6] = mx if g[6] is None or mx > g[6] else g[6]
        if stuck > g[7]:
            g[7] = stuck
        if start < g[8]:
            g[8] = start
        if start > g[9]:
            g[9] = start
        if end > g[10]:
            g[10] = end
            stuck_series = True
    if stuck_series:  # rare: an op stuck at the end of some record
        latest: dict[int, tuple[int, float]] = {}
        for sid, _, start, *_, end, _ in rows:
            if sid not in latest or start > latest[sid][0]:
                latest[sid] = (start, end)
        for sid, (start, end) in latest.items():
            if end > 0:
                ends.setdefault(names[sid][1:], []).append((start, end))
    return [(*key, numbers) for key, numbers in groups.items()]


def _remember(stores: Sequence[Store], names: Selection, start: int, end: int,
              visits: Sequence[tuple[set, dict]]) -> None:
    """What each file's visit read beyond the windows, kept on its store for the next
    questions of the same command (``store.known``, each answered once): which hosts have a
    record in the window (``merged.hosts_with_records``) and the newest minute record
    (``Store.latest_start``), so that neither opens the file again."""
    if names.targets or names.ops or names.pairs is not None:
        seen_key = None  # the window's series as filtered: not every series of the window
    else:
        seen_key = ("seen", int(start), int(end), tuple(names.hosts))
    for store, (seen, newest) in zip(stores, visits):
        if seen_key is not None:
            store.known[seen_key] = seen
        store.known[("newest",)] = newest


def _read_split(stores: Sequence[Store], query: tuple, processes: int | None = None
                ) -> Read | None:
    """``_read`` with the files split between this process and forked ones (one per free
    CPU, ``forking.run_all``; ``processes``: how many, this one among them); counts merge
    exactly, and the sums are added file by file in the parent, in the files' order, so the
    result is the same to the bit."""
    n = processes or min(forking.processes(), len(stores) // (SPLIT_FROM // 2) or 1)
    if n <= 1:
        return _read(stores, query)
    bounds = [len(stores) * i // n for i in range(n + 1)]
    shares = [stores[bounds[i]:bounds[i + 1]] for i in range(n)]
    return _joined(forking.run_all(shares, lambda share: _read(share, query)), query[4])


def _joined(reads: list[Read | None], width: int) -> Read | None:
    """The reads of consecutive shares of the files as one read of them all (None if any
    is): sums kept file by file, codes renumbered, each label's histograms merged."""
    if not reads or any(got is None for got in reads):
        return None
    per_file, codes, parts, ends, visits = reads[0]
    for files, their_codes, their_parts, their_ends, their_visits in reads[1:]:
        per_file += files
        visits += their_visits
        for pair, found in their_ends.items():
            ends.setdefault(pair, []).extend(found)
        for (target, op), code in their_codes.items():
            ours = codes.setdefault((target, op), len(codes))
            for k in range(width):
                h = their_parts.get(code * width + k)
                if h is not None:
                    if ours * width + k in parts:
                        parts[ours * width + k].merge(h)
                    else:
                        parts[ours * width + k] = h
    return per_file, codes, parts, ends, visits


def _hours_within(store: Store, start: int, end: int) -> bool:
    """Whether the file holds an hour record overlapping ``[start, end)``."""
    try:
        return store.conn.execute(f"SELECT 1 FROM {TABLES[HOUR]} WHERE start > ? AND start < ? "
                                  "LIMIT 1", (start - HOUR, end)).fetchone() is not None
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"{store.path}: {exc}") from None


def _add(into: list, numbers: Sequence) -> None:
    records, errors, skipped, s, ss, mn, mx, stuck, first, last, _ = numbers
    into[0] += records
    into[1] += errors
    into[2] += skipped
    into[3] += s or 0.0
    into[4] += ss or 0.0
    into[5] = min(into[5], mn) if mn is not None else into[5]
    into[6] = max(into[6], mx) if mx is not None else into[6]
    into[7] = max(into[7], stuck or 0.0)
    into[8] = first if into[8] is None else min(into[8], first)
    into[9] = last if into[9] is None else max(into[9], last)


def _merge_into(parts: dict[int, Histogram], blobs: list[bytes],
                labels: list[np.ndarray]) -> None:
    """Decode ``blobs`` together and add each label's counts to its part."""
    if not blobs:
        return
    label = np.concatenate(labels)
    order = np.argsort(label, kind="stable")  # decode_blobs wants labels in order
    groups, zeros, scale = codec.decode_blobs([blobs[i] for i in order.tolist()],
                                              label[order])
    zero_by = np.bincount(label[order], weights=zeros.astype(np.float64))
    index = np.concatenate([g.index.astype(np.int64) for g in groups] or [np.empty(0, np.int64)])
    count = np.concatenate([g.count.astype(np.int64) for g in groups] or [np.empty(0, np.int64)])
    owner = np.concatenate([g.label.astype(np.int64) for g in groups] or [np.empty(0, np.int64)])
    present = np.unique(label)
    if len(index):
        low = int(index.min())
        span = int(index.max()) - low + 1
        dense = np.bincount(owner * span + (index - low), weights=count,
                            minlength=(int(present.max()) + 1) * span)
        dense = dense.reshape(-1, span)
    for lab in present.tolist():
        h = Histogram(scale)
        if len(index):
            row = dense[lab]
            at = np.flatnonzero(row)
            h.buckets = BucketCounts(dict(zip((at + low).tolist(),
                                              row[at].astype(np.int64).tolist())))
        h.zero_count = int(zero_by[lab]) if lab < len(zero_by) else 0
        h.count = h.zero_count + h.buckets.total()
        h.sum = h.sumsq = 0.0
        if lab in parts:
            parts[lab].merge(h)
        else:
            parts[lab] = h


__all__ = ["Prepared", "Visit", "nested_windows"]
