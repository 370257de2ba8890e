"""Statistics over time, vectorised: many steps of many series in one numpy pass.

``history`` over 30 days at 1-minute steps is half a million minute records. Where each
(series, step) cell is one record, the quantiles stored with every record (schema 5) are
taken as they are and no histogram is read. Otherwise every histogram blob of the range is
decoded in one ``numpy.frombuffer`` per encoding layout, records are grouped into cells, and
each quantile of every cell is found with one ``searchsorted`` over the cumulative counts.
Either way the estimator is the one of ``stats.window.value_at`` (same rank, same bucket
representative, clamped to the cell's min and max), so all agree exactly.

A cell is a window: it takes every record that overlaps it by its overlap (``store.window``).
An hour record and steps shorter than an hour (or cells the range's ends cut) make pieces:
one per (record, cell) with the record's units in the cell, and every count is summed in
units (``records.UNIT`` per sample of a whole record) before it is shown in samples.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from slowdown.analysis.histogram import codec, mapping_for
from slowdown.analysis.store import Selection, Store, StoreError, schema
from slowdown.analysis.store.records import TABLES_SPAN, UNIT


@dataclass
class Cells:
    """One row per (host-merged series, step): the arrays of a history table, sorted by
    target, op and start."""

    names: list[tuple[str, str]]  # (target, op) by code, sorted
    series: np.ndarray  # int64 code of each cell's (target, op)
    target: np.ndarray  # object arrays of names
    op: np.ndarray
    start: np.ndarray  # int64, start of the step
    count: np.ndarray  # int64: values, rounded where a cell cuts a record
    samples: np.ndarray  # float64: values, with fractions where a cell cuts a record
    errors: np.ndarray
    skipped: np.ndarray
    stuck: np.ndarray  # the longest stuck age of any record in the cell
    stuck_end: np.ndarray  # the stuck age at the cell's end (``store.window.stuck_at_end``)
    sum: np.ndarray | None  # None unless asked for (``moments``)
    sumsq: np.ndarray | None
    min: np.ndarray | None
    max: np.ndarray | None
    quantiles: dict[str, np.ndarray]

    def __len__(self) -> int:
        return len(self.start)


# Every series of the selection, then each one's records by primary key (the planner would
# otherwise scan a whole table for GLOB filters on names).
_SERIES_SQL = "SELECT s.target, s.op, s.host, s.id FROM series s WHERE {where}"
_ROW_SQL = "SELECT {columns} FROM {table} r WHERE r.series = ? AND {where} ORDER BY r.start"
_KEYS = ("start", "count", "errors", "skipped", "stuck", schema.STUCK_END)
_MOMENTS = ("sum", "sumsq", "min", "max")
_STORED = dict(zip(schema.DERIVED_QUANTILES, schema.DERIVED_COLUMNS))  # quantile -> column


def selected_series(stores: Sequence[Store], selection: Selection) \
        -> list[tuple[str, str, int, str, int]]:
    """(target, op, store index, host, id) of every series the selection's names take."""
    names, params = selection.series_where()
    found = []
    for i, store in enumerate(stores):
        try:
            found += [(target, op, i, host, sid) for target, op, host, sid in store.conn.execute(
                _SERIES_SQL.format(where=names), params)]
        except sqlite3.DatabaseError as exc:  # a damaged file: name it
            raise StoreError(f"{store.path}: {exc}") from None
    return found


def _batches(stores: Sequence[Store], selection: Selection, columns: str,
             tables: Sequence[str] = ("hours", "minutes"), size: int = 4096,
             spans: bool = False, who: bool = False):
    """("target\0op", rows) of every selected record, a batch of rows at a time, in one
    order for any ``columns``: by (target, op), then file, host and time, so that all the
    records of a (target, op) come together; every record that overlaps the range, with
    its span first where ``spans``. Small batches: the memory of one batch's Python
    objects is reused by the next instead of given back and faulted in again. With
    ``who``, each batch's series (host, file) by its number in that order, third."""
    for number, (target, op, i, _, sid) in enumerate(sorted(selected_series(stores,
                                                                            selection))):
        # A file of a schema before the column: its stuck ages, as windows took them then.
        here = columns.replace(f"r.{schema.STUCK_END}", schema.stuck_end_of(stores[i].version))
        try:
            for table in tables:  # older first
                span = TABLES_SPAN[table]
                times, time_params = selection.time_where("r", span)
                cursor = stores[i].conn.execute(
                    _ROW_SQL.format(columns=f"{span}, {here}" if spans else here,
                                    table=table, where=times),
                    [sid, *time_params])
                while rows := cursor.fetchmany(size):
                    yield (f"{target}\0{op}", rows, number) if who else (f"{target}\0{op}", rows)
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{stores[i].path}: {exc}") from None


