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

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from . import codec, schema
from .histogram import mapping_for
from .store import Selection, Store


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
    return [store.conn.execute(_ROW_SQL.format(columns=columns, table=table, where=where),
                               params).fetchall()
            for store in stores for table in ("minutes", "hours")]


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


def _decode_all(blobs: list[bytes]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """(row of each pair, index, count, zero count per row, common scale) for all blobs."""
    headers = [codec._header(b) for b in blobs]  # (flags, scale, zero, moments, offset)
    scale = min((h[1] for h in headers), default=5)
    rows_parts, idx_parts, cnt_parts = [], [], []
    by_layout: dict[tuple[int, int], list[int]] = {}
    for i, h in enumerate(headers):
        by_layout.setdefault((h[0] & 0x07, h[1]), []).append(i)
    for (layout, s), members in by_layout.items():
        dtype = codec.pair_dtype(layout)
        bodies = [blobs[i][headers[i][4]:] for i in members]
        pairs = np.frombuffer(b"".join(bodies), dtype=dtype)
        lengths = np.fromiter((len(b) for b in bodies), dtype=np.int64, count=len(bodies))
        rows_parts.append(np.repeat(np.asarray(members, dtype=np.int64),
                                    lengths // dtype.itemsize))
        idx_parts.append(pairs["i"].astype(np.int64) >> (s - scale))
        cnt_parts.append(pairs["c"].astype(np.int64))
    zero = np.fromiter((h[2] for h in headers), dtype=np.int64, count=len(headers))
    if not rows_parts:
        empty = np.empty(0, np.int64)
        return empty, empty, empty, zero, scale
    return (np.concatenate(rows_parts), np.concatenate(idx_parts), np.concatenate(cnt_parts),
            zero, scale)


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


def _quantiles(blobs, cell_of_row, n, count, c_min, c_max, statistics) -> dict[str, np.ndarray]:
    from .stats import quantile_of

    wanted = {s: quantile_of(s) for s in statistics if quantile_of(s) is not None}
    out: dict[str, np.ndarray] = {}
    if not wanted or not n:
        return {s: np.full(n, np.nan) for s in wanted}
    row, idx, cnt, zero_rows, scale = _decode_all(list(blobs))
    mapping = mapping_for(scale)
    cell = cell_of_row[row]
    # Sum duplicates of (cell, index) and order by cell, then index.
    lo_idx = int(idx.min()) if idx.size else 0
    width = (int(idx.max()) - lo_idx + 2) if idx.size else 1
    key = cell * width + (idx - lo_idx + 1)  # +1 leaves slot 0 of each cell for the zero bucket
    zero = np.bincount(cell_of_row, weights=zero_rows, minlength=n).astype(np.int64)
    key = np.concatenate([key, np.flatnonzero(zero) * width])
    cnt = np.concatenate([cnt, zero[zero > 0]])
    ukey, inverse = np.unique(key, return_inverse=True)
    ucnt = np.bincount(inverse.ravel(), weights=cnt).astype(np.int64)
    ucell = ukey // width
    uidx = ukey % width + lo_idx - 1
    lower, upper = mapping.bounds(uidx)
    value = 2.0 * lower * upper / (lower + upper)
    value = np.where(ukey % width == 0, 0.0, value)  # the zero bucket
    cum = np.cumsum(ucnt)
    before = np.zeros(n, dtype=np.int64)  # counts of all cells before each cell
    firsts = np.searchsorted(ucell, np.arange(n), side="left")
    has = firsts < len(ucell)
    before[has] = cum[firsts[has]] - ucnt[firsts[has]]
    for name, q in wanted.items():
        rank = np.maximum(1, np.ceil(np.round(q * count, 9))).astype(np.int64)
        pos = np.searchsorted(cum, before + rank, side="left")
        pos = np.minimum(pos, len(cum) - 1)
        v = np.clip(value[pos], c_min, c_max)
        v = np.where(rank <= 1, c_min, v)
        v = np.where(rank >= count, c_max, v)
        out[name] = np.where(count > 0, v, np.nan)
    return out


def mean_of(cells: Cells) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(cells.count > 0, cells.sum / cells.count, np.nan)


def raised(values: np.ndarray, stuck: np.ndarray) -> np.ndarray:
    """Each value raised to its cell's longest stuck age (NaN and no stuck stays NaN)."""
    return np.where(np.isnan(values), np.where(stuck > 0, stuck, np.nan),
                    np.maximum(values, stuck))


__all__ = ["Cells", "history", "mean_of", "raised"]
