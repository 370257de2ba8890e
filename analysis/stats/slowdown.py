"""Slowdown = observed / expected, per op and per target, over sliding windows.

A window of ``w`` seconds at time ``now`` covers ``[end - w, end)`` with ``end`` the start of
the current (unfinished, not yet written) minute, and takes every record that overlaps it by
its overlap (``store.window``): minute records whole, an hour record cut by an edge in part.
A target's headline slowdown is its worst op's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from slowdown.analysis.stats.baseline import BaselineBook, Expected
from slowdown.analysis.stats.window import Estimate, estimate
from slowdown.analysis.store import Selection, Store, aggregate, aggregate_rows
from slowdown.analysis.store.records import Aggregate, error_rate, minute_of

if TYPE_CHECKING:
    from slowdown.analysis.store.cluster_windows import Prepared

ACCURACY_WINDOWS = (60, 120, 300, 600, 900, 1800, 3600, 7200, 3 * 3600, 6 * 3600, 12 * 3600,
                    86400)


@dataclass
class OpSlowdown:
    target: str
    op: str
    window: float
    observed: Estimate
    expected: Expected | None
    samples: float = 0.0  # completed ops in the window (fractions where it cuts a record)
    errors: float = 0.0  # failed ops in the window

    @property
    def error_rate(self) -> float | None:
        """Failed ops over attempts in the window (``records.error_rate``)."""
        return error_rate(self.samples, self.errors)

    @property
    def value(self) -> float | None:
        """The ratio; None without data or without an expected value."""
        if self.expected is None or math.isnan(self.observed.value) or not self.expected.value:
            return None
        return self.observed.value / self.expected.value


@dataclass
class TargetSlowdown:
    target: str
    window: float
    statistic: str
    ops: list[OpSlowdown] = field(default_factory=list)

    @property
    def worst(self) -> OpSlowdown | None:
        rated = [o for o in self.ops if o.value is not None]
        return max(rated, key=lambda o: o.value) if rated else None

    @property
    def value(self) -> float | None:
        worst = self.worst
        return None if worst is None else worst.value

    @property
    def provisional(self) -> bool:
        return any(o.expected is not None and o.expected.provisional for o in self.ops)


def window_selection(now: float, window: float, **names) -> Selection:
    end = minute_of(now)
    return Selection(start=int(end - window), end=end, **names)


def op_slowdown(stores: Sequence[Store], book: BaselineBook, target: str, op: str,
                window: float, statistic: str, now: float, confidence: float | None = None,
                hosts: tuple[str, ...] = (), live_stuck: float = 0.0,
                agg: Aggregate | None = None) -> OpSlowdown:
    if agg is None:
        agg = aggregate(stores, window_selection(now, window, hosts=hosts, targets=(target,),
                                                 ops=(op,)))
    if live_stuck > agg.stuck_end:  # in flight right now: its age now
        agg.stuck = max(agg.stuck, live_stuck)
        agg.stuck_end = live_stuck
    observed = estimate(agg, statistic, confidence)
    return OpSlowdown(target, op, window, observed,
                      book.expected(target, op, statistic, now, window), agg.samples,
                      agg.errors)


def target_slowdowns(stores: Sequence[Store], book: BaselineBook, targets: Sequence[str],
                     ops: Mapping[str, Sequence[str]], windows: Sequence[float],
                     statistic: str, now: float, confidence: float | None = None,
                     hosts: tuple[str, ...] = (),
                     live_stuck: Mapping[tuple[str, str], float] | None = None,
                     prepared: Prepared | None = None) -> dict[str, list[TargetSlowdown]]:
    """For each target, one ``TargetSlowdown`` per window.

    The records of the longest window are read once, in one query per file and table, for
    every target and op; each window takes its own tail of them (over many files:
    ``cluster_windows.nested_windows``, with the read ``prepared`` while they were opened).
    """
    live_stuck = live_stuck or {}
    wanted = {(t, o) for t in targets for o in ops.get(t, ())}
    end = minute_of(now)
    found = None
    if len(stores) > 1 and windows and wanted:  # many files: each window's parts merged once
        from slowdown.analysis.store.cluster_windows import nested_windows

        found = nested_windows(stores, Selection(hosts=hosts), end, [int(w) for w in windows],
                               prepared)
    if found is not None:
        def agg_of(target: str, op: str, window: float) -> Aggregate:
            return found.get((target, op, int(window))) or Aggregate()
    else:  # one file, or an edge cuts a record: the general path counts it by overlap
        rows: dict[tuple[str, str], list[tuple]] = {}
        if windows and wanted:
            selection = window_selection(now, max(windows), hosts=hosts)
            for store in stores:
                for row in store.aggregate_rows(selection):
                    if (row[2], row[3]) in wanted:
                        rows.setdefault((row[2], row[3]), []).append(row)

        def agg_of(target: str, op: str, window: float) -> Aggregate:
            return aggregate_rows(rows.get((target, op), ()), int(end - window), end)
    result: dict[str, list[TargetSlowdown]] = {}
    for target in targets:
        per_window = []
        for window in windows:
            ts = TargetSlowdown(target, window, statistic)
            for op in ops.get(target, ()):
                ts.ops.append(op_slowdown(stores, book, target, op, window, statistic, now,
                                          confidence, hosts, live_stuck.get((target, op), 0.0),
                                          agg=agg_of(target, op, window)))
            per_window.append(ts)
        result[target] = per_window
    return result


def accurate_window(stores: Sequence[Store], book: BaselineBook, target: str,
                    ops: Sequence[str], statistic: str, now: float, accuracy: float,
                    confidence: float = 0.95, hosts: tuple[str, ...] = (),
                    candidates: Sequence[float] = ACCURACY_WINDOWS) -> TargetSlowdown | None:
    """The shortest window whose confidence interval of ``statistic`` is within
    ``+-accuracy`` (relative) for every op of the target; None if even the longest is not."""
    for window in candidates:
        ts = TargetSlowdown(target, window, statistic)
        for op in ops:
            ts.ops.append(op_slowdown(stores, book, target, op, window, statistic, now,
                                      confidence, hosts))
        widths = [o.observed.half_width for o in ts.ops]
        if ts.ops and all(w is not None and w <= accuracy for w in widths):
            return ts
    return None