def grouped(stores: Sequence[Store], selection: Selection, columns: str,
            tables: Sequence[str] = ("hours", "minutes")) \
        -> Iterator[tuple[tuple[str, str], list]]:
    """((target, op), rows) for each selected (target, op) with records: all its rows from
    every file and host (in the order of ``_batches``), one (target, op) in memory at a time."""
    current, pending = "", []
    for name, rows in _batches(stores, selection, columns, tables):
        if name != current and pending:
            yield _pair(current), pending
            pending = []
        current = name
        pending += rows
    if pending:
        yield _pair(current), pending


def _pair(name: str) -> tuple[str, str]:
    target, op = name.split("\0")
    return target, op


def _numbers(stores: Sequence[Store], selection: Selection, columns: Sequence[str]) \
        -> tuple[np.ndarray, np.ndarray, list[str], np.ndarray]:
    """The records' ``columns`` as one float array (NULL as NaN), the code of each record's
    (target, op), the names "target\0op" by code, and the series (host, file) of each record.

    Python's sqlite3 makes an object of every value (~0.1 us each): only what is used is
    read, a batch at a time, so that the objects of one batch are all that exist at once.
    """
    names: dict[str, int] = {}
    parts, codes, whose = [], [], []
    for name, rows, number in _batches(stores, selection,
                                       ", ".join(f"r.{c}" for c in columns[1:]), spans=True,
                                       who=True):
        parts.append(np.array(rows, dtype=np.float64))
        codes.append(np.full(len(rows), names.setdefault(name, len(names)), np.int64))
        whose.append(np.full(len(rows), number, np.int64))
    if not parts:
        return (np.empty((0, len(columns))), np.empty(0, np.int64), list(names),
                np.empty(0, np.int64))
    return np.concatenate(parts), np.concatenate(codes), list(names), np.concatenate(whose)


def history(stores: Sequence[Store], selection: Selection, step: int,
            statistics: Sequence[str], moments: bool = True) -> Cells:
    """Per (target, op, step): counts, the statistics and, with ``moments``, sum, sum of
    squares, min and max; hosts merged.

    Where every cell is one record (1-minute steps on one host) the quantiles stored with
    each record are used as they are; otherwise the histograms are read and merged.
    """
    return histories(stores, selection, [step], statistics, moments)[0]


