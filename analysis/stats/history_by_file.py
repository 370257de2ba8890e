"""History over many files, folded a file at a time: memory follows the cells shown.

``series.histories`` reads every selected record of every file into memory, then reads the
histograms again a (target, op) at a time. Over a cluster (128 hosts, 7 days) that is
millions of records held at once, read twice. Here each (target, op) is taken in turn and,
for it, each file's records are read once (numbers and histogram together) and folded into
per-cell accumulators: counts, sums, extremes, and one dense (cell, bucket) table per
histogram scale (``BucketTables``: counts that are whole numbers, exact in float64 in any
order; a bucket range that grows as indices come). What is held is cells x buckets of one
(target, op), whatever the number of hosts.

The numbers are those of ``series.histories`` to the bit: counts are whole units (exact in
any order); sums are added record by record in the same order (``numpy.add.at`` continues
what ``numpy.bincount`` would have summed); each cell's quantiles come from the merge of its
records at the coarsest scale among them, by the same estimator. Where every step is whole
ten minutes (``--every 10m``, ``1h``) and no report is made, a file's whole tens are read in
place of their minutes (``ten_minute_records.py``): a tenth of the rows, the same numbers but
for the sums' rounding (and so means and standard deviations to about 1e-15). Where every
cell of a step would be one whole record (``series`` then takes the stored quantiles), that
step is left to ``series.histories``.

The report's heat maps (ops per column and bucket) and per-minute throughputs are folded in
the same pass (``Extras``), so its figures read each file once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from slowdown.analysis.histogram import mapping_for
from slowdown.analysis.stats.record_arrays import Block, read
from slowdown.analysis.store import Selection, Store, ten_minute_records
from slowdown.analysis.store.records import HOUR, UNIT

_DENSE = 1 << 23  # cells x buckets ranked at a time (64 MiB of float64)
BUDGET = 1 << 24  # cells x buckets of the pairs read together (128 MiB of float64)
_WIDTH = 256  # buckets a cell's table is guessed to take (scale 5: 8 octaves)


@dataclass
class Extras:
    """What the report wants from the same pass: heat map columns (``grid_t0``, ``grid_step``,
    ``grid_columns``) and the per-minute throughputs, per (target, op)."""

    grid_t0: int
    grid_step: int
    grid_columns: int
    heat: dict = field(default_factory=dict)  # (target, op) -> (scale, lowest, rows, cells)
    figures: dict = field(default_factory=dict)  # (target, op) -> ops/s of each minute record


class BucketTables:
    """Dense (row, bucket) count tables, one per histogram scale, their bucket range grown as
    indices come."""

    def __init__(self, rows: int) -> None:
        self.rows = rows
        self.by_scale: dict[int, list] = {}  # scale -> [lowest index, table (rows, width)]

    def add(self, scale: int, row: np.ndarray, index: np.ndarray, weight: np.ndarray) -> None:
        if not index.size:
            return
        lo, hi = int(index.min()), int(index.max())
        entry = self.by_scale.get(scale)
        if entry is None:
            entry = self.by_scale[scale] = [lo, np.zeros((self.rows, hi - lo + 1))]
        lowest, table = entry
        width = table.shape[1]
        if lo < lowest or hi >= lowest + width:  # grow, with room for the next few files
            new_lo, new_hi = min(lo, lowest), max(hi, lowest + width - 1)
            pad = (new_hi - new_lo + 1) // 4
            new_lo, new_hi = new_lo - pad, new_hi + pad
            grown = np.zeros((self.rows, new_hi - new_lo + 1))
            grown[:, lowest - new_lo:lowest - new_lo + width] = table
            entry[0], entry[1] = lowest, table = new_lo, grown
            width = table.shape[1]
        np.add.at(table.reshape(-1), row * width + (index - lowest), weight)

    def at_scale(self, scale: int, rows: np.ndarray, shared: BucketTables | None = None,
                 shared_rows: np.ndarray | None = None, times: float = 1.0) \
            -> tuple[int, np.ndarray]:
        """The counts of ``rows`` merged at ``scale`` (coarser tables' buckets are unions of
        finer ones: index >> k), trimmed to the buckets with counts: (lowest, table); plus
        ``times`` the counts of ``shared`` at ``shared_rows`` (none where -1)."""
        sources = [(s, lowest, table, rows, 1.0) for s, (lowest, table) in self.by_scale.items()]
        if shared is not None and (shared_rows >= 0).any():
            sources += [(s, lowest, table, shared_rows, times)
                        for s, (lowest, table) in shared.by_scale.items()]
        parts = []
        for s, lowest, table, at, factor in sources:
            if s < scale:
                continue
            part = table[np.maximum(at, 0)]
            if factor != 1.0 or (at < 0).any():
                part = part * np.where(at >= 0, factor, 0.0)[:, None]
            index = (lowest + np.arange(part.shape[1])) >> (s - scale)
            if s > scale:  # add the fine columns into their coarse bucket
                first = index - index[0]
                coarse = np.zeros((len(rows), int(first[-1]) + 1))
                for j in range(part.shape[1]):
                    coarse[:, first[j]] += part[:, j]
                part, index = coarse, index[0] + np.arange(coarse.shape[1])
            parts.append((int(index[0]), part))
        used = [(lo, p, np.flatnonzero(p.any(axis=0))) for lo, p in parts]
        used = [(lo, p, nz) for lo, p, nz in used if nz.size]
        if not used:
            return 0, np.zeros((len(rows), 1))
        lowest = min(lo + int(nz[0]) for lo, _, nz in used)
        highest = max(lo + int(nz[-1]) for lo, _, nz in used)
        out = np.zeros((len(rows), highest - lowest + 1))
        for lo, p, nz in used:
            a, b = lo + int(nz[0]), lo + int(nz[-1]) + 1
            out[:, a - lowest:b - lowest] += p[:, a - lo:b - lo]
        return lowest, out


class _Step:
    """One step's accumulators for some (target, op) pairs: a cell per pair and step of the
    range (pair ``p``'s cells from ``p * n``)."""

    def __init__(self, step: int, start: int, end: int, pairs: int, moments: bool) -> None:
        self.step, self.first = step, start // step
        self.n = (end - 1) // step - self.first + 1
        n = self.n * pairs
        self.units, self.errors, self.skipped = np.zeros(n), np.zeros(n), np.zeros(n)
        self.stuck, self.stuck_end, self.zero = np.zeros(n), np.zeros(n), np.zeros(n)
        self.low, self.high = np.full(n, np.inf), np.full(n, -np.inf)
        self.sum = np.zeros(n) if moments else None
        self.sumsq = np.zeros(n) if moments else None
        self.pieces = np.zeros(n, np.int64)
        self.cut = np.zeros(n, bool)
        self.tens = False  # some record read is a ten (``ten_minute_records.py``)
        self.scale = np.full(n, 127, np.int64)
        self.tables = BucketTables(n)
        self.shared: BucketTables | None = None
        if step < HOUR:  # hour records cut into cells: see ``fold``
            a = self.first + np.arange(self.n)
            lo, hi = np.maximum(a * step, start), np.minimum((a + 1) * step, end)
            self.hour_first = start // HOUR
            self.hours = (end - 1) // HOUR - self.hour_first + 1
            full = (hi - lo == step) & ((hi - 1) // HOUR == lo // HOUR)
            self.slot = np.where(full, lo // HOUR - self.hour_first, -1)  # of each cell
            self.shared = BucketTables(self.hours * pairs)

    def shared_rows(self, cells: np.ndarray) -> np.ndarray | None:
        """The row of ``shared`` each cell takes ``step`` times (-1: none)."""
        if self.shared is None:
            return None
        pair, slot = cells // self.n, self.slot[cells % self.n]
        return np.where(slot >= 0, pair * self.hours + slot, -1)

    def fold(self, block: Block, start: int, end: int) -> None:
        """A file's records of these pairs, in the order ``series`` reads them."""
        step = self.step
        lo, hi = np.maximum(block.start, start), np.minimum(block.start + block.span, end)
        c0, c1 = lo // step, np.maximum(hi - 1, lo) // step
        k = np.where(hi > lo, c1 - c0 + 1, 0)
        whole = bool((k == 1).all() and ((hi - lo) == block.span).all())
        if whole:  # every record whole in one cell: a piece is its record
            row, units = np.arange(len(lo)), np.full(len(lo), UNIT)
            cell = block.code * self.n + (c0 - self.first)
        else:  # a piece per (record, cell it overlaps), with the record's units in it
            row = np.repeat(np.arange(len(lo)), k)
            absolute = c0[row] + np.arange(len(row)) - np.repeat(np.cumsum(k) - k, k)
            p_lo = np.maximum(lo[row], absolute * step)
            p_hi = np.minimum(hi[row], (absolute + 1) * step)
            units = (p_hi - p_lo) * (UNIT // block.span[row])
            cell = block.code[row] * self.n + (absolute - self.first)
            # A cell wholly inside an hour record takes step / HOUR of it: the same share of
            # its histogram in every such cell, kept once per hour (``shared``), not per cell.
            full = (block.span[row] == HOUR) & (p_hi - p_lo == step) if \
                self.shared is not None else np.zeros(len(row), bool)
        if not len(row):
            return
        n = len(self.units)

        def of(values: np.ndarray) -> np.ndarray:
            return values if whole else values[row]

        weight = units.astype(np.float64)
        for acc, values in ((self.units, block.count), (self.errors, block.errors),
                            (self.skipped, block.skipped)):
            if values is block.count or values.any():  # whole units: exact in any order
                acc += np.bincount(cell, weights=of(values) * weight, minlength=n)
        if self.sum is not None:  # in record order, as one bincount over every file would
            np.add.at(self.sum, cell, of(block.sum) * weight)
            np.add.at(self.sumsq, cell, of(block.sumsq) * weight)
        if block.stuck.any():
            np.maximum.at(self.stuck, cell, of(block.stuck))
        np.minimum.at(self.low, cell, of(block.low))
        np.maximum.at(self.high, cell, of(block.high))
        self.pieces += np.bincount(cell, minlength=n)
        if not whole:
            self.cut[cell[units != UNIT]] = True
        if not self.tens and (block.span == ten_minute_records.TEN).any():
            self.tens = True
        if block.stuck_end.any():  # of each series, its latest record in the cell; the max
            whose, began = of(block.whose), of(block.start)
            order = np.lexsort((began, whose, cell))
            key = cell[order] * (int(whose.max()) + 1) + whose[order]
            last = order[np.flatnonzero(np.append(key[1:] != key[:-1], True))]
            np.maximum.at(self.stuck_end, cell[last], of(block.stuck_end)[last])
        if block.one_scale is not None:
            self.scale[cell] = np.minimum(self.scale[cell], block.one_scale)
        else:
            np.minimum.at(self.scale, cell, of(block.scales))
        # Each histogram pair goes to every piece of its record: whole records' pairs (most)
        # straight to their cell with UNIT a sample, cut records' to each of their pieces.
        records = len(block.start)
        if not whole:
            per_row = np.bincount(row, minlength=records)
            first_piece = np.minimum(np.searchsorted(row, np.arange(records)), len(row) - 1)
            whole_cell = np.where((per_row == 1) & (weight[first_piece] == UNIT),
                                  cell[first_piece], -1)
            hour_row = np.full(records, -1, np.int64)  # of a record with full cells
            if full.any():
                with_full = np.unique(row[full])
                hour_row[with_full] = block.code[with_full] * self.hours + (
                    block.start[with_full] // HOUR - self.hour_first)
            partial = np.flatnonzero((whole_cell[row] < 0) & ~full)  # pieces taken one by one
            per_partial = np.bincount(row[partial], minlength=records)
            first_partial = np.searchsorted(row[partial], np.arange(records))
        for scale, (sel, label, index, count, zero) in block.decoded().items():
            if zero.any():  # zero counts: a number per piece
                local = np.full(records, -1, np.int64)
                local[sel] = np.arange(len(sel))
                mine = local[row] >= 0
                self.zero += np.bincount(cell[mine], weights=zero[local[row[mine]]]
                                         * weight[mine], minlength=n)
            rec = label if len(sel) == records else sel[label]
            if whole:
                self.tables.add(scale, cell[rec], index, count * float(UNIT))
                continue
            target = whole_cell[rec]
            one = target >= 0
            self.tables.add(scale, target[one], index[one], count[one] * float(UNIT))
            to_hour = hour_row[rec]
            shared = np.flatnonzero(to_hour >= 0)
            if shared.size:
                self.shared.add(scale, to_hour[shared], index[shared],
                                count[shared] * float(UNIT // HOUR))
            many = np.flatnonzero(per_partial[rec] > 0)
            k_pair = per_partial[rec[many]]
            pair = np.repeat(many, k_pair)
            piece = partial[first_partial[rec[pair]] + np.arange(len(pair))
                            - np.repeat(np.cumsum(k_pair) - k_pair, k_pair)]
            self.tables.add(scale, cell[piece], index[pair], count[pair] * weight[piece])

    def single(self) -> bool:
        """Every cell one whole minute or hour record: ``series`` takes this step (its stored
        quantiles; a ten has none)."""
        return not self.tens and not self.cut.any() and bool((self.pieces <= 1).all())


def histories(stores: Sequence[Store], selection: Selection, steps: Sequence[int],
              statistics: Sequence[str], moments: bool = True,
              extras: Extras | None = None, processes: int = 1) -> list:
    """``series.histories`` of ``stores`` (several files), each file read once for a batch
    of (target, op) pairs (all of them unless their cells would take more than ``BUDGET``);
    with ``extras``, the report's heat maps and throughputs from the same read. With
    ``processes`` over 1 the pairs are split between this process and forked ones (each
    pair's numbers are made in one process: the same to the bit)."""
    from slowdown.analysis.stats.series import selected_series
    from slowdown.analysis.stats.window import quantile_of
    from slowdown.analysis.store import forking

    wanted = {s: quantile_of(s) for s in statistics if quantile_of(s) is not None}
    found = sorted(selected_series(stores, selection))
    pairs = list(dict.fromkeys(f[:2] for f in found))
    n = max(1, min(processes, len(pairs)))
    groups = [pairs[len(pairs) * i // n:len(pairs) * (i + 1) // n] for i in range(n)]
    spec = None if extras is None else (extras.grid_t0, extras.grid_step, extras.grid_columns)
    done = forking.run_all(groups, lambda group: _fold_pairs(
        stores, selection, steps, wanted, moments, spec, found, group))
    names: list[tuple[str, str]] = []
    parts: list[list[dict]] = [[] for _ in steps]
    singles = [True] * len(steps)
    for their_names, their_parts, their_singles, heat, figures in done:
        for k, got in enumerate(their_parts):
            for part in got:  # series codes after those of the processes before
                parts[k].append({**part, "series": part["series"] + len(names)})
        names += their_names
        singles = [a and b for a, b in zip(singles, their_singles)]
        if extras is not None:
            extras.heat.update(heat)
            extras.figures.update(figures)
    out = [_joined(names, p, wanted, moments) for p in parts]
    if any(singles):  # one whole record a cell: as ``series`` has it (stored quantiles)
        from slowdown.analysis.stats import series

        alone = [s for s, one in zip(steps, singles) if one]
        again = dict(zip(alone, series.histories(stores, selection, alone, statistics, moments,
                                                 fold=False)))
        out = [again.get(s, cells) if one else cells
               for s, one, cells in zip(steps, singles, out)]
    return out


def _fold_pairs(stores: Sequence[Store], selection: Selection, steps: Sequence[int],
                wanted: dict[str, float], moments: bool, spec: tuple | None, found: list,
                pairs: list[tuple[str, str]]) -> tuple:
    """The cells of ``pairs`` (names with records, parts per step, whether each step is one
    whole record a cell), and with ``spec`` (the report's grid) their heat maps and
    throughputs."""
    start, end = int(selection.start), int(selection.end)
    extras = Extras(*spec) if spec is not None else None
    # Whole tens in place of their minutes where every cell is whole tens (not the report's
    # figures: its heat map columns and per-minute throughputs take the minutes).
    inner = ten_minute_records.inner(start, end) if extras is None and all(
        s % ten_minute_records.TEN == 0 for s in steps) else None
    cells_per_pair = sum((end - 1) // s - start // s + 1 for s in steps) + \
        (extras.grid_columns if extras is not None else 0)
    batch = max(1, BUDGET // (cells_per_pair * _WIDTH))
    parts: list[list[dict]] = [[] for _ in steps]
    names: list[tuple[str, str]] = []
    singles = [True] * len(steps)
    for first in range(0, len(pairs), batch):
        mine = {pair: j for j, pair in enumerate(pairs[first:first + batch])}
        accs = [_Step(step, start, end, len(mine), moments) for step in steps]
        heat = _Heat(extras, len(mine)) if extras is not None else None
        throughputs: list[list[np.ndarray]] = [[] for _ in mine]
        for i, store in enumerate(stores):
            series = [(mine[f[:2]], f[4]) for f in found if f[2] == i and f[:2] in mine]
            if not series:
                continue
            rows, code, whose = read(store, series, selection, moments, inner)
            if not rows:
                continue
            block = Block.of(rows, moments, code, whose)
            for acc in accs:
                acc.fold(block, start, end)
            if heat is not None:
                heat.fold(block)
                minutes = block.span == 60
                counts, sums = block.count[minutes], block.sum[minutes]
                with np.errstate(divide="ignore", invalid="ignore"):
                    ops = np.where((counts > 0) & (sums > 0), counts / sums, 0.0)
                for j in np.unique(block.code[minutes]).tolist():
                    throughputs[j].append(ops[block.code[minutes] == j])
        for pair, j in mine.items():
            if not any((acc.pieces[j * acc.n:(j + 1) * acc.n] > 0).any() for acc in accs):
                continue  # no records
            names.append(pair)
            for k, acc in enumerate(accs):
                parts[k].append(_cells_of(acc, j, len(names) - 1, wanted, moments))
            if heat is not None:
                extras.heat[pair] = heat.result(j)
                if throughputs[j]:  # (as ``provision.per_node_figures``)
                    extras.figures[pair] = np.concatenate(throughputs[j])
        singles = [one and acc.single() for one, acc in zip(singles, accs)]
    return (names, parts, singles, extras.heat if extras else {},
            extras.figures if extras else {})


def _cells_of(acc: _Step, j: int, code: int, wanted: dict[str, float], moments: bool) -> dict:
    """The arrays of pair ``j``'s cells with records, as series ``code``."""
    present = j * acc.n + np.flatnonzero(acc.pieces[j * acc.n:(j + 1) * acc.n] > 0)
    quantiles = _quantiles(acc, present, wanted)
    out = {"series": np.full(len(present), code, np.int64),
           "start": (acc.first + present - j * acc.n) * acc.step, "units": acc.units[present],
           "errors": acc.errors[present], "skipped": acc.skipped[present],
           "stuck": acc.stuck[present], "stuck_end": acc.stuck_end[present],
           "low": acc.low[present], "high": acc.high[present], "quantiles": quantiles}
    if moments:
        out["sum"], out["sumsq"] = acc.sum[present], acc.sumsq[present]
    return out


def _quantiles(acc: _Step, present: np.ndarray, wanted: dict[str, float]) \
        -> dict[str, np.ndarray]:
    """Each wanted quantile of the cells ``present``, each cell at the coarsest scale among
    its records, as ``series._quantiles_at`` finds it."""
    n = len(present)
    out = {s: np.full(n, np.nan) for s in wanted}
    if not wanted or not n:
        return out
    cell_scale = acc.scale[present]
    for scale in np.unique(cell_scale).tolist():
        if scale == 127:  # cells without histograms
            continue
        mine = np.flatnonzero(cell_scale == scale)
        cells = present[mine]
        step = max(1, _DENSE // max(1, sum(t.shape[1] for _, t in acc.tables.by_scale.values())))
        for a in range(0, len(cells), step):
            rows = cells[a:a + step]
            lowest, table = acc.tables.at_scale(scale, rows, acc.shared,
                                                acc.shared_rows(rows), float(acc.step))
            values = _ranked(scale, lowest, table, acc.units[rows], acc.zero[rows],
                             acc.cut[rows], acc.low[rows], acc.high[rows], wanted)
            for s, v in values.items():
                out[s][mine[a:a + step]] = v
    return out


def _ranked(scale: int, lowest: int, table: np.ndarray, count: np.ndarray, zero: np.ndarray,
            cut: np.ndarray, c_min: np.ndarray, c_max: np.ndarray,
            wanted: dict[str, float]) -> dict[str, np.ndarray]:
    """The estimator of ``series._quantiles_at`` over merged (cell, bucket) counts."""
    width = table.shape[1]
    lower, upper = mapping_for(scale).bounds(np.arange(lowest, lowest + width))
    value = 2.0 * lower * upper / (lower + upper)
    one = np.where(cut, 1.0, UNIT)
    cumulative = np.cumsum(table, axis=1)
    out = {}
    for s, q in wanted.items():
        r = np.maximum(1, np.ceil(np.round(q * (count / one), 9))) * one
        at = np.minimum((cumulative < (r - zero)[:, None]).sum(axis=1), width - 1)
        v = np.where(r <= zero, 0.0, value[at])
        v = np.where(r >= count, c_max, np.where(r <= one, c_min, np.clip(v, c_min, c_max)))
        out[s] = np.where(count > 0, v, np.nan)
    return out


def _joined(names: list[tuple[str, str]], parts: list[dict], wanted: dict[str, float],
            moments: bool):
    """The ``series.Cells`` of every (target, op), in order."""
    from slowdown.analysis.stats.series import Cells

    def cat(key: str, dtype=np.float64) -> np.ndarray:
        return np.concatenate([p[key] for p in parts]) if parts else np.empty(0, dtype)

    code = cat("series", np.int64)
    units = cat("units")
    samples = units / UNIT
    empty = units == 0
    return Cells(
        names=names, series=code,
        target=np.array([t for t, _ in names], dtype=object)[code],
        op=np.array([o for _, o in names], dtype=object)[code],
        start=cat("start", np.int64), count=np.rint(samples).astype(np.int64), samples=samples,
        errors=np.rint(cat("errors") / UNIT).astype(np.int64),
        skipped=np.rint(cat("skipped") / UNIT).astype(np.int64),
        stuck=cat("stuck"), stuck_end=cat("stuck_end"),
        sum=cat("sum") / UNIT if moments else None,
        sumsq=cat("sumsq") / UNIT if moments else None,
        min=np.where(empty, np.nan, cat("low")) if moments else None,
        max=np.where(empty, np.nan, cat("high")) if moments else None,
        quantiles={s: np.concatenate([p["quantiles"][s] for p in parts]) if parts
                   else np.empty(0) for s in wanted})


class _Heat:
    """The heat maps of some pairs (``report.data._heatmap``): ops per grid column and
    bucket, each record whole in the column of its start, at its own scale until the end."""

    def __init__(self, extras: Extras, pairs: int) -> None:
        self.extras, self.columns = extras, extras.grid_columns
        self.tables = BucketTables(self.columns * pairs)
        self.zero = np.zeros(self.columns * pairs)
        self.scale = np.full(pairs, 127, np.int64)

    def fold(self, block: Block) -> None:
        e = self.extras
        column = (block.start - e.grid_t0) // e.grid_step
        if len(column) and (column.min() < 0 or column.max() >= self.columns):
            raise ValueError("a record outside the report's columns")
        row = block.code * self.columns + column
        np.minimum.at(self.scale, block.code, block.scales)
        for scale, (sel, label, index, count, zero) in block.decoded().items():
            self.tables.add(scale, row[sel][label], index, count)
            self.zero += np.bincount(row[sel], weights=zero, minlength=len(self.zero))

    def result(self, j: int) -> tuple:
        """Of pair ``j``: (scale, lowest index, the (column, bucket) counts at that scale,
        zero count of each column); ``report.data`` lowers and lays it out."""
        scale = int(self.scale[j]) if self.scale[j] != 127 else 0
        rows = j * self.columns + np.arange(self.columns)
        lowest, table = self.tables.at_scale(scale, rows)
        return scale, lowest, table, self.zero[rows]
