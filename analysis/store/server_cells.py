"""Per-server records read by steps into arrays: each (target, op, server, step)'s merged
bucket counts, for the report's server x time heat map, where a month is a hundred thousand
cells and ``server_reads``' histogram per key (merged in Python) would take a minute.

The result is the same as ``server_reads.read(..., step)``'s: each cell's histogram is the
sum of its records' buckets at the coarsest scale among them (as ``Histogram.merge`` takes
it), over the hosts of a file and over files; only it is held as arrays (numpy), decoded with
``codec.decode_blobs``. tests/test_report_servers.py checks the two against each other.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from slowdown.analysis.histogram import codec
from slowdown.analysis.histogram.buckets import BucketCounts
from slowdown.analysis.histogram.histogram import Histogram
from slowdown.analysis.store import server_records
from slowdown.analysis.store.selection import Selection
from slowdown.analysis.store.store import Store, StoreError

_SERIES = "SELECT s.id, s.target, s.op, s.server FROM server_series s WHERE {where}"
# One name's records (of every host of the file) at a time, through the primary key.
_QUERY = "SELECT t.start, t.errors, t.hist FROM server_tens t WHERE t.series IN ({ids}) AND {when}"
CHUNK = 20_000  # records decoded at once (whole names): bounds the memory of a month


@dataclass
class ServerCells:
    """``keys[c]`` = (target, op, server, step start) of cell ``c``; its scale, zero count
    and errors; its buckets as pairs ``(cell, index, count)`` sorted by cell, then index."""

    keys: list[tuple]
    scale: np.ndarray
    zero: np.ndarray
    errors: np.ndarray
    cell: np.ndarray
    index: np.ndarray
    count: np.ndarray
    holds: bool  # any file holds per-server records

    @property
    def probes(self) -> np.ndarray:
        return self.zero + np.bincount(self.cell, weights=self.count,
                                       minlength=len(self.keys)).astype(np.int64)


def _empty(holds: bool) -> ServerCells:
    none = np.zeros(0, np.int64)
    return ServerCells([], none, none, none, none, none, none, holds)


def _reduce(keys: list[tuple], scale: np.ndarray, zero: np.ndarray, errors: np.ndarray,
            cell: np.ndarray, index: np.ndarray, count: np.ndarray, holds: bool) -> ServerCells:
    """Pairs of the same (cell, index) added; sorted by cell, then index."""
    if not cell.size:
        return ServerCells(keys, scale, zero, errors, cell, index, count, holds)
    key = (cell << 32) + (index + (1 << 31))  # indices are int32: one sort key
    order = np.argsort(key, kind="stable")
    key = key[order]
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    return ServerCells(keys, scale, zero, errors, cell[order[starts]], index[order[starts]],
                       np.add.reduceat(count[order], starts), holds)


def _read_file(store: Store, selection: Selection, step: int) -> ServerCells:
    if not server_records.holds(store.version):
        return _empty(False)
    names, name_params = selection.series_where()
    when, when_params = selection.time_where("t", server_records.TEN)
    try:
        conn = store.conn
        if conn.execute("SELECT 1 FROM server_tens LIMIT 1").fetchone() is None:
            return _empty(False)
        series: dict[tuple, list[int]] = {}
        for sid, *name in conn.execute(_SERIES.format(where=names), name_params):
            series.setdefault(tuple(name), []).append(sid)
        ordered = sorted(series)
        parts, rows, of = [], [], []
        for i, name in enumerate(ordered):
            ids = series[name]
            found = conn.execute(_QUERY.format(ids=",".join("?" * len(ids)), when=when),
                                 [*ids, *when_params]).fetchall()
            found.sort(key=lambda r: r[0])  # hosts of one name: by time
            rows += found
            of += [i] * len(found)
            if len(rows) >= CHUNK or i == len(ordered) - 1:
                if rows:
                    parts.append(_chunk(rows, of, step))
                rows, of = [], []
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"{store.path}: {exc}") from None
    cells = _concat(parts)
    cells.keys = [(*ordered[name], column) for name, column in cells.keys]
    return cells


def _concat(parts: list[ServerCells]) -> ServerCells:
    """Chunks holding distinct cells, one after the other."""
    if not parts:
        return _empty(True)
    offsets = np.cumsum([0, *(len(p.keys) for p in parts[:-1])])
    return ServerCells(
        [k for p in parts for k in p.keys],
        *(np.concatenate([getattr(p, f) for p in parts]) for f in ("scale", "zero", "errors")),
        np.concatenate([p.cell + o for p, o in zip(parts, offsets)]),
        *(np.concatenate([getattr(p, f) for p in parts]) for f in ("index", "count")), True)


def _chunk(rows: list[tuple], of: list[int], step: int) -> ServerCells:
    """Records of whole names, by name (``of``) and time, into cells keyed (name, step
    start)."""
    n = len(rows)
    name = np.asarray(of, np.int64)
    start = np.fromiter((r[0] for r in rows), np.int64, n)
    column = start - start % step
    new = np.r_[True, (name[1:] != name[:-1]) | (column[1:] != column[:-1])]
    label = np.cumsum(new) - 1
    keys = list(zip(name[new].tolist(), column[new].tolist()))
    errors = np.zeros(len(keys), np.int64)
    np.add.at(errors, label, np.fromiter((r[1] for r in rows), np.int64, n))
    blobs = [r[2] for r in rows]
    own = np.frombuffer(b"".join(b[2:3] for b in blobs), np.int8).astype(np.int64)
    scale = np.full(len(keys), 127, np.int64)
    np.minimum.at(scale, label, own)
    zero = np.zeros(len(keys), np.int64)
    cells, indices, counts = [], [], []
    for s in np.unique(scale).tolist():  # each cell at the coarsest scale among its records
        members = np.flatnonzero(scale[label] == s)
        groups, zeros, _ = codec.decode_blobs([blobs[i] for i in members.tolist()],
                                              label[members], s)
        np.add.at(zero, label[members], zeros)
        for g in groups:
            cells.append(g.label.astype(np.int64))
            indices.append(g.index.astype(np.int64))
            counts.append(g.count.astype(np.int64))
    return _reduce(keys, scale, zero, errors, _joined(cells), _joined(indices), _joined(counts),
                   True)


def _joined(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


def _merge(parts: Sequence[ServerCells]) -> ServerCells:
    """Cells of many files added, each at the coarsest scale among the files' (exact)."""
    holds = any(p.holds for p in parts)
    parts = [p for p in parts if p.keys]
    if len(parts) == 1:
        return parts[0]
    if not parts:
        return _empty(holds)
    ids: dict[tuple, int] = {}
    maps = [np.fromiter((ids.setdefault(k, len(ids)) for k in p.keys), np.int64, len(p.keys))
            for p in parts]
    scale = np.full(len(ids), 127, np.int64)
    zero = np.zeros(len(ids), np.int64)
    errors = np.zeros(len(ids), np.int64)
    for p, m in zip(parts, maps):
        np.minimum.at(scale, m, p.scale)
        np.add.at(zero, m, p.zero)
        np.add.at(errors, m, p.errors)
    cell = np.concatenate([m[p.cell] for p, m in zip(parts, maps)])
    index = np.concatenate([p.index >> (p.scale[p.cell] - scale[m[p.cell]])
                            for p, m in zip(parts, maps)])
    count = np.concatenate([p.count for p in parts])
    return _reduce(list(ids), scale, zero, errors, cell, index, count, holds)


