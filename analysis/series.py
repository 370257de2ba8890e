"""Statistics over time, vectorised: many steps of many series in one numpy pass.

``history`` over 30 days at 1-minute steps is half a million minute records. Where each
(series, step) cell is one record, the quantiles stored with every record (schema 5) are
taken as they are and no histogram is read. Otherwise every histogram blob of the range is
decoded in one ``numpy.frombuffer`` per encoding layout, records are grouped into cells, and
each quantile of every cell is found with one ``searchsorted`` over the cumulative counts.
Either way the estimator is the one of ``Histogram.quantile`` (same rank, same bucket
representative, clamped to the cell's min and max), so all agree exactly.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from . import codec, schema
from .histogram import mapping_for
from .store import Selection, Store, StoreError


@dataclass
class Cells:
    """One row per (host-merged series, step): the arrays of a history table."""

    target: np.ndarray  # object arrays of names
    op: np.ndarray
    start: np.ndarray  # int64, start of the step
    count: np.ndarray
    errors: np.ndarray
    skipped: np.ndarray
    stuck: np.ndarray
    sum: np.ndarray
    sumsq: np.ndarray
    min: np.ndarray
    max: np.ndarray
    quantiles: dict[str, np.ndarray]

    def __len__(self) -> int:
        return len(self.start)


# Series first, then each one's records by primary key: the planner would otherwise scan a
# whole table for GLOB filters on names. Ordered, so that a second read of the blobs lines up.
_ROW_SQL = ("SELECT {columns} FROM series s CROSS JOIN {table} r ON r.series = s.id"
            " WHERE {where} ORDER BY s.id, r.start")
_NUMBERS = ("r.series, r.start, r.count, r.errors, r.skipped, r.stuck, r.sum, r.sumsq, r.min,"
            " r.max, " + ", ".join(f"r.{c}" for c in schema.DERIVED_COLUMNS[:-1]))
_STORED = dict(zip(schema.DERIVED_QUANTILES, range(10, 14)))  # quantile -> column of _NUMBERS


def _read(stores: Sequence[Store], selection: Selection, columns: str) -> list[list]:
    """The rows of every store and table, in one order for any ``columns``."""
    where, params = selection.where()
    rows = []
    for store in stores:
        for table in ("minutes", "hours"):
            try:
                rows.append(store.conn.execute(
                    _ROW_SQL.format(columns=columns, table=table, where=where), params).fetchall())
            except sqlite3.DatabaseError as exc:  # a damaged file: name it
                raise StoreError(f"{store.path}: {exc}") from None
    return rows


def _numbers(stores: Sequence[Store], selection: Selection) -> tuple[np.ndarray, np.ndarray,
                                                                      list[str]]:
    """The records' numbers as one float array (NULL as NaN; columns of ``_NUMBERS``), the
    code of each record's (target, op), and the names "target\0op" by code."""
    names: dict[str, int] = {}
    parts, codes = [], []
    reads = _read(stores, selection, _NUMBERS)  # minutes and hours of each store in turn
    for i, store in enumerate(stores):
        ids = {sid: names.setdefault(f"{t}\0{o}", len(names))
               for sid, t, o in store.conn.execute("SELECT id, target, op FROM series")}
        lookup = np.full(max(ids, default=0) + 1, -1, np.int64)
        lookup[list(ids)] = list(ids.values())
        for rows in reads[2 * i:2 * i + 2]:
            if rows:
                part = np.array(rows, dtype=np.float64)
                parts.append(part)
                codes.append(lookup[part[:, 0].astype(np.int64)])
    if not parts:
        return np.empty((0, 14)), np.empty(0, np.int64), list(names)
    return np.concatenate(parts), np.concatenate(codes), list(names)


@dataclass
class Pairs:
    """The (index, count) pairs of blobs of one encoding layout, in the blobs' order."""

    label: np.ndarray  # int32: the label of the blob each pair came from (non-decreasing)
    index: np.ndarray  # int32, at the common scale
    count: np.ndarray


