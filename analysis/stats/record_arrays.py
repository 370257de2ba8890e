"""A file's records of some (target, op) pairs as arrays, for ``history_by_file``: each
series' hours, then its minutes (or the minutes before its whole tens, the tens and the
minutes after), read in the order ``series`` reads them."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

import numpy as np

from slowdown.analysis.histogram import codec
from slowdown.analysis.store import Selection, Store, StoreError, schema, ten_minute_records
from slowdown.analysis.store.records import TABLES_SPAN

_ROWS = "SELECT {columns} FROM {table} r WHERE r.series = ? AND {where} ORDER BY r.start"


@dataclass
class Block:
    """One file's records of some pairs, in ``series``' order (by pair, host and series;
    each series' hours, then its minutes), as arrays."""

    start: np.ndarray
    span: np.ndarray
    count: np.ndarray
    errors: np.ndarray
    skipped: np.ndarray
    stuck: np.ndarray
    stuck_end: np.ndarray
    low: np.ndarray
    high: np.ndarray
    sum: np.ndarray
    sumsq: np.ndarray
    blobs: list
    scales: np.ndarray
    code: np.ndarray  # the pair of each record (its number in the batch)
    whose: np.ndarray  # the series of each record (its number in this file)
    one_scale: int | None = None  # the scale of every record, if one
    _decoded: dict | None = None

    @classmethod
    def of(cls, rows: list[tuple], moments: bool, code: np.ndarray,
           whose: np.ndarray) -> Block:
        columns = list(zip(*rows))
        number = np.array(columns[:-1], np.float64)  # NULL as NaN
        blobs = list(columns[-1])
        start, span = number[0].astype(np.int64), number[1].astype(np.int64)
        filled = list(np.nan_to_num(number[2:7], nan=0.0))  # NULL as 0
        low = np.where(np.isnan(number[7]), np.inf, number[7])
        high = np.where(np.isnan(number[8]), -np.inf, number[8])
        sums = list(np.nan_to_num(number[9:11], nan=0.0)) if moments else [None, None]
        lengths = np.fromiter(map(len, blobs), np.int64, len(blobs))
        if (lengths < 3).any():
            codec.decode_blobs(blobs, np.arange(len(blobs)))  # raises, naming what is wrong
        joined = np.frombuffer(b"".join(blobs), np.uint8)
        scales = joined[np.cumsum(lengths) - lengths + 2].view(np.int8).astype(np.int64)
        one = int(scales[0]) if (scales == scales[0]).all() else None
        return cls(start, span, *filled, low, high, *sums, blobs, scales, code, whose, one)

    def decoded(self) -> dict[int, tuple]:
        """Per scale: (its records, the number among them of each pair's record, index,
        count, zero count of each of its records)."""
        if self._decoded is None:
            self._decoded = {}
            for scale in np.unique(self.scales).tolist():
                sel = np.flatnonzero(self.scales == scale)
                blobs = self.blobs if len(sel) == len(self.blobs) else \
                    [self.blobs[i] for i in sel.tolist()]
                groups, zero, _ = codec.decode_blobs(blobs, np.arange(len(sel)), scale)
                label, index, count = (np.concatenate([getattr(g, f) for g in groups])
                                       if groups else np.empty(0, np.int64)
                                       for f in ("label", "index", "count"))
                self._decoded[scale] = (sel, label, index, count.astype(np.float64),
                                        zero.astype(np.float64))
        return self._decoded


def sources(store: Store, selection: Selection, inner: tuple[int, int] | None
             ) -> list[tuple[str, int, str, list]]:
    """(table, span, condition, parameters) of what a series' records are read from, older
    first as ``series`` reads them: its hours, then its minutes; or, with ``inner`` (whole
    tens, ``ten_minute_records.inner``) on a file that keeps tens, the minutes before them,
    the tens, and the minutes after."""
    reads = []
    for table in ("hours", "minutes"):
        span = TABLES_SPAN[table]
        times, params = selection.time_where("r", span)
        if table == "hours" or inner is None or not ten_minute_records.holds(store.version):
            reads.append((table, span, times, params))
            continue
        a, b = inner
        reads += [(table, span, f"{times} AND r.start < ?", [*params, a]),
                  (ten_minute_records.TABLE, ten_minute_records.TEN,
                   "r.start >= ? AND r.start < ?", [a, b]),
                  (table, span, f"{times} AND r.start >= ?", [*params, b])]
    return reads


def read(store: Store, series: list[tuple[int, int]], selection: Selection,
          moments: bool, inner: tuple[int, int] | None = None
          ) -> tuple[list[tuple], np.ndarray, np.ndarray]:
    """The records of ``series`` ((pair number, id), in order) in one file: each series'
    hours, then its minutes (``sources``); with the pair and the series number of each."""
    end = schema.stuck_end_of(store.version)
    rows: list[tuple] = []
    code, whose = [], []
    reads = sources(store, selection, inner)
    try:
        for number, (pair, sid) in enumerate(series):
            for table, span, times, params in reads:
                columns = (f"r.start, {span}, r.count, r.errors, r.skipped, r.stuck, {end}, "
                           "r.min, r.max, " + ("r.sum, r.sumsq, " if moments else "")
                           + "r.hist")
                got = store.conn.execute(_ROWS.format(columns=columns, table=table,
                                                      where=times), [sid, *params]).fetchall()
                rows += got
                code.append(np.full(len(got), pair, np.int64))
                whose.append(np.full(len(got), number, np.int64))
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"{store.path}: {exc}") from None
    return rows, np.concatenate(code), np.concatenate(whose)


__all__ = ["Block", "read", "sources"]