def whole(cells: ServerCells) -> dict[tuple, tuple[Histogram, int]]:
    """Each (target, op, server)'s histogram and errors over all its steps: what
    ``server_reads.read`` gives for the whole range, from the cells already read."""
    ids: dict[tuple, int] = {}
    group = np.fromiter((ids.setdefault(k[:3], len(ids)) for k in cells.keys), np.int64,
                        len(cells.keys))
    scale = np.full(len(ids), 127, np.int64)
    np.minimum.at(scale, group, cells.scale)
    zero = np.bincount(group, weights=cells.zero, minlength=len(ids)).astype(np.int64)
    errors = np.bincount(group, weights=cells.errors, minlength=len(ids)).astype(np.int64)
    pair_group = group[cells.cell]
    merged = _reduce(list(ids), scale, zero, errors, pair_group,
                     cells.index >> (cells.scale[cells.cell] - scale[pair_group]), cells.count,
                     cells.holds)
    bounds = np.searchsorted(merged.cell, np.arange(len(ids) + 1))
    out = {}
    for g, key in enumerate(ids):
        a, b = int(bounds[g]), int(bounds[g + 1])
        h = Histogram(int(scale[g]))
        h.buckets = BucketCounts(dict(zip(merged.index[a:b].tolist(),
                                          merged.count[a:b].tolist())))
        h.zero_count = int(zero[g])
        h.count = h.zero_count + h.buckets.total()
        out[key] = (h, int(errors[g]))
    return out


def _read_part(part: tuple[Sequence[Store], Selection, int]) -> ServerCells:
    stores, selection, step = part
    return _merge([_read_file(store, selection, step) for store in stores])


def read(stores: Sequence[Store], selection: Selection, step: int) -> ServerCells:
    """Every (target, op, server, step) of the records overlapping the selection's range
    (whole tens), merged over all ``stores``; ``step`` a multiple of ``TEN``, step starts at
    its multiples. Many files are split between processes, as ``server_reads.read`` does."""
    from slowdown.analysis.store import forking

    if step <= 0 or step % server_records.TEN:
        raise ValueError(f"step {step} is not a multiple of {server_records.TEN}")
    chunks = max(1, min(forking.processes(), len(stores) // 16 or 1))
    parts = [(stores[i::chunks], selection, step) for i in range(chunks)]
    results = forking.run_all(parts, _read_part) if chunks > 1 else [_read_part(parts[0])]
    return _merge(results)


__all__ = ["ServerCells", "read", "whole"]