def histories(stores: Sequence[Store], selection: Selection, steps: Sequence[int],
              statistics: Sequence[str], moments: bool = True, fold: bool = True) \
        -> list[Cells]:
    """``history`` at each of ``steps``, from one read of the records and, if any step needs
    them, one read of their histograms; over several files (``fold``), a file at a time
    (``stats.history_by_file``: the same numbers, in memory that follows the cells)."""
    from slowdown.analysis.stats.window import quantile_of

    if fold and len(stores) > 1 and None not in (selection.start, selection.end):
        from slowdown.analysis.stats import history_by_file

        return history_by_file.histories(stores, selection, steps, statistics, moments)

    wanted = {s: quantile_of(s) for s in statistics if quantile_of(s) is not None}
    stored = [_STORED[q] for q in wanted.values() if q in _STORED]
    if len(stored) < len(wanted):
        stored = []
    columns = ["span", *_KEYS, *(_MOMENTS if moments else ()), *stored]
    rows, code, names, whose = _numbers(stores, selection, columns)
    value = {c: rows[:, i] for i, c in enumerate(columns)}
    order = sorted(range(len(names)), key=names.__getitem__)
    rank = np.empty(len(names), np.int64)
    rank[order] = np.arange(len(names))
    start = value["start"].astype(np.int64)
    span = value["span"].astype(np.int64)
    groupings = [_Grouping.of(rank[code], start, span, step, selection.start, selection.end)
                 for step in steps]
    counts = [g.weighted(value["count"]) for g in groupings]  # in units
    extremes = [(g.reduced(value["min"], np.minimum, np.inf),
                 g.reduced(value["max"], np.maximum, -np.inf)) if moments else (None, None)
                for g in groupings]
    quantiles: list[dict[str, np.ndarray]] = [{} for _ in groupings]
    taken = rows[:, [columns.index(c) for c in stored]]
    to_merge = []
    for i, g in enumerate(groupings):
        if g.row_of_cell is not None and stored and \
                not np.isnan(taken[counts[i][g.cell_of_row] > 0]).any():
            quantiles[i] = {s: taken[g.row_of_cell, j] for j, s in enumerate(wanted)}
        elif wanted:
            to_merge.append(i)
    merges = [_Merge(groupings[i], counts[i], *extremes[i], statistics) for i in to_merge]
    if merges:
        first = 0
        for _, records in grouped(stores, selection, "r.min, r.max, r.hist"):
            blobs = [r[2] for r in records]
            low_high = None if moments else np.array([r[:2] for r in records], np.float64).T
            for m in merges:
                m.add(first, blobs, low_high)
            first += len(records)
        for i, m in zip(to_merge, merges):
            quantiles[i], extremes[i] = m.result()
    pairs = [_pair(names[i]) for i in order]
    return [_cells(pairs, g, value, counts[i], extremes[i], quantiles[i], moments,
                   g.at_end(value[schema.STUCK_END], start, whose))
            for i, g in enumerate(groupings)]


def _filled(values: np.ndarray, fill: float) -> np.ndarray:
    return np.where(np.isnan(values), fill, values)


