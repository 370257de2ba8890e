"""The aggregates of nested windows ending at one moment, over many files at once.

A cluster's ``slowdown`` shows a few windows (1m, 10m, 1h) for a dozen ops: a few dozen
numbers, from every host's records of the longest window (512 hosts: 368,640 minute
records). Merging them record by record costs per record in Python; here each file gives,
in two queries, its sums per (target, op, window part) from SQLite and its histogram blobs
labelled by (target, op, window part), and the blobs of many files are decoded and summed
together with numpy into dense counts per label. Each window is the sum of its part and the
shorter windows' parts. The result is record for record what ``aggregate`` gives for each
window's aggregate (``store.window``) where no window edge cuts a record: windows of whole
minutes ending on a minute, and no hour record overlapping the longest one. Otherwise it
returns None and the caller takes the general path, which counts a cut record by its overlap.
"""

from __future__ import annotations

import dataclasses
import math
import sqlite3
from collections.abc import Sequence

import numpy as np

from slowdown.analysis.histogram import Histogram, codec
from slowdown.analysis.histogram.buckets import BucketCounts
from slowdown.analysis.store.records import HOUR, MINUTE, Aggregate
from slowdown.analysis.store.store import TABLES, Selection, Store, StoreError

# Blobs decoded together: a few MiB of pairs at a time, whatever the number of files.
CHUNK = 65536


def nested_windows(stores: Sequence[Store], names: Selection, end: int,
                   spans: Sequence[int]) -> dict[tuple[str, str, int], Aggregate] | None:
    """``(target, op, span) -> Aggregate`` of the records of ``names`` in
    ``[end - span, end)``, merged over ``stores``, for every span; None where an edge would
    cut a record (see the module's docstring)."""
    spans = sorted({int(s) for s in spans})
    if not spans:
        return {}
    if end % MINUTE or any(s % MINUTE for s in spans):
        return None
    part = "CASE " + " ".join(f"WHEN r.start >= {int(end - s)} THEN {k}"
                              for k, s in enumerate(spans)) + " END"
    where, params = dataclasses.replace(names, start=int(end - spans[-1]), end=int(end)).where()
    sums: dict[tuple[str, str, int], list] = {}
    codes: dict[tuple[str, str], int] = {}
    parts: dict[int, Histogram] = {}  # label -> the part's histogram
    blobs: list[bytes] = []
    labels: list[np.ndarray] = []
    width = len(spans)
    # Minutes and hours in one statement each: three queries a file, whatever its tables hold.
    both = " UNION ALL ".join(
        f"SELECT s.id AS id, s.target AS target, s.op AS op, {part} AS k, r.start AS start, "
        "r.count AS count, r.errors AS errors, r.skipped AS skipped, r.sum AS sum, "
        "r.sumsq AS sumsq, r.min AS min, r.max AS max, r.stuck AS stuck, r.hist AS hist "
        f"FROM series s CROSS JOIN {table} r ON r.series = s.id WHERE {where}"
        for table in TABLES.values())
    params = params * len(TABLES)
    for store in stores:
        if _hours_within(store, end - spans[-1], end):  # in the same visit of the file
            return None
        try:
            for target, op, k, *numbers in store.conn.execute(
                    "SELECT target, op, k, count(*), sum(errors), sum(skipped), sum(sum), "
                    "sum(sumsq), min(min), max(max), max(stuck), min(start), max(start) "
                    f"FROM ({both}) GROUP BY target, op, k", params):
                _add(sums.setdefault((target, op, k), [0, 0, 0, 0.0, 0.0, math.inf,
                                                       -math.inf, 0.0, None, None]), numbers)
            rows = store.conn.execute(f"SELECT id, k, hist FROM ({both})", params).fetchall()
            if rows:  # columns at C speed: no Python work per record
                ids, ks, hists = zip(*rows)
                lookup = np.zeros(max(ids) + 1, np.int64)
                for sid, target, op in store.conn.execute(
                        "SELECT id, target, op FROM series WHERE id <= ?", (max(ids),)):
                    lookup[sid] = codes.setdefault((target, op), len(codes))
                labels.append(lookup[np.array(ids)] * width + np.array(ks))
                blobs.extend(hists)
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{store.path}: {exc}") from None
        if len(blobs) >= CHUNK:
            _merge_into(parts, blobs, labels)
            blobs, labels = [], []
    _merge_into(parts, blobs, labels)
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
                records, errors, skipped, s, ss, mn, mx, stuck, first, last = got
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
            result[(target, op, span)] = agg
    return result


def _hours_within(store: Store, start: int, end: int) -> bool:
    """Whether the file holds an hour record overlapping ``[start, end)``."""
    try:
        return store.conn.execute(f"SELECT 1 FROM {TABLES[HOUR]} WHERE start > ? AND start < ? "
                                  "LIMIT 1", (start - HOUR, end)).fetchone() is not None
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"{store.path}: {exc}") from None


def _add(into: list, numbers: Sequence) -> None:
    records, errors, skipped, s, ss, mn, mx, stuck, first, last = numbers
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


__all__ = ["nested_windows"]