def decode_blobs(blobs: list[bytes], labels: np.ndarray) -> tuple[list[Pairs], np.ndarray,
                                                                   int]:
    """Every blob's pairs, decoded with numpy a layout at a time, with each blob's label
    (non-decreasing over ``blobs``); also each blob's zero count and the common scale.

    The headers are read as arrays from one joined buffer, not blob by blob.
    """
    n = len(blobs)
    lengths = np.fromiter(map(len, blobs), np.int64, n)
    buf = np.frombuffer(b"".join(blobs), np.uint8)
    starts = np.cumsum(lengths) - lengths
    if n and ((lengths < 3).any() or (buf[starts] != codec.VERSION).any()):
        raise codec.DecodeError("damaged histogram blob: bad header")
    flags = buf[starts + 1].astype(np.int64)
    scales = buf[starts + 2].view(np.int8).astype(np.int64)
    scale = int(scales.min()) if n else 5
    has_zero = (flags & 0x08) != 0
    head = 3 + 8 * has_zero + 32 * ((flags & 0x10) != 0)
    zero = np.zeros(n, np.int64)
    if has_zero.any():
        at = starts[has_zero] + 3
        zero[has_zero] = buf[at[:, None] + np.arange(8)].copy().view("<u8").ravel()
    group = (flags & 0x07) * 256 + scales + 128
    groups: list[Pairs] = []
    for key in np.unique(group).tolist():
        members = np.flatnonzero(group == key)
        dtype = codec.pair_dtype(key // 256)
        body = lengths[members] - head[members]
        if (body < 0).any() or (body % dtype.itemsize).any():
            raise codec.DecodeError("damaged histogram blob: cut inside a bucket")
        # The members' bodies: every byte of their blobs but the headers' (one pass).
        first, last = starts[members], starts[members] + lengths[members]
        if len(members) == n:
            keep = np.ones(buf.size, dtype=bool)
        else:  # inside [first, last) of a member: +1 at each first, -1 at each last
            edge = np.zeros(buf.size + 1, np.int8)
            edge[first] += 1
            edge[last] -= 1
            keep = np.cumsum(edge[:-1], dtype=np.int8) > 0
        skip = head[members]
        keep[np.repeat(first - (np.cumsum(skip) - skip), skip) + np.arange(int(skip.sum()))] \
            = False
        pairs = buf[keep].view(dtype)
        groups.append(Pairs(
            label=np.repeat(labels[members].astype(np.int32), body // dtype.itemsize),
            index=pairs["i"].astype(np.int32) >> (key % 256 - 128 - scale),
            count=pairs["c"]))
    return groups, zero, scale


def history(stores: Sequence[Store], selection: Selection, step: int,
            statistics: Sequence[str]) -> Cells:
    """Per (target, op, step): counts, moments and the statistics, hosts merged.

    Where every cell is one record (1-minute steps on one host) the quantiles stored with
    each record are used as they are; otherwise the histograms are read and merged.
    """
    from .stats import quantile_of

    rows, code, names = _numbers(stores, selection)
    order = sorted(range(len(names)), key=names.__getitem__)
    rank = np.empty(len(names), np.int64)
    rank[order] = np.arange(len(names))
    start = rows[:, 1].astype(np.int64)
    step_start = start - start % step
    base = int(step_start.min()) if len(start) else 0
    span = (int(step_start.max()) - base) // step + 1 if len(start) else 1
    key = rank[code] * span + (step_start - base) // step
    cells_key, cell_of_row = np.unique(key, return_inverse=True)
    cell_of_row = cell_of_row.ravel()
    n = len(cells_key)
    single = n == len(key)
    if single:  # a permutation: each cell takes its one record's values
        row_of_cell = np.empty(n, np.int64)
        row_of_cell[cell_of_row] = np.arange(n)

    def column(i: int, fill: float) -> np.ndarray:
        values = rows[:, i]
        return np.where(np.isnan(values), fill, values)

    def summed(i: int, dtype=np.float64) -> np.ndarray:
        if single:
            return column(i, 0.0)[row_of_cell].astype(dtype)
        return np.bincount(cell_of_row, weights=column(i, 0.0), minlength=n).astype(dtype)

    def reduced(i: int, ufunc, fill: float) -> np.ndarray:
        if single:
            return column(i, fill)[row_of_cell]
        out = np.full(n, fill)
        ufunc.at(out, cell_of_row, column(i, fill))
        return out

    count = summed(2, np.int64)
    c_min = reduced(8, np.minimum, np.inf)
    c_max = reduced(9, np.maximum, -np.inf)
    wanted = {s: quantile_of(s) for s in statistics if quantile_of(s) is not None}
    if single and all(q in _STORED for q in wanted.values()) and \
            not np.isnan(rows[count[cell_of_row] > 0][:, 10:14]).any():
        quantiles = {s: rows[row_of_cell, _STORED[q]] for s, q in wanted.items()}
    else:
        blobs = [row[0] for part in _read(stores, selection, "r.hist") for row in part]
        quantiles = _quantiles(blobs, cell_of_row, n, count, c_min, c_max, statistics)
    series_of_cell = cells_key // span
    target = np.array([names[i].split("\0")[0] for i in order], dtype=object)
    op = np.array([names[i].split("\0")[1] for i in order], dtype=object)
    return Cells(
        target=target[series_of_cell], op=op[series_of_cell],
        start=base + (cells_key % span) * step, count=count, errors=summed(3, np.int64),
        skipped=summed(4, np.int64), stuck=reduced(5, np.maximum, 0.0), sum=summed(6),
        sumsq=summed(7), min=np.where(count > 0, c_min, np.nan),
        max=np.where(count > 0, c_max, np.nan), quantiles=quantiles,
    )


_DENSE = 1 << 23  # cells x buckets counted at a time (64 MiB of float64)


def _quantiles(blobs, cell_of_row, n, count, c_min, c_max, statistics) -> dict[str, np.ndarray]:
    """The statistics of merged cells: the blobs' (index, count) pairs added into a dense
    (cell, bucket) table, a chunk of cells at a time, each row's cumulative counts searched
    for every rank. No sort of the pairs: records are put in cell order first."""
    from .stats import quantile_of

    wanted = {s: quantile_of(s) for s in statistics if quantile_of(s) is not None}
    out = {s: np.full(n, np.nan) for s in wanted}
    if not wanted or not n:
        return out
    order = np.argsort(cell_of_row, kind="stable")
    cells = cell_of_row[order]
    groups, zero_rows, scale = decode_blobs([blobs[i] for i in order.tolist()], cells)
    zero = np.bincount(cells, weights=zero_rows, minlength=n).astype(np.int64)
    present = [g for g in groups if g.index.size]
    lowest = min((int(g.index.min()) for g in present), default=0)
    width = max((int(g.index.max()) for g in present), default=lowest) - lowest + 1
    lower, upper = mapping_for(scale).bounds(np.arange(lowest, lowest + width))
    value = 2.0 * lower * upper / (lower + upper)
    ranks = {s: np.maximum(1, np.ceil(np.round(q * count, 9))).astype(np.int64)
             for s, q in wanted.items()}
    step = max(1, _DENSE // width)
    for first in range(0, n, step):
        last = min(n, first + step)
        table = np.zeros((last - first) * width)
        for g in present:  # each group's labels are sorted: its pairs of these cells
            a, b = np.searchsorted(g.label, np.array([first, last], g.label.dtype))
            table += np.bincount((g.label[a:b] - first).astype(np.int64) * width
                                 + (g.index[a:b] - lowest), weights=g.count[a:b],
                                 minlength=(last - first) * width)
        cumulative = np.cumsum(table.reshape(last - first, width), axis=1)
        for s, rank in ranks.items():
            r, z = rank[first:last], zero[first:last]
            at = np.minimum((cumulative < (r - z)[:, None]).sum(axis=1), width - 1)
            v = np.where(r <= z, 0.0, value[at])
            lo, hi, c = c_min[first:last], c_max[first:last], count[first:last]
            v = np.where(r >= c, hi, np.where(r <= 1, lo, np.clip(v, lo, hi)))
            out[s][first:last] = np.where(c > 0, v, np.nan)
    return out


def mean_of(cells: Cells) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(cells.count > 0, cells.sum / cells.count, np.nan)


def raised(values: np.ndarray, stuck: np.ndarray) -> np.ndarray:
    """Each value raised to its cell's longest stuck age (NaN and no stuck stays NaN)."""
    return np.where(np.isnan(values), np.where(stuck > 0, stuck, np.nan),
                    np.maximum(values, stuck))


__all__ = ["Cells", "Pairs", "decode_blobs", "history", "mean_of", "raised"]
