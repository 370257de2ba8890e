"""The aggregates of nested windows ending at one moment, over many files at once.

A cluster's ``slowdown`` shows a few windows (1m, 10m, 1h) for a dozen ops: a few dozen
numbers, from every host's records of the longest window (512 hosts: 368,640 minute
records). Each window takes the whole tens inside it from a file that keeps ten-minute
records (``ten_minute_records.py``) and minutes elsewhere; the windows share the records
they both take.
Each file gives what the windows take in one query (``windows_query.py``), each row
labelled with its kind (the set of windows that take it); their numbers are added per
(target, op, kind) in the rows' order, and the histogram blobs of many files are decoded and
summed together with numpy into dense counts per label. Each window is the sum of the kinds
it takes. Six minutes into a ten, a series is 19 rows (14 minutes, 5 tens) where its minutes
are 60; on a ten, 7 (a minute, 6 tens). The result is what ``aggregate`` gives for each
window's aggregate (``store.window``) from the minutes (counts, extremes and histograms
exactly; sums to their rounding where tens stand in for minutes) where no window edge cuts a
record: windows of whole minutes ending on a minute, and no hour record overlapping the
longest one. Otherwise it returns None and the caller takes the general path, which counts a
cut record by its overlap. The stuck age at each window's end (``window.stuck_at_end``)
comes from the latest record of each series in the longest window, read only where some
record of it holds one.
"""

from __future__ import annotations

import dataclasses
import math
import sqlite3
from collections.abc import Sequence
from itertools import chain

import numpy as np

from slowdown.analysis.histogram import Histogram, codec
from slowdown.analysis.histogram.buckets import BucketCounts
from slowdown.analysis.store import forking
from slowdown.analysis.store.records import HOUR, MINUTE, Aggregate
from slowdown.analysis.store.store import TABLES, Selection, Store, StoreError
from slowdown.analysis.store.windows_query import WindowsQuery, windows_query

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
    query = windows_query(names, end, spans)
    width = query.width
    read = prepared.take(_key(names, end, spans), len(stores)) if prepared else None
    if read is None:
        read = _read_split(stores, query) if len(stores) >= SPLIT_FROM else _read(stores, query)
    if read is None:
        return None
    numbers, codes, parts, ends, visits = read
    _remember(stores, names, end - spans[-1], end, visits)
    totals = _totals(numbers)
    result = {}
    for (target, op), code in codes.items():
        for k, span in enumerate(spans):
            agg = Aggregate()
            h = agg.histogram
            total, total_sq, lo, hi = 0.0, 0.0, math.inf, -math.inf
            for j in query.members[k]:
                label = code * width + j
                records, errors, skipped, s, ss, mn, mx, stuck, first, last = totals[label]
                if not records:
                    continue
                if label in parts:
                    h.merge(parts[label])
                agg.records += int(records)
                agg.errors += int(errors)
                agg.skipped += int(skipped)
                agg.stuck = max(agg.stuck, stuck)
                agg.first = int(first) if agg.first is None else min(agg.first, int(first))
                agg.last = int(last) if agg.last is None else max(agg.last, int(last))
                total, total_sq, lo, hi = total + s, total_sq + ss, min(lo, mn), max(hi, mx)
            h.sum, h.sumsq, h.min, h.max = total, total_sq, lo, hi
            agg.stuck_end = max((age for latest, age in ends.get((target, op), ())
                                 if latest >= end - span), default=0.0)
            result[(target, op, span)] = agg
    return result


# The numbers of a (file, label): records, errors, skipped, sum, sum of squares, min, max,
# stuck, first start, last start; as they are where the file has no record of the label.
_FIELDS = 10
_EMPTY = np.array([0.0, 0.0, 0.0, 0.0, 0.0, math.inf, -math.inf, 0.0, math.inf, -math.inf])


def _totals(numbers: np.ndarray) -> list[list[float]]:
    """Each label's numbers over the files: sums added file by file in the files' order
    (``cumsum`` adds in order, as one process reading the files one by one)."""
    if not len(numbers):
        return [list(_EMPTY)] * numbers.shape[1]
    out = np.empty(numbers.shape[1:])
    out[:, 0:3] = numbers[:, :, 0:3].sum(axis=0)  # whole numbers: exact in any order
    out[:, 3:5] = np.cumsum(numbers[:, :, 3:5], axis=0)[-1]
    out[:, 5] = numbers[:, :, 5].min(axis=0)
    out[:, 6] = numbers[:, :, 6].max(axis=0)
    out[:, 7] = numbers[:, :, 7].max(axis=0)
    out[:, 8] = numbers[:, :, 8].min(axis=0)
    out[:, 9] = numbers[:, :, 9].max(axis=0)
    return out.tolist()