@dataclass
class _Grouping:
    """The cells of one step, sorted by series and time, and the pieces of records in them:
    one per record where every record lies wholly in one cell (``piece_row`` None), else
    one per (record, cell it overlaps), with the record's units in that cell."""

    step: int
    base: int  # the first cell's start
    span: int  # steps from the first cell to the last
    key: np.ndarray  # of each cell: series rank * span + steps from ``base``
    cell_of_row: np.ndarray  # the cell of each piece
    row_of_cell: np.ndarray | None  # where every cell is one whole record
    piece_row: np.ndarray | None = None  # the record of each piece, where records are cut
    units: np.ndarray | None = None  # of each piece

    @classmethod
    def of(cls, rank_of_row: np.ndarray, start: np.ndarray, span: np.ndarray, step: int,
           first: int | None = None, end: int | None = None) -> _Grouping:
        lo = start if first is None else np.maximum(start, first)
        hi = start + span if end is None else np.minimum(start + span, end)
        piece_row = units = None
        if ((lo // step != (hi - 1) // step) | (hi - lo != span)).any():  # records are cut
            c0, c1 = lo // step, np.maximum(hi - 1, lo) // step
            k = np.where(hi > lo, c1 - c0 + 1, 0)
            piece_row = np.repeat(np.arange(len(start)), k)
            cell = c0[piece_row] + np.arange(len(piece_row)) - np.repeat(np.cumsum(k) - k, k)
            p_lo = np.maximum(lo[piece_row], cell * step)
            p_hi = np.minimum(hi[piece_row], (cell + 1) * step)
            units = (p_hi - p_lo) * (UNIT // span[piece_row])
            rank_of_row, start = rank_of_row[piece_row], cell * step
        step_start = start - start % step
        base = int(step_start.min()) if len(start) else 0
        width = (int(step_start.max()) - base) // step + 1 if len(start) else 1
        key = rank_of_row * width + (step_start - base) // step
        if piece_row is None and (key[1:] > key[:-1]).all():  # one record per cell, in order
            return cls(step, base, width, key, np.arange(len(key)), np.arange(len(key)))
        cells_key, cell_of_row = np.unique(key, return_inverse=True)
        cell_of_row = cell_of_row.ravel()
        row_of_cell = None
        if piece_row is None and len(cells_key) == len(key):  # each cell: its one record
            row_of_cell = np.empty(len(key), np.int64)
            row_of_cell[cell_of_row] = np.arange(len(key))
        return cls(step, base, width, cells_key, cell_of_row, row_of_cell, piece_row, units)

    def __len__(self) -> int:
        return len(self.key)

    def pieces(self, values: np.ndarray) -> np.ndarray:
        """A value of each record, for each of its pieces."""
        return values if self.piece_row is None else values[self.piece_row]

    def weighted(self, values: np.ndarray) -> np.ndarray:
        """A count of each record summed per cell in units (float64, whole numbers)."""
        values = self.pieces(_filled(values, 0.0))
        values = values * (UNIT if self.units is None else self.units)
        if self.row_of_cell is not None:
            return values[self.row_of_cell]
        return np.bincount(self.cell_of_row, weights=values, minlength=len(self))

    def summed(self, values: np.ndarray, dtype=np.float64) -> np.ndarray:
        """A quantity of each record summed per cell, in samples (fractions where cut)."""
        if self.units is None and self.row_of_cell is not None:
            return _filled(values, 0.0)[self.row_of_cell].astype(dtype)
        return (self.weighted(values) / UNIT).astype(dtype)

    def at_end(self, stuck_end: np.ndarray, start: np.ndarray, whose: np.ndarray) -> np.ndarray:
        """The stuck age at each cell's end (``store.window.stuck_at_end``): of each series
        (``whose``), the ``stuck_end`` of its latest record in the cell; the cell's max."""
        out = np.zeros(len(self))
        stuck_end = self.pieces(_filled(stuck_end, 0.0))
        if not stuck_end.any():  # the usual case: no op stuck at any record's end
            return out
        cell, start, whose = self.cell_of_row, self.pieces(start), self.pieces(whose)
        order = np.lexsort((start, whose, cell))  # by cell, series, then time
        key = cell[order] * (int(whose.max()) + 1) + whose[order]
        last = order[np.flatnonzero(np.append(key[1:] != key[:-1], True))]  # latest of each
        np.maximum.at(out, cell[last], stuck_end[last])
        return out

    def reduced(self, values: np.ndarray, ufunc, fill: float) -> np.ndarray:
        values = self.pieces(_filled(values, fill))
        if self.row_of_cell is not None:
            return values[self.row_of_cell]
        out = np.full(len(self), fill)
        ufunc.at(out, self.cell_of_row, values)
        return out


def _cells(pairs: list[tuple[str, str]], g: _Grouping, value: dict[str, np.ndarray],
           units: np.ndarray, extremes: tuple, quantiles: dict[str, np.ndarray],
           moments: bool, stuck_end: np.ndarray) -> Cells:
    code = g.key // g.span
    samples = units / UNIT
    count = np.rint(samples).astype(np.int64)
    empty = units == 0
    c_min, c_max = extremes
    return Cells(
        names=pairs, series=code, target=np.array([t for t, _ in pairs], dtype=object)[code],
        op=np.array([o for _, o in pairs], dtype=object)[code],
        start=g.base + (g.key % g.span) * g.step, count=count, samples=samples,
        errors=np.rint(g.summed(value["errors"])).astype(np.int64),
        skipped=np.rint(g.summed(value["skipped"])).astype(np.int64),
        stuck=g.reduced(value["stuck"], np.maximum, 0.0), stuck_end=stuck_end,
        sum=g.summed(value["sum"]) if moments else None,
        sumsq=g.summed(value["sumsq"]) if moments else None,
        min=np.where(empty, np.nan, c_min) if moments else None,
        max=np.where(empty, np.nan, c_max) if moments else None, quantiles=quantiles)


class _Merge:
    """The statistics of one step's cells merged from their records' histograms (and the
    cells' min and max, when not read yet), a (target, op) at a time: the records come
    grouped by it, and its cells are only its own, so only one series' histograms are in
    memory at once."""

    def __init__(self, grouping: _Grouping, count: np.ndarray, c_min: np.ndarray | None,
                 c_max: np.ndarray | None, statistics: Sequence[str]):
        n = len(count)
        if c_min is None or c_max is None:  # found from the records' min and max in ``add``
            c_min, c_max = np.full(n, np.inf), np.full(n, -np.inf)
        self.g, self.count, self.c_min, self.c_max = grouping, count, c_min, c_max
        self.statistics = statistics
        self.out: dict[str, np.ndarray] = {}

    def add(self, first: int, blobs: list[bytes], low_high: np.ndarray | None) -> None:
        """The records ``first`` on, of one (target, op): their histograms, and their min and
        max where the cells' were not given."""
        g = self.g
        if g.piece_row is None:
            pieces = slice(first, first + len(blobs))
            rows = np.arange(len(blobs))
        else:  # the pieces of these records (in record order)
            pieces = slice(*np.searchsorted(g.piece_row, [first, first + len(blobs)]).tolist())
            rows = g.piece_row[pieces] - first
        if rows.size == 0:
            return
        cells = g.cell_of_row[pieces]
        units = np.full(len(rows), UNIT) if g.units is None else g.units[pieces]
        if low_high is not None:
            low, high = low_high[:, rows]
            np.minimum.at(self.c_min, cells, _filled(low, np.inf))
            np.maximum.at(self.c_max, cells, _filled(high, -np.inf))
        a, b = int(cells.min()), int(cells.max()) + 1
        part = _quantiles([blobs[i] for i in rows.tolist()], cells - a, units, b - a,
                          self.count[a:b], self.c_min[a:b], self.c_max[a:b], self.statistics)
        for s, values in part.items():
            self.out.setdefault(s, np.full(len(self.count), np.nan))[a:b] = values

    def result(self) -> tuple[dict[str, np.ndarray], tuple[np.ndarray, np.ndarray]]:
        out = self.out or _quantiles([], np.empty(0, np.int64), np.empty(0, np.int64),
                                     len(self.count), self.count, self.c_min, self.c_max,
                                     self.statistics)
        return out, (self.c_min, self.c_max)


_DENSE = 1 << 23  # cells x buckets counted at a time (64 MiB of float64)


def _quantiles(blobs, cell_of_row, units, n, count, c_min, c_max, statistics) \
        -> dict[str, np.ndarray]:
    """The statistics of merged cells, each at the coarsest scale among its own records (as
    ``Histogram.merge`` has it): the cells of each scale in turn. ``units``: of each blob
    (``records.UNIT`` for a whole record); ``count``: of each cell, in units."""
    from slowdown.analysis.stats.window import quantile_of

    wanted = {s: quantile_of(s) for s in statistics if quantile_of(s) is not None}
    out = {s: np.full(n, np.nan) for s in wanted}
    if not wanted or not n or not len(blobs):
        return out
    row_scale = np.frombuffer(bytes(b[2] if len(b) > 2 else 0 for b in blobs), np.int8)
    cell_scale = np.full(n, 127, np.int64)
    np.minimum.at(cell_scale, cell_of_row, row_scale)
    for scale in np.unique(cell_scale[cell_of_row]).tolist():
        members = np.flatnonzero(cell_scale[cell_of_row] == scale)
        mine = cell_scale == scale
        part = _quantiles_at(scale, [blobs[i] for i in members.tolist()],
                             cell_of_row[members], units[members], n, count, c_min, c_max,
                             wanted)
        for s, values in part.items():
            out[s][mine] = values[mine]
    return out


def _quantiles_at(scale: int, blobs, cell_of_row, units, n, count, c_min, c_max,
                  wanted: dict[str, float]) -> dict[str, np.ndarray]:
    """The statistics of merged cells at one scale: the blobs' (index, count) pairs added into
    a dense (cell, bucket) table, a chunk of cells at a time, each row's cumulative counts
    searched for every rank. No sort of the pairs: records are put in cell order first."""
    out = {s: np.full(n, np.nan) for s in wanted}
    order = np.argsort(cell_of_row, kind="stable")
    cells, weight = cell_of_row[order], np.asarray(units, np.float64)[order]
    groups, zero_rows, _ = codec.decode_blobs([blobs[i] for i in order.tolist()],
                                              np.arange(len(order)), scale)
    zero = np.bincount(cells, weights=zero_rows * weight, minlength=n)
    present = [g for g in groups if g.index.size]
    lowest = min((int(g.index.min()) for g in present), default=0)
    width = max((int(g.index.max()) for g in present), default=lowest) - lowest + 1
    lower, upper = mapping_for(scale).bounds(np.arange(lowest, lowest + width))
    value = 2.0 * lower * upper / (lower + upper)
    # As ``stats.window.quantile``: the rank in samples where every record is whole (one
    # sample is UNIT units), the rank in units where the cell cuts a record.
    cut = np.bincount(cells, weights=weight != UNIT, minlength=n) > 0
    one = np.where(cut, 1.0, UNIT)
    ranks = {s: np.maximum(1, np.ceil(np.round(q * (count / one), 9))) * one
             for s, q in wanted.items()}
    step = max(1, _DENSE // width)
    for first in range(0, n, step):
        last = min(n, first + step)
        table = np.zeros((last - first) * width)
        p_first, p_last = np.searchsorted(cells, [first, last])  # the pieces of these cells
        for g in present:  # each group's labels are sorted: its pairs of these pieces
            a, b = np.searchsorted(g.label, np.array([p_first, p_last], g.label.dtype))
            label = g.label[a:b]
            table += np.bincount((cells[label] - first).astype(np.int64) * width
                                 + (g.index[a:b] - lowest), weights=g.count[a:b] * weight[label],
                                 minlength=(last - first) * width)
        cumulative = np.cumsum(table.reshape(last - first, width), axis=1)
        for s, rank in ranks.items():
            r, z = rank[first:last], zero[first:last]
            at = np.minimum((cumulative < (r - z)[:, None]).sum(axis=1), width - 1)
            v = np.where(r <= z, 0.0, value[at])
            lo, hi, c = c_min[first:last], c_max[first:last], count[first:last]
            v = np.where(r >= c, hi, np.where(r <= one[first:last], lo, np.clip(v, lo, hi)))
            out[s][first:last] = np.where(c > 0, v, np.nan)
    return out


def runs(cells: Cells) -> dict[tuple[str, str], slice]:
    """Cells come sorted by (target, op, start): the slice of each series."""
    if not len(cells):
        return {}
    bounds = [0, *(np.flatnonzero(np.diff(cells.series)) + 1).tolist(), len(cells)]
    return {cells.names[cells.series[a]]: slice(a, b) for a, b in zip(bounds, bounds[1:])}


def expected_values(book, cells: Cells, statistic: str, first: int, end: int,
                    step: int = 60) -> np.ndarray:
    """The expected value of ``statistic`` of each cell (NaN: none): the one in force at the
    cell's end (its last second), as ``slowdown`` has it at that moment; from the baseline
    periods of ``[first, end]``, ``first`` the first cell's start and ``end`` the end of the
    range read. A provisional value (no baseline in force) is the one known at ``end``, as
    ``slowdown --at END`` shows it: the same for every step (the book computes it once)."""
    out = np.full(len(cells), np.nan)
    for (target, op), part in runs(cells).items():
        begins, values = zip(*book.expected_periods(target, op, statistic, first, end))
        at = np.minimum(cells.start[part] + step - 1, end)
        which = np.searchsorted(np.asarray(begins), at, side="right") - 1
        out[part] = np.asarray(values)[np.maximum(which, 0)]
        if getattr(book, "mode", None) == "weekly" and step > 3600:  # the hours it covers
            for j, start in zip(range(part.start, part.stop), cells.start[part].tolist()):
                e = book.expected(target, op, statistic, min(start + step, end), step)
                if e is not None and e.basis == "weekly":
                    out[j] = e.value
    return out


def mean_of(cells: Cells) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(cells.samples > 0, cells.sum / cells.samples, np.nan)


def raised(values: np.ndarray, stuck: np.ndarray) -> np.ndarray:
    """Each value raised to its cell's stuck age (``Cells.stuck_end``: of an op still stuck
    at the cell's end); NaN and no stuck age stays NaN."""
    return np.where(np.isnan(values), np.where(stuck > 0, stuck, np.nan),
                    np.maximum(values, stuck))


__all__ = ["Cells", "grouped", "histories", "history", "mean_of", "raised",
           "selected_series"]
