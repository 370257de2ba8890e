"""The report's server x time heat map: per target and op, each server's median latency per
step over the op's expected value, from the per-server records merged exactly over hosts and
files into a cell per (server, step) (``store/server_cells.py``: arrays, where a month is a
hundred thousand cells) and the rule of ``slowdown servers`` (``stats/server_rule.py``,
``stats/server_table.py``). The cells' medians and ``few`` are the rule's own, vectorised:
tests/test_report_servers.py checks them against ``server_reads`` and ``server_rule``.

- **Columns**: the smallest of ``STEPS`` (ten minutes and multiples of it: the tens merge
  exactly into a column) at least as long as the report's own step; column ``i`` covers
  ``[t0 + i * step, t0 + (i + 1) * step)``, ``t0`` the range's start rounded down to the
  step. Tens overlapping the range are read whole, as ``slowdown servers`` reads them.
- **Rows**: the servers of the op as the records name them, ``unknown`` last: it is the share
  of the op's probes whose server could not be told, judged like the others (as
  ``slowdown servers`` does) and worth seeing beside them. A target whose records name only
  ``unknown`` gets a note, not a figure.
- **Cell**: the server's median in the step (as ``server_rule.quantile``: the bucket that holds
  it, its value computed where it is drawn) over the op's expected median at the end of the
  range (``BaselineBook.expected``, the call ``slowdown servers --at END`` makes); ``few``
  where the rule cannot bound the median: fewer than ``MIN_PROBES`` probes (from which
  ``server_rule.median_ranks`` stays in range for every count: tested).
- **Row mark**: the rule's word for the server over the whole range
  (``server_table.rows``, what ``slowdown servers --since START --at END`` says).

Why per op, not per group of ops: the expected value and the rule are per op; a cell of a
group would mix latencies of different expected values in its median and probe count.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np

from slowdown.analysis.stats import server_rule, server_table
from slowdown.analysis.store import server_cells
from slowdown.analysis.store.selection import Selection
from slowdown.analysis.store.server_reads import ServerLatencies
from slowdown.analysis.store.server_records import TEN

STEPS = (TEN, 2 * TEN, 3 * TEN, 3600, 7200, 10800, 21600, 43200, 86400)
UNKNOWN = "unknown"
ZERO, OTHER, NO_PROBES = -1, -2, -3  # a median's codes beside its bucket (see cells_of)
NONE_KEPT = ("no per-server records: the service that wrote the data predates them, or the "
             "filesystem does not say which server served an op")
NONE_HERE = "no per-server records of this target in this range"
ONLY_UNKNOWN = ("every probe of this target went to server 'unknown': its filesystem does not "
                "say which server served an op")


def pick_step(report_step: int) -> int:
    """The smallest of ``STEPS`` no shorter than the report's step (whole days beyond)."""
    for step in STEPS:
        if step >= report_step:
            return step
    return 86400 * math.ceil(report_step / 86400)


def _g(value: float) -> float | None:
    return float(f"{value:.6g}") if math.isfinite(value) else None


def _server_order(name: str) -> tuple:
    """Names with numbers in their order (``h2`` before ``h10``), ``unknown`` last."""
    return (name == UNKNOWN, [(0, int(p), "") if p.isdigit() else (1, 0, p)
                              for p in re.split(r"(\d+)", name) if p])


