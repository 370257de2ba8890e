"""The report's server x time heat map: per target and op, each server's median latency per
step over the op's expected value, from the per-server records (``store/server_reads.py``,
merged exactly over hosts and files) and the rule of ``slowdown servers``
(``stats/server_rule.py``, ``stats/server_table.py``).

- **Columns**: the smallest of ``STEPS`` (ten minutes and multiples of it: the tens merge
  exactly into a column) at least as long as the report's own step; column ``i`` covers
  ``[t0 + i * step, t0 + (i + 1) * step)``, ``t0`` the range's start rounded down to the
  step. Tens overlapping the range are read whole, as ``slowdown servers`` reads them.
- **Rows**: the servers of the op as the records name them, ``unknown`` last: it is the share
  of the op's probes whose server could not be told, judged like the others (as
  ``slowdown servers`` does) and worth seeing beside them. A target whose records name only
  ``unknown`` gets a note, not a figure.
- **Cell**: the server's median in the step (``server_rule.quantile``) over the op's expected
  median at the end of the range (``BaselineBook.expected``, the call ``slowdown servers
  --at END`` makes); ``few`` where the rule cannot bound the median
  (``server_rule.median_interval`` is None: fewer than ``MIN_PROBES`` probes).
- **Row mark**: the rule's word for the server over the whole range
  (``server_table.rows``, what ``slowdown servers --since START --at END`` says).

Why per op, not per group of ops: the expected value and the rule are per op; a cell of a
group would mix latencies of different expected values in its median and probe count.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence

from slowdown.analysis.stats import server_rule, server_table
from slowdown.analysis.store import server_reads
from slowdown.analysis.store.selection import Selection
from slowdown.analysis.store.server_reads import ServerLatencies
from slowdown.analysis.store.server_records import TEN

STEPS = (TEN, 2 * TEN, 3 * TEN, 3600, 7200, 10800, 21600, 43200, 86400)
UNKNOWN = "unknown"
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
    "maps": [one per op with servers]}``."""
    step = pick_step(report_step)
    read = server_reads.read(stores, selection, step)
    if len(read.without) == len(stores):
        return {t: {"note": NONE_KEPT} for t in target_ops}
    t0 = start - start % step
    columns = max(1, -(-(end - t0) // step))
    by_op: dict[tuple[str, str], dict[str, dict[int, ServerLatencies]]] = {}
    for (target, op, server, at), found in read.latencies.items():
        by_op.setdefault((target, op), {}).setdefault(server, {})[(at - t0) // step] = found
    out = {}
    for target, ops in target_ops.items():
        mine = {op: by_op[(target, op)] for op in ops if (target, op) in by_op}
        if not mine:
            out[target] = {"note": NONE_HERE}
            continue
        if all(set(servers) == {UNKNOWN} for servers in mine.values()):
            out[target] = {"note": ONLY_UNKNOWN}
            continue
        words = _words(target, mine)
        maps = []
        for op, servers in mine.items():
            found = book.expected(target, op, "median", end)
            expected = found.value if found is not None else None
            maps.append(_op_map(op, servers, expected, words, t0, step, columns, start, end))
        out[target] = {"step": step, "maps": maps}
    return out


def _words(target: str, mine: Mapping[str, Mapping[str, Mapping[int, ServerLatencies]]]
           ) -> dict[tuple[str, str], str]:
    """The rule's word per (op, server) over the whole range: each server's steps merged."""
    whole = {}
    for op, servers in mine.items():
        for server, steps in servers.items():
            parts = list(steps.values())
            h = parts[0].histogram.copy()
            for p in parts[1:]:
                h.merge(p.histogram)
            whole[(target, op, server)] = ServerLatencies(target, op, server, h,
                                                         sum(p.errors for p in parts))
    rows = server_table.rows(whole, lambda _t, _o: None)
    return {(f.op, r.server): f.judgment.word for r in rows for f in r.ops}


def _op_map(op: str, servers: Mapping[str, Mapping[int, ServerLatencies]],
            expected: float | None, words: Mapping[tuple[str, str], str], t0: int, step: int,
            columns: int, start: int, end: int) -> dict:
    names = sorted(servers, key=_server_order)
    cells = []
    probes = 0
    for row, name in enumerate(names):
        for column, found in sorted(servers[name].items()):
            h = found.histogram
            median = server_rule.quantile(h, 0.5)
            few = server_rule.median_interval(h) is None
            slowdown = median / expected if expected else math.nan
            cells.append([row, column, h.count, found.errors, _g(median), _g(slowdown),
                          int(few)])
            probes += h.count
    marks = [words.get((op, n), server_rule.FEW) for n in names]
    return {"op": op, "t0": t0, "step": step, "columns": columns, "start": start, "end": end,
            "expected": _g(expected) if expected else None, "servers": names, "words": marks,
            "slow": [n for n, w in zip(names, marks) if w == server_rule.SLOW],
            "few": server_rule.MIN_PROBES, "probes": probes, "cells": cells}


__all__ = ["NONE_HERE", "NONE_KEPT", "ONLY_UNKNOWN", "STEPS", "collect", "pick_step"]
