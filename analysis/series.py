"""Statistics over time, vectorised: many steps of many series in one numpy pass.

``history`` over 30 days at 1-minute steps is half a million minute records; decoding and
ranking them one by one would take seconds. Here every histogram blob of the range is
decoded in one ``numpy.frombuffer`` per encoding layout, records are grouped into
(series, step) cells, and each quantile of every cell is found with one ``searchsorted``
over the cumulative counts. The estimator is the one of ``Histogram.quantile`` (same rank,
same bucket representative, clamped to the cell's min and max), so both agree exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from . import codec
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


_ROW_SQL = ("SELECT s.target, s.op, r.start, r.count, r.errors, r.skipped, r.stuck, r.sum,"
            " r.sumsq, r.min, r.max, r.hist FROM {table} r JOIN series s ON s.id = r.series"
            " WHERE {where}")


def _rows(stores: Sequence[Store], selection: Selection) -> list[tuple]:
    where, params = selection.where()
    rows: list[tuple] = []
    for store in stores:
        for table in ("minutes", "hours"):
            rows.extend(store.conn.execute(_ROW_SQL.format(table=table, where=where), params))
    return rows


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
    """Per (target, op, step): counts, moments and the statistics, hosts merged."""
    rows = _rows(stores, selection)
    if rows:
        target, op, start, count, errors, skipped, stuck, s, ss, lo, hi, blobs = zip(*rows)
    else:
        target = op = blobs = ()
        start = count = errors = skipped = stuck = s = ss = lo = hi = ()
    start = np.asarray(start, dtype=np.int64)
    keys = np.array([f"{t}\0{o}" for t, o in zip(target, op)], dtype=object)
    series_names, series_id = np.unique(keys, return_inverse=True) if len(keys) else (
        np.empty(0, dtype=object), np.empty(0, np.int64))
    step_start = start - start % step
    cell_key = np.stack([series_id.astype(np.int64), step_start]) if len(start) else \
        np.empty((2, 0), np.int64)
    cells, cell_of_row = np.unique(cell_key, axis=1, return_inverse=True)
    cell_of_row = cell_of_row.ravel()
    n = cells.shape[1]

    def summed(values, dtype=np.float64):
        return np.bincount(cell_of_row, weights=np.asarray(values, dtype=np.float64),
                           minlength=n).astype(dtype)

    def reduced(values, ufunc, fill):
        out = np.full(n, fill)
        arr = np.asarray([fill if v is None else v for v in values], dtype=np.float64)
        ufunc.at(out, cell_of_row, arr)
        return out

    result_count = summed(count, np.int64)
    c_min = reduced(lo, np.minimum, np.inf)
    c_max = reduced(hi, np.maximum, -np.inf)
    c_stuck = reduced(stuck, np.maximum, 0.0)
    quants = _quantiles(blobs, cell_of_row, n, result_count, c_min, c_max, statistics)
    names = series_names[cells[0]] if n else np.empty(0, dtype=object)
    split = [name.split("\0") for name in names]
    return Cells(
        target=np.array([p[0] for p in split], dtype=object),
        op=np.array([p[1] for p in split], dtype=object),
        start=cells[1], count=result_count, errors=summed(errors, np.int64),
        skipped=summed(skipped, np.int64), stuck=c_stuck, sum=summed(s), sumsq=summed(ss),
        min=np.where(result_count > 0, c_min, np.nan), max=np.where(result_count > 0, c_max,
                                                                   np.nan),
        quantiles=quants,
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
