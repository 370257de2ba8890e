"""What each figure of the report shows, computed from the store with numpy.

Time runs in columns of one step, the smallest of ``STEPS`` that keeps a chart within
``MAX_COLUMNS`` columns (1 minute for a few hours, 30 minutes for 30 days; at least an hour
where hour records are in the range). Column ``i`` covers ``[t0 + i * step, t0 + (i + 1) *
step)`` with ``t0`` the range's start rounded down to the step, as ``slowdown history
--every STEP`` groups minutes; statistics come from the same code (``series.history``), so
the report and ``slowdown history`` show the same numbers.

- **Timeline** (per target): for each window ``w`` and statistic, the slowdown ``slowdown``
  would have shown at the end of each ``w``-long window (windows start at multiples of
  ``w``; the target's value is its worst op's). A window shorter than the step shows each
  column's worst window. Baseline changes, errors, skipped ticks, the longest stuck age
  and the node context (load, CPU, memory, disk and network of the target's hosts) share the
  columns.
- **Percentiles** (per op): median, q90, q95, q99 and max of each column's merged histogram,
  raised to the stuck age at the column's end, as ``slowdown history``.
- **Heat map** (per op): the count of ops per column and latency bucket. Buckets are those
  of the op's stored histograms (at the coarsest scale among its records), coarsened (scale
  lowered, each coarse bucket the union of ``2**k`` fine ones) until the op's latency range
  fits ``MAX_ROWS`` rows: constant relative width, so finer at low latency. Values at or
  below 0 (none in practice) count in the lowest row. The counts add up to the number of ops
  recorded.
- **"X or better"** (per op): the per-minute throughput of each (host, minute) record
  (``provision.per_node_figures``) sorted from best to worst: the value at fraction ``f`` is
  the throughput that a fraction ``f`` of the minutes reached or beat.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase

import numpy as np

from slowdown.analysis.histogram import codec
from slowdown.analysis.histogram.mapping import MIN_SCALE
from slowdown.analysis.report import longview, servermap
from slowdown.analysis.report import provision as prov
from slowdown.analysis.stats import history_by_file, series
from slowdown.analysis.stats.window import quantile_of
from slowdown.analysis.store import Selection, Store, forking
from slowdown.analysis.store.records import HOUR, MINUTE, TABLES_SPAN

MAX_COLUMNS = 1500
SPLIT_FROM = 16  # files from which a report's reading is split between processes
STEPS = (60, 120, 300, 600, 900, 1200, 1800, 3600, 7200, 10800, 21600, 43200, 86400)
MAX_ROWS = 120  # latency rows of a heat map at most
PERCENTILES = ("median", "q90", "q95", "q99", "max")
FRACTIONS = (0.5, 0.9, 0.95, 0.99, 0.999)  # of the "X or better" table, where data allows
CURVE_POINTS = 1000
NODE_FIELDS = (  # (name, label, how a column sums up its minutes and hosts)
    ("load1", "load (1 min)", "max"),
    ("cpu", "CPU %", "max"),
    ("memory", "memory %", "max"),
    ("disk", "disk MB/s", "rate"),
    ("net", "network MB/s", "rate"),
)
_NODE_BYTES = {"disk": ("disk_read_bytes", "disk_write_bytes"),
               "net": ("net_rx_bytes", "net_tx_bytes")}


def pick_step(span: float, hours: bool = False) -> int:
    """The chart step: the smallest of ``STEPS`` giving at most ``MAX_COLUMNS`` columns."""
    for step in STEPS:
        if span / step <= MAX_COLUMNS and (step >= HOUR or not hours):
            return step
    return 86400 * math.ceil(span / 86400 / MAX_COLUMNS)


@dataclass(frozen=True)
class Grid:
    """Columns of ``step`` seconds from ``t0`` covering ``[start, end)``."""

    start: int
    end: int
    step: int

    @property
    def t0(self) -> int:
        return self.start - self.start % self.step

    @property
    def columns(self) -> int:
        return max(1, -(-(self.end - self.t0) // self.step))

    def column(self, t: np.ndarray) -> np.ndarray:
        return (np.asarray(t, dtype=np.int64) - self.t0) // self.step

    def json(self) -> dict:
        return {"t0": self.t0, "step": self.step, "columns": self.columns}


def floats(values) -> list:
    """JSON numbers with 6 significant digits (far below the histograms' 1.1 %); None for
    NaN and infinities."""
    out = []
    for v in np.asarray(values, dtype=np.float64).tolist():
        out.append(float(f"{v:.6g}") if math.isfinite(v) else None)
    return out


def statistic_values(cells: series.Cells, statistic: str) -> np.ndarray:
    """A statistic of every cell raised to its stuck age, as ``slowdown history`` shows it."""
    if statistic == "mean":
        values = series.mean_of(cells)
    elif statistic == "max":
        values = cells.max
    else:
        values = cells.quantiles[statistic]
    return series.raised(values, cells.stuck_end)


def _dense(grid: Grid, starts: np.ndarray, values: np.ndarray, fill: float = math.nan):
    out = np.full(grid.columns, fill, dtype=np.float64)
    out[grid.column(starts)] = values
    return out


def _record_span(stores: Sequence[Store], selection: Selection) -> tuple[int, int]:
    """Starts of the first and the last record selected (of any span, any file)."""
    starts = [row for store in stores for table, span in TABLES_SPAN.items()
              for where, params in [selection.where("r", span)]
              for row in store.conn.execute(f"SELECT min(r.start), max(r.start) FROM series s "
                                            f"JOIN {table} r ON r.series = s.id WHERE {where}",
                                            params) if row[0] is not None]
    if not starts:
        return selection.start or 0, selection.start or 0
    return min(a for a, _ in starts), max(b for _, b in starts)


def _has_hours(stores: Sequence[Store], selection: Selection) -> bool:
    where, params = selection.where("r", HOUR)
    return any(store.conn.execute(f"SELECT 1 FROM series s JOIN hours r ON r.series = s.id "
                                  f"WHERE {where} LIMIT 1", params).fetchone()
               for store in stores)


# -- the figures --------------------------------------------------------------------------------

def percentiles(grid: Grid, cells: series.Cells, part: slice) -> dict:
    starts = cells.start[part]
    stats = {s: floats(_dense(grid, starts, statistic_values(cells, s)[part]))
             for s in PERCENTILES}
    counts = {name: [int(v) for v in _dense(grid, starts, getattr(cells, name)[part], 0)]
              for name in ("count", "errors", "skipped")}
    return {**grid.json(), "stats": stats, **counts,
            "stuck": floats(_dense(grid, starts, cells.stuck[part], 0.0))}


def heatmaps(stores: Sequence[Store], selection: Selection, grid: Grid) -> dict[tuple[str, str],
                                                                                dict]:
    """Per (target, op): ops per column and latency bucket (see the module docstring), a
    (target, op) at a time, so that only its histograms are in memory."""
    return {pair: _heatmap(grid, rows)
            for pair, rows in series.grouped(stores, selection, "r.start, r.hist")}


def _heatmap(grid: Grid, records: list[tuple[int, bytes]]) -> dict:
    """One series' heat map from its (start, histogram blob) records, at the coarsest scale
    among them, lowered until its latency range fits ``MAX_ROWS`` rows."""
    starts, blobs = zip(*records)
    groups, zeros, scale = codec.decode_blobs(list(blobs), np.arange(len(blobs)))
    blob_of, index, count = (np.concatenate([getattr(g, f) for g in groups]).astype(np.int64)
                             for f in ("label", "index", "count"))
    column = grid.column(np.asarray(starts, dtype=np.int64))
    lo, hi = (int(index.min()), int(index.max())) if index.size else (0, 0)
    k = _lowered(scale, lo, hi)
    lowest, rows = lo >> k, (hi >> k) - (lo >> k) + 1
    # Zero counts go to the lowest row.
    keys = np.concatenate([column[blob_of] * rows + (index >> k) - lowest, column * rows])
    weights = np.concatenate([count, zeros]).astype(np.float64)
    dense = np.bincount(keys, weights=weights, minlength=grid.columns * rows) \
        .astype(np.int64).reshape(grid.columns, rows)
    return _heat_cells(grid, dense, scale - k, lowest, rows)


def _lowered(scale: int, lo: int, hi: int) -> int:
    """How many times the scale is lowered for buckets ``lo..hi`` to fit ``MAX_ROWS``."""
    k = 0
    while (hi >> k) - (lo >> k) + 1 > MAX_ROWS and scale - k > MIN_SCALE:
        k += 1
    return k


def _folded_heatmap(grid: Grid, scale: int, lo: int, table: np.ndarray,
                    zeros: np.ndarray) -> dict:
    """``_heatmap`` from the (column, bucket) counts folded file by file
    (``stats.history_by_file.Extras``): the same rows and counts."""
    hi = lo + table.shape[1] - 1
    k = _lowered(scale, lo, hi)
    lowest, rows = lo >> k, (hi >> k) - (lo >> k) + 1
    row = ((lo + np.arange(table.shape[1])) >> k) - lowest
    dense = np.zeros((grid.columns, rows))
    for r in np.unique(row).tolist():  # the fine buckets of each row (exact: whole counts)
        dense[:, r] = table[:, row == r].sum(axis=1)
    dense[:, 0] += zeros
    return _heat_cells(grid, dense.astype(np.int64), scale - k, lowest, rows)


def _heat_cells(grid: Grid, dense: np.ndarray, scale: int, lowest: int, rows: int) -> dict:
    cells = []
    for i in np.flatnonzero(dense.any(axis=1)).tolist():
        nonzero = np.flatnonzero(dense[i])
        first, last = int(nonzero[0]), int(nonzero[-1])
        cells.append([i, first, *dense[i, first:last + 1].tolist()])
    return {**grid.json(), "scale": scale, "lowest": lowest, "rows": rows,
            "total": int(dense.sum()), "cells": cells}


def _rank(fraction: float, n: int) -> int:
    return max(1, math.ceil(round(fraction * n, 9)))


def x_or_better(values: np.ndarray, op: str) -> dict:
    """The "X or better" curve and table of one op's per-minute throughput."""
    v = np.sort(np.asarray(values, dtype=np.float64))[::-1]
    n = int(v.size)
    unit = "MiB/s" if op in prov.OP_BYTES else "ops/s"
    if not n:
        return {"unit": unit, "minutes": 0, "points": [], "table": []}
    ranks = np.unique(np.round(np.linspace(1, n, min(n, CURVE_POINTS))).astype(np.int64))
    table = []
    for f in (*(f for f in FRACTIONS if n * (1 - f) >= 1), 1.0):
        value = float(v[_rank(f, n) - 1])
        table.append({"fraction": f, "value": floats([value])[0],
                      "latency": floats([1 / value])[0] if value > 0 else None})
    return {"unit": unit, "minutes": n, "best": floats([v[0]])[0], "mean": floats([v.mean()])[0],
            "points": [list(p) for p in zip(floats(ranks / n), floats(v[ranks - 1]))],
            "table": table}


def _slowdown_series(grid: Grid, cells: series.Cells, ratio: np.ndarray, window_step: int,
                     runs: dict, target: str, ops: Sequence[str]) -> dict:
    """The target's slowdown (its worst op's) per window, on the window's own grid, or the
    worst window of each column where the window is shorter than the step."""
    own = Grid(grid.start, grid.end, window_step)
    per_op = np.full((len(ops), own.columns), np.nan)
    for i, op in enumerate(ops):
        part = runs.get((target, op))
        if part is not None:
            per_op[i] = _dense(own, cells.start[part], ratio[part])
    rated = ~np.isnan(per_op)
    value = np.where(rated.any(axis=0), np.nanmax(np.where(rated, per_op, -np.inf), axis=0),
                     np.nan)
    worst = np.where(rated.any(axis=0), np.argmax(np.where(rated, per_op, -np.inf), axis=0), -1)
    if window_step >= grid.step:
        return {**own.json(), "values": floats(value), "worst": worst.tolist(),
                "reduced": False}
    # Worst window of each column: order by (column, value), keep each column's last.
    column = np.clip(grid.column(own.t0 + np.arange(own.columns) * window_step), 0,
                     grid.columns - 1)
    ok = ~np.isnan(value)
    order = np.lexsort((value[ok], column[ok]))
    col, val, wst = column[ok][order], value[ok][order], worst[ok][order]
    last = np.r_[col[1:] != col[:-1], True] if col.size else np.zeros(0, bool)
    out_value = np.full(grid.columns, np.nan)
    out_worst = np.full(grid.columns, -1, dtype=np.int64)
    out_value[col[last]] = val[last]
    out_worst[col[last]] = wst[last]
    return {**grid.json(), "values": floats(out_value), "worst": out_worst.tolist(),
            "reduced": True}


def _node(stores: Sequence[Store], hosts: Sequence[str], grid: Grid, wanted: set[str]) -> dict:
    """The node context of ``wanted`` hosts per column (see ``NODE_FIELDS``)."""
    rows = [n for store in stores
            for n in store.node(Selection(hosts=tuple(hosts), start=grid.start, end=grid.end))
            if n.host in wanted]
    if not rows:
        return {"hosts": [], "fields": []}
    column = grid.column([n.start for n in rows])
    minutes = np.zeros(grid.columns)
    seen = {(int(c), n.start) for c, n in zip(column, rows)}
    np.add.at(minutes, np.fromiter((c for c, _ in seen), np.int64, len(seen)), 1)
    fields = []
    for name, label, how in NODE_FIELDS:
        keys = _NODE_BYTES.get(name, (name,))
        raw = np.array([[n.values.get(k) for k in keys] for n in rows], dtype=np.float64)
        present = ~np.isnan(raw).all(axis=1)
        if not present.any():
            continue
        values = np.nansum(raw, axis=1)
        out = np.full(grid.columns, np.nan)
        if how == "max":
            np.fmax.at(out, column[present], values[present])
        else:  # all hosts added, per second of the minutes with a sample
            total = np.zeros(grid.columns)
            np.add.at(total, column[present], values[present])
            with np.errstate(invalid="ignore", divide="ignore"):
                out = np.where(minutes > 0, total / (minutes * MINUTE) / 1e6, np.nan)
        fields.append({"name": name, "label": label, "aggregate": how, "values": floats(out)})
    return {"hosts": sorted({n.host for n in rows}), "fields": fields}


def _baselines(book, target: str, grid: Grid) -> list[dict]:
    """Baseline changes of the target within the range, one entry per moment."""
    found: dict[int, dict] = {}
    for b in book.rows:
        if b.target == target and grid.start < b.valid_from < grid.end:
            entry = found.setdefault(b.valid_from, {"time": b.valid_from, "reason": b.reason,
                                                    "ops": set(), "statistics": set()})
            entry["ops"].add(b.op)
            entry["statistics"].add(b.statistic)
    return [{**e, "ops": sorted(e["ops"]), "statistics": sorted(e["statistics"])}
            for _, e in sorted(found.items())]


# -- everything -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Provisioning:
    goal: prov.Goal
    confidence: float
    trials: int = prov.DEFAULT_TRIALS
    seed: int = prov.DEFAULT_SEED


def collect(reader, start: int, end: int, statistics: Sequence[str], windows: Sequence[float],
            provisioning: Provisioning | None = None, long_step: int | None = None) -> dict:
    """The whole report's data: plain JSON-able values; with ``long_step``, each target's
    long-period figures at that step too (``longview``)."""
    stores = reader.stores
    selection = Selection(reader.hosts, reader.targets, reader.ops, start, end)
    grid = Grid(start, end, pick_step(end - start, _has_hours(stores, selection)))
    target_ops = reader.target_ops()
    book = reader.book()
    wanted = [s for s in dict.fromkeys([*PERCENTILES, *statistics]) if quantile_of(s) is not None]
    steps = {w: max(MINUTE, int(w) // MINUTE * MINUTE) for w in windows}
    longs = (longview.TREND_STEP, long_step) if long_step else ()
    needed = list(dict.fromkeys([grid.step, *steps.values(), *longs]))
    if len(stores) > 1:  # a cluster: each file read once for every figure (stats.history_by_file)
        extras = history_by_file.Extras(grid.t0, grid.step, grid.columns)
        at_step = dict(zip(needed, history_by_file.histories(
            stores, selection, needed, wanted, extras=extras,
            processes=forking.processes() if len(stores) >= SPLIT_FROM else 1)))
        heat = {pair: _folded_heatmap(grid, *v) for pair, v in extras.heat.items()}
        figures = extras.figures
    else:
        at_step = dict(zip(needed, series.histories(stores, selection, needed, wanted)))
        heat = heatmaps(stores, selection, grid)
        figures = prov.per_node_figures(stores, selection)
    cells = at_step[grid.step]
    runs = series.runs(cells)
    first = _record_span(stores, selection)[0]
    slowdowns: dict[tuple[float, str, str], dict] = {}
    for window in windows:
        window_step = steps[window]
        w_cells = at_step[window_step]
        w_runs = series.runs(w_cells)
        for stat in statistics:
            with np.errstate(divide="ignore", invalid="ignore"):
                ratio = statistic_values(w_cells, stat) / series.expected_values(
                    book, w_cells, stat, first, end, window_step)
            for target, ops in target_ops.items():
                slowdowns[(window, stat, target)] = _slowdown_series(
                    grid, w_cells, ratio, window_step, w_runs, target, ops)
    if long_step:
        long_stat = next((s for s in statistics if quantile_of(s) is not None), "median")
        by_host = longview.host_values(stores, selection, long_step, long_stat, processes=(
            forking.processes() if len(stores) >= SPLIT_FROM else 1))

        def expected(c: series.Cells, stat: str, step: int) -> np.ndarray:
            return series.expected_values(book, c, stat, first, end, step)
    servers = servermap.collect(stores, selection, start, end, grid.step, book, target_ops)
    targets = []
    for target, ops in target_ops.items():
        hosts = sorted({h for h, t, _ in reader.series if t == target and (
            not reader.hosts or any(fnmatchcase(h, pattern) for pattern in reader.hosts))})
        events = {"errors": np.zeros(grid.columns), "skipped": np.zeros(grid.columns),
                  "stuck": np.zeros(grid.columns)}
        op_figures = []
        for op in ops:
            part = runs.get((target, op))
            if part is None:
                op_figures.append({"op": op, "count": 0})
                continue
            pct = percentiles(grid, cells, part)
            events["errors"] += pct["errors"]
            events["skipped"] += pct["skipped"]
            events["stuck"] = np.fmax(events["stuck"], _dense(grid, cells.start[part],
                                                              cells.stuck[part], 0.0))
            op_figures.append({
                "op": op, "count": int(cells.count[part].sum()), "percentiles": pct,
                "heatmap": heat.get((target, op)),
                "x_or_better": x_or_better(figures.get((target, op), np.zeros(0)), op),
            })
        timeline = {
            **grid.json(), "start": start, "end": end, "ops": list(ops),
            "series": [{"window": w, "statistic": s, **slowdowns[(w, s, target)]}
                       for w in windows for s in statistics],
            "baselines": _baselines(book, target, grid),
            "events": {"errors": [int(v) for v in events["errors"]],
                       "skipped": [int(v) for v in events["skipped"]],
                       "stuck": floats(events["stuck"])},
            "node": _node(stores, reader.hosts, grid, set(hosts)),
        }
        planned = None
        if provisioning is not None:
            p = provisioning
            rows = prov.provision_ops(figures, p.goal, p.confidence, p.trials, p.seed,
                                      [(target, op) for op in ops])
            planned = prov.provision_json(rows, p.goal, p.confidence, p.trials, p.seed)
        targets.append({"target": target, "hosts": hosts, "ops": list(ops),
                        "count": sum(f["count"] for f in op_figures),
                        "provisional": not any(b.target == target for rows in book.books
                                               for b in rows),
                        "timeline": timeline, "provision": planned, "op_figures": op_figures,
                        "servers": servers[target]})
        if long_step:
            targets[-1]["long"] = longview.figures(target, ops, long_step, long_stat, at_step,
                                                   by_host, expected, start, end)
    merged = reader.merged(start, end)
    return {
        "from": start, "to": end, "step": grid.step, "now": reader.now,
        "merged": merged.json(),
        "merged_text": merged.text("the report's period") if reader.cluster else None,
        "databases": [str(s.path) for s in stores], "filters": {
            "hosts": list(reader.hosts), "targets": list(reader.targets),
            "ops": list(reader.ops)},
        "statistics": list(statistics), "windows": list(windows),
        "expected": book.mode, "targets": targets,
    }


__all__ = ["MAX_COLUMNS", "MAX_ROWS", "Grid", "Provisioning", "collect", "heatmaps",
           "pick_step", "x_or_better"]