def _key(names: Selection, end: int, spans: Sequence[int]) -> tuple:
    return names, int(end), tuple(sorted({int(s) for s in spans}))


class Visit:
    """The windows of one query read in the visit that opens each file (``view/opened_files.py``):
    ``add`` each store just opened, ``done`` at the end of a process's share of the files.
    The file is read once instead of twice (a connection, its schema and pages read again
    from the operating system: about a third of the cost of a cluster's ``slowdown``). A file
    that fails here (or holds an hour record in the window) leaves the whole visit unused:
    the windows are then read as without it, and a failure named there."""

    def __init__(self, names: Selection, end: int, spans: Sequence[int]) -> None:
        self.key = _key(names, end, spans)
        usable = self.key[2] and not (end % MINUTE or any(s % MINUTE for s in self.key[2]))
        self.reading = _Reading(windows_query(names, end, self.key[2])) if usable else None

    def add(self, store: Store) -> None:
        if self.reading is not None:
            try:
                used = self.reading.add(store)
            except (StoreError, ValueError):  # a damaged file or histogram: said later
                used = False
            if not used:
                self.reading = None

    def done(self) -> Read | None:
        try:
            return None if self.reading is None else self.reading.result()
        except ValueError:
            return None


@dataclasses.dataclass
class Prepared:
    """What the visits of every share read (``Visit.done``, in the files' order), joined."""

    key: tuple
    read: Read | None

    @classmethod
    def of(cls, names: Selection, end: int, spans: Sequence[int],
           reads: Sequence[Read | None]) -> Prepared:
        key = _key(names, end, spans)
        return cls(key, _joined(list(reads), windows_query(names, end, key[2]).width))

    def take(self, key: tuple, files: int) -> Read | None:
        """The read, once, if it is of ``key`` and of ``files`` files."""
        read, self.read = self.read, None
        return read if key == self.key and read is not None and len(read[4]) == files \
            else None


Read = tuple[np.ndarray, dict[tuple[str, str], int], dict[int, Histogram],
             dict[tuple[str, str], list[tuple[int, float]]], list[tuple[set, dict]]]


class _Reading:
    """``_read`` a file at a time: ``add`` each file (False where it holds an hour record in
    the window: the read is then of no use), ``result`` at the end."""

    def __init__(self, query: WindowsQuery) -> None:
        self.query = query
        self.files = 0
        # every file's columns (start, errors, ..., stuck_end) of its rows, in order
        self.columns: list[tuple[tuple, ...]] = []
        self.row_file: list[np.ndarray] = []  # the file and label of each of those rows
        self.row_label: list[np.ndarray] = []
        self.ends: dict[tuple[str, str], list[tuple[int, float]]] = {}
        self.codes: dict[tuple[str, str], int] = {}
        self.parts: dict[int, Histogram] = {}  # label -> the part's histogram
        self.blobs: list[bytes] = []
        self.labels: list[np.ndarray] = []
        self.visits: list[tuple[set, dict]] = []

    def add(self, store: Store) -> bool:
        query = self.query
        if _hours_within(store, query.start, query.end):  # in the same visit of the file
            return False
        statement, params = query.statement(store.version), query.params(store.version)
        try:
            names: dict[int, tuple[str, str, str]] = {}
            newest: dict[tuple[str, str, str], int | None] = {}
            for sid, host, target, op, latest in store.conn.execute(
                    "SELECT s.id, s.host, s.target, s.op, (SELECT max(m.start) FROM "
                    f"{TABLES[MINUTE]} m WHERE m.series = s.id) FROM series s"):
                names[sid] = (host, target, op)
                newest[(host, target, op)] = latest
            rows = store.conn.execute(statement, params).fetchall()
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{store.path}: {exc}") from None
        seen: set = set()
        if rows:  # columns at C speed: no Python work per record
            columns = tuple(zip(*rows))  # id, kind, start, errors, ..., stuck_end, hist
            ids, ks = np.array(columns[0]), np.array(columns[1])
            top = int(ids.max())
            lookup = np.zeros(top + 1, np.int64)
            for sid in sorted(names):  # codes in the order of the ids, as before
                if sid <= top:
                    lookup[sid] = self.codes.setdefault(names[sid][1:], len(self.codes))
            label = lookup[ids] * query.width + ks
            self.labels.append(label)
            self.row_file.append(np.full(len(rows), self.files))
            self.row_label.append(label)
            self.columns.append(columns[2:11])
            self.blobs.extend(columns[11])
            seen = {names[sid] for sid in set(columns[0])}
            if any(columns[10]):  # rare: an op stuck at the end of some record
                _stuck_ends(rows, names, self.ends)
        self.files += 1
        self.visits.append((seen, newest))
        if len(self.blobs) >= CHUNK:
            _merge_into(self.parts, self.blobs, self.labels)
            self.blobs, self.labels = [], []
        return True

    def result(self) -> Read:
        _merge_into(self.parts, self.blobs, self.labels)
        self.blobs, self.labels = [], []
        return self.numbers(), self.codes, self.parts, self.ends, self.visits

    def numbers(self) -> np.ndarray:
        """(files, labels, ``_FIELDS``): each file's numbers per label, its rows added in
        their order (``numpy.add.at``: one by one, as SQL's ``sum`` and ``aggregate`` add)."""
        labels = len(self.codes) * self.query.width
        out = np.tile(_EMPTY, (self.files, labels, 1))
        if not self.columns:
            return out
        cell = np.concatenate(self.row_file) * labels + np.concatenate(self.row_label)

        rows = len(cell)

        def column(j: int) -> np.ndarray:
            return np.fromiter(chain.from_iterable(c[j] for c in self.columns), np.float64, rows)
        flat = out.reshape(-1, _FIELDS)
        flat[:, 0] += np.bincount(cell, minlength=len(flat))
        for field, j in ((1, 1), (2, 2), (3, 3), (4, 4)):
            np.add.at(flat[:, field], cell, column(j))
        starts = column(0)
        for field, x, at in ((5, column(5), np.fmin), (6, column(6), np.fmax),
                             (7, column(7), np.maximum), (8, starts, np.minimum),
                             (9, starts, np.maximum)):
            at.at(flat[:, field], cell, x)
        return out