def collect(stores: Sequence, selection: Selection, start: int, end: int, report_step: int,
            book, target_ops: Mapping[str, Sequence[str]]) -> dict[str, dict]:
    """Per target: ``{"note": text}`` where there is nothing to draw, else ``{"step": ...,
    "maps": [one per op with servers]}``. A (target, op) is read at a time, so that only its
    cells are in memory."""
    step = pick_step(report_step)
    t0 = start - start % step
    columns = max(1, -(-(end - t0) // step))
    holds = False
    out = {}
    for target, ops in target_ops.items():
        maps = []
        for op in ops:
            cells = server_cells.read(stores, replace(selection, pairs=((target, op),)), step)
            holds = holds or cells.holds
            if cells.keys:
                found = book.expected(target, op, "median", end)
                maps.append(_op_map(cells, op, found.value if found is not None else None,
                                    t0, step, columns, start, end))
        if not maps:
            out[target] = {"note": NONE_HERE}
        elif all(m["servers"] == [UNKNOWN] for m in maps):
            out[target] = {"note": ONLY_UNKNOWN}
        else:
            out[target] = {"step": step, "maps": maps}
    if not holds:
        return {t: {"note": NONE_KEPT} for t in target_ops}
    return out


def _op_map(cells: server_cells.ServerCells, op: str, expected: float | None, t0: int,
            step: int, columns: int, start: int, end: int) -> dict:
    """One (target, op)'s heat map from its cells, dense per row (see ``cells_of``)."""
    probes = cells.probes
    bucket, in_zero = _median_buckets(cells, probes)
    words = _words(cells)
    names = sorted({k[2] for k in cells.keys}, key=_server_order)
    row_of = {n: i for i, n in enumerate(names)}
    row = np.fromiter((row_of[k[2]] for k in cells.keys), np.int64, len(cells.keys))
    column = np.fromiter(((k[3] - t0) // step for k in cells.keys), np.int64, len(cells.keys))
    scale = int(np.bincount(cells.scale - cells.scale.min()).argmax() + cells.scale.min())
    own = (cells.scale == scale) & ~in_zero
    lowest = int(bucket[own].min()) if own.any() else 0
    dense = np.zeros((len(names), columns), np.int64)
    dense[row, column] = probes
    median = np.full((len(names), columns), NO_PROBES, np.int64)
    median[row, column] = np.where(in_zero, ZERO, np.where(own, bucket - lowest, OTHER))
    other = np.flatnonzero(~own & ~in_zero)
    failed = np.flatnonzero(cells.errors)
    marks = [words.get(n, server_rule.FEW) for n in names]
    return {
        "op": op, "t0": t0, "step": step, "columns": columns, "start": start, "end": end,
        "expected": _g(expected) if expected else None, "servers": names, "words": marks,
        "slow": [n for n, w in zip(names, marks) if w == server_rule.SLOW],
        "few": server_rule.MIN_PROBES, "total": int(probes.sum()), "cells": len(cells.keys),
        "scale": scale, "lowest": lowest, "probes": dense.tolist(),
        "median": [[None if v == NO_PROBES else v for v in r] for r in median.tolist()],
        "other": [[int(row[c]), int(column[c]), int(cells.scale[c]), int(bucket[c])]
                  for c in other.tolist()],
        "errors": [[int(row[c]), int(column[c]), int(cells.errors[c])] for c in failed.tolist()]}


def cells_of(m: dict) -> list[tuple[int, int, int, int, float, bool]]:
    """``(row, column, probes, errors, median, few)`` of each cell with probes of a map, from
    its page form: ``probes[row][column]``; ``median[row][column]``, the bucket holding the
    median less ``lowest`` at ``scale`` (``-1``: the zero bucket; ``-2``: at the cell's own
    scale, in ``other`` as ``[row, column, scale, bucket]``), its value the bucket's
    representative value (``mapping.value``); ``errors`` as ``[row, column, errors]`` where
    any; few: fewer than ``few`` probes."""
    from slowdown.analysis.histogram.histogram import mapping_for

    other = {(r, c): (s, b) for r, c, s, b in m["other"]}
    errors = {(r, c): e for r, c, e in m["errors"]}
    out = []
    for r, (counts, medians) in enumerate(zip(m["probes"], m["median"])):
        for c, (n, b) in enumerate(zip(counts, medians)):
            if not n:
                continue
            if b == ZERO:
                value = 0.0
            elif b == OTHER:
                value = mapping_for(other[(r, c)][0]).value(other[(r, c)][1])
            else:
                value = mapping_for(m["scale"]).value(b + m["lowest"])
            out.append((r, c, n, errors.get((r, c), 0), value, n < m["few"]))
    return out


def _median_buckets(cells: server_cells.ServerCells, probes: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Each cell's median as ``server_rule.quantile`` takes it, vectorised: the bucket (at the
    cell's scale) holding rank ``ceil(n / 2)``, or the zero bucket (True in the second
    array); the median is that bucket's representative value (``mapping.value``)."""
    rank = np.maximum(1, -(-probes // 2))
    in_zero = (probes > 0) & (rank <= cells.zero)
    out = np.zeros(len(cells.keys), np.int64)
    if not cells.cell.size:
        return out, in_zero
    total = np.cumsum(cells.count)
    first = np.r_[0, np.flatnonzero(cells.cell[1:] != cells.cell[:-1]) + 1]
    before = np.zeros(len(cells.keys), np.int64)
    before[cells.cell[first]] = total[first] - cells.count[first]
    seen = cells.zero[cells.cell] + total - before[cells.cell]
    at = np.flatnonzero(seen >= rank[cells.cell])
    which, where = np.unique(cells.cell[at], return_index=True)
    out[which] = cells.index[at[where]]
    return out, in_zero


def _words(cells: server_cells.ServerCells) -> dict[str, str]:
    """The rule's word per server of one (target, op) over the whole range, as ``slowdown
    servers`` says it (``server_table.rows`` over each server's steps merged)."""
    latencies = {key: ServerLatencies(*key, h, errors)
                 for key, (h, errors) in server_cells.whole(cells).items()}
    rows = server_table.rows(latencies, lambda _t, _o: None)
    return {r.server: f.judgment.word for r in rows for f in r.ops}


__all__ = ["NONE_HERE", "NONE_KEPT", "ONLY_UNKNOWN", "STEPS", "cells_of", "collect",
           "pick_step"]