def _read(stores: Sequence[Store], query: WindowsQuery) -> Read | None:
    """Each file's numbers per label (``_Reading.numbers``), in the order of the files; the
    code of each (target, op); the histogram of each label (code * parts + part); per
    (target, op) the (start, stuck_end) of each series' latest record where one of its
    records holds a stuck age at its end; per file, in the same visit, what a cluster view
    asks of it next (see
    ``_remember``): the series with a record in the longest window, and the start of each
    series' newest minute record. None where a file holds an hour record in the window."""
    reading = _Reading(query)
    for store in stores:
        if not reading.add(store):
            return None
    return reading.result()


def _stuck_ends(rows: list[tuple], names: dict[int, tuple[str, str, str]],
                ends: dict[tuple[str, str], list[tuple[int, float]]]) -> None:
    """Into ``ends``, of each series whose latest row ends with an op in flight, (its start,
    that age)."""
    latest: dict[int, tuple[int, float]] = {}
    for sid, _, start, *_, end, _ in rows:
        if sid not in latest or start > latest[sid][0]:
            latest[sid] = (start, end)
    for sid, (start, end) in latest.items():
        if end > 0:
            ends.setdefault(names[sid][1:], []).append((start, end))


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


def _read_split(stores: Sequence[Store], query: WindowsQuery, processes: int | None = None
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
    return _joined(forking.run_all(shares, lambda share: _read(share, query)), query.width)


def _joined(reads: list[Read | None], width: int) -> Read | None:
    """The reads of consecutive shares of the files as one read of them all (None if any
    is): sums kept file by file, codes renumbered, each label's histograms merged."""
    if not reads or any(got is None for got in reads):
        return None
    numbers, codes, parts, ends, visits = reads[0]
    shares = [(numbers, dict(codes))]
    for their_numbers, their_codes, their_parts, their_ends, their_visits in reads[1:]:
        shares.append((their_numbers, their_codes))
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
    joined = []  # every share's numbers at the joined codes' labels
    for their_numbers, their_codes in shares:
        wide = np.tile(_EMPTY, (len(their_numbers), len(codes) * width, 1))
        for pair, code in their_codes.items():
            ours = codes[pair]
            wide[:, ours * width:(ours + 1) * width] = \
                their_numbers[:, code * width:(code + 1) * width]
        joined.append(wide)
    return np.concatenate(joined), codes, parts, ends, visits


def _hours_within(store: Store, start: int, end: int) -> bool:
    """Whether the file holds an hour record overlapping ``[start, end)``."""
    try:
        return store.conn.execute(f"SELECT 1 FROM {TABLES[HOUR]} WHERE start > ? AND start < ? "
                                  "LIMIT 1", (start - HOUR, end)).fetchone() is not None
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"{store.path}: {exc}") from None


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
