"""Merged logs as rows per interval and direction, for CSV and JSON: the placing of lines in
intervals and fiologparser_hist.py's weighting.

Intervals are ``[k * interval, (k + 1) * interval)`` of the timeline, reported by their end
like fiologparser_hist.py. Two ways to place a histogram-log line:

- ``end`` (``import-fio --noweight``): the whole line counts in the interval its time falls
  in. fiologparser_hist.py ``--noweight`` does the same, with each interval shifted 10 ms
  earlier (an offset of 10 ms reproduces it; ``--noweight`` applies it unless told otherwise).
- ``weighted`` (``import-fio``'s default, as fiologparser_hist.py's): its weighting. The
  samples of bin ``j`` in a line logged at ``t`` are taken to have run over
  ``[t - interval/2 - value_j, t]`` and each interval gets the share of that span it
  overlaps. ``samples`` is then the sum of those shares (so
  the column adds up to the number of samples; fiologparser_hist.py counts every sample of
  a line in full in each interval it touches). Shares before time 0 are dropped, as there.

Guarantees: a consumer (``IntervalSeries`` here, ``MinuteRecords`` for the database) takes
lines in any order among the intervals still open, refuses (``BlockError``) a line that
reaches into an interval already handed out, and hands out an interval only once every file
has passed its end (``complete_before``). The grouping helpers here serve both.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from slowdown.analysis.fio.blockparse import BlockError
from slowdown.analysis.fio.logblock import Block
from slowdown.analysis.fio.percentiles import METHODS, bin_stats, exact_stats
from slowdown.analysis.fio.sources import Source, common_layout

DIRECTION_LETTERS = {"r": 0, "w": 1, "t": 2}  # fiologparser_hist.py's letters; "m": all


@dataclass
class Row:
    """One interval of one direction; latencies in the logs' unit (``ns`` or ``us``)."""

    end_ms: int
    direction: str  # m, r, w or t
    samples: float
    min: float
    avg: float
    percentiles: list[float]  # in the order asked for, the median first
    max: float


def group_rows(keys: np.ndarray) -> tuple[np.ndarray | None, list[int], np.ndarray]:
    """Rows grouped by key: the order that sorts them (None when already sorted), the key of
    each group and the bounds of the groups in that order (one more than groups)."""
    order = None
    if keys.size == 0:
        return order, [], np.zeros(1, dtype=np.int64)
    if keys.size > 1 and (keys[1:] < keys[:-1]).any():
        order = np.argsort(keys, kind="stable")
        keys = keys[order]
    cuts = np.flatnonzero(keys[1:] != keys[:-1]) + 1
    bounds = np.concatenate(([0], cuts, [keys.size]))
    return order, keys[bounds[:-1]].tolist(), bounds


def interval_groups(times: np.ndarray, span: int, ordered: bool
                    ) -> tuple[np.ndarray | None, list[int], np.ndarray]:
    """Rows grouped by interval ``time // span``, as ``group_rows``. Times in order (fio's
    case) are cut with a binary search per interval instead of a division per row."""
    if not ordered or times.size == 0:
        return group_rows(times // span)
    first, last = int(times[0]) // span, int(times[-1]) // span
    cuts = np.searchsorted(times, np.arange(first + 1, last + 1, dtype=np.int64) * span)
    bounds = np.concatenate(([0], cuts, [times.size]))
    full = np.flatnonzero(bounds[1:] > bounds[:-1])
    keys = (full + first).tolist()
    return None, keys, np.append(bounds[full], times.size)


def _timeline(source: Source, block: Block) -> np.ndarray:
    return block.times + source.offset_ms if source.offset_ms else block.times


def take(array: np.ndarray, order: np.ndarray | None) -> np.ndarray:
    return array if order is None else array[order]


def group_sums(counts: np.ndarray, order: np.ndarray | None, bounds: np.ndarray) -> list:
    """Bin counts summed per group of rows (slices of rows in order: no copy)."""
    rows = take(counts, order)
    return [rows[a:b].sum(axis=0) for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist())]


class IntervalConsumer:
    """Intervals of ``span`` ms on a timeline; knows which are complete."""

    span: int
    lookback: float = 0.0  # ms a line reaches back before its own time
    reduces: bool = False  # prepare() sums histogram blocks: their lines need not be kept
    done_before: int  # first interval not yet handed out

    def _late(self, block: Block, times: np.ndarray, reach: float = 0.0) -> None:
        """Refuse lines that reach (``reach`` ms back) into intervals already handed out."""
        limit = self.done_before * self.span + reach
        late = np.flatnonzero((times[:1] if block.ordered else times) < limit)
        if late.size:
            row = int(late[0])
            raise BlockError(
                block.offset(row),
                f"time {int(block.times[row])} ms falls before {self.done_before * self.span}"
                " ms on the common timeline, which every file has passed: a log must be in "
                "time order (logs of several jobs in one file, fio's per_job_logs=0, are not)")

    def prepare(self, source: Source, block: Block) -> Any:
        """What of a block can be worked out before its turn (in a parser thread): None."""
        return None

    def complete_before(self, watermark: float) -> int:
        """First interval that a line at or after ``watermark`` can still reach."""
        if watermark == math.inf:
            return 2**62
        if watermark == -math.inf:
            return -(2**62)
        return math.floor((watermark - self.lookback) / self.span)


class IntervalSeries(IntervalConsumer):
    """Rows per interval and direction, for CSV and JSON."""

    def __init__(self, sources: Sequence[Source], *, interval_ms: int = 1000,
                 directions: str = "m", weighted: bool = False, method: str = "interp",
                 percents: Sequence[float] = (50.0, 90.0, 95.0, 99.0)) -> None:
        if interval_ms <= 0:
            raise ValueError("the interval must be positive")
        if method not in METHODS:
            raise ValueError(f"percentile method must be one of {', '.join(METHODS)}")
        self.span = int(interval_ms)
        self.directions = sorted(set(directions))
        self.weighted = weighted
        self.method = method
        self.percents = list(percents)
        self.layout = common_layout(sources)
        self.histogram = self.layout is not None
        self.reduces = self.histogram
        if weighted and not self.histogram:
            raise ValueError("the weighting applies to histogram logs (a latency log has the "
                             "time of every sample)")
        self.open: dict[int, dict[str, Any]] = {}  # interval -> direction -> bins or values
        self.done_before = -(2**62)
        self.pool: ThreadPoolExecutor | None = None  # set by merge(): stats on its threads
        if self.histogram:
            layout = self.layout
            self.values = layout.values
            self.values_ms = layout.values * layout.unit_seconds * 1000.0
            if weighted:
                self.lookback = self.span / 2 + layout.max_value * layout.unit_seconds * 1000.0

    def _selections(self, ddir: np.ndarray) -> Iterator[tuple[str, np.ndarray | None]]:
        for letter in self.directions:
            if letter == "m":
                yield letter, None
            else:
                rows = np.flatnonzero(ddir == DIRECTION_LETTERS[letter])
                if rows.size:
                    yield letter, rows

    def prepare(self, source: Source, block: Block) -> list | None:
        """A histogram block's bins summed per interval and direction, while its lines are
        still in the cache of the parser thread's core: ``[(letter, intervals, sums)]``."""
        if not self.histogram:
            return None
        times = _timeline(source, block)
        counts = block.counts
        if source.log.layout != self.layout:
            counts = source.log.layout.coarsen(counts, self.layout.coarseness)
        if self.weighted:
            return self._weighted_sums(block, times, counts)
        return self._end_sums(block, times, counts)

    def add(self, source: Source, block: Block, prepared: list | None = None) -> None:
        """Count a block in its intervals; ``prepared`` is what ``prepare`` returned."""
        times = _timeline(source, block)
        if not self.histogram:
            self._add_latencies(block, times)
            return
        self._late(block, times, self.lookback)
        if prepared is None:
            prepared = self.prepare(source, block)
        for letter, keys, sums in prepared:
            for key, total in zip(keys, sums):
                slot = self.open.setdefault(key, {})
                if letter in slot:
                    slot[letter] += total
                else:
                    slot[letter] = total

    def _end_sums(self, block: Block, times: np.ndarray, counts: np.ndarray) -> list:
        sums = []
        for letter, rows in self._selections(block.ddir):
            tt = times if rows is None else times[rows]
            cc = counts if rows is None else counts[rows]
            order, keys, bounds = interval_groups(tt, self.span, block.ordered)
            sums.append((letter, keys, group_sums(cc, order, bounds)))
        return sums

    def _weighted_sums(self, block: Block, times: np.ndarray, counts: np.ndarray) -> list:
        span = self.span
        sums = []
        for letter, rows in self._selections(block.ddir):
            cc = counts if rows is None else counts[rows]
            tt = times if rows is None else times[rows]
            line, bin_ = np.nonzero(cc)
            if line.size == 0:
                continue
            weight = cc[line, bin_].astype(np.float64)
            end = tt[line].astype(np.float64)
            start = end - span / 2 - self.values_ms[bin_]
            first = np.floor(start / span).astype(np.int64)
            last = np.ceil(end / span).astype(np.int64) - 1
            reach_n = last - first + 1
            entry = np.repeat(np.arange(line.size), reach_n)
            k = first[entry] + (np.arange(entry.size) - np.repeat(np.cumsum(reach_n) - reach_n,
                                                                   reach_n))
            lo = np.maximum(start[entry], k * float(span))
            hi = np.minimum(end[entry], (k + 1) * float(span))
            share = weight[entry] * (hi - lo) / (end[entry] - start[entry])
            keep = (share > 0) & (k >= 0)  # nothing ran before the timeline starts
            order, keys, bounds = group_rows(k[keep])
            share = take(share[keep], order)
            bins = take(bin_[entry[keep]], order)
            nbins = cc.shape[1]
            sums.append((letter, keys, [
                np.bincount(bins[a:b], weights=share[a:b], minlength=nbins)
                for a, b in zip(bounds[:-1], bounds[1:])]))
        return sums

    def _add_latencies(self, block: Block, times: np.ndarray) -> None:
        self._late(block, times)
        for letter, rows in self._selections(block.ddir):
            tt = times if rows is None else times[rows]
            vv = block.values if rows is None else block.values[rows]
            order, keys, bounds = interval_groups(tt, self.span, block.ordered)
            vv = take(vv, order)
            for key, a, b in zip(keys, bounds[:-1], bounds[1:]):
                self.open.setdefault(key, {}).setdefault(letter, []).append(vv[a:b])

    def flush(self, watermark: float) -> list[Row]:
        """Rows of the intervals complete once every file has reached ``watermark``."""
        before = self.complete_before(watermark)
        ready = sorted(k for k in self.open if k < before)
        self.done_before = max(self.done_before, before)
        if not ready:
            return []
        if self.histogram:
            return self._bin_rows(ready)
        jobs = []
        for k in ready:
            slot = self.open.pop(k)
            for letter in self.directions:
                parts = slot.get(letter)
                if parts:
                    jobs.append(((k + 1) * self.span, letter, parts))
        stats = (self.pool.map if self.pool is not None else map)(self._exact, jobs)
        return [Row(end, letter, *numbers) for (end, letter, _), numbers in zip(jobs, stats)]

    def _exact(self, job: tuple[int, str, list[np.ndarray]]) -> tuple:
        parts = job[2]
        return exact_stats(np.concatenate(parts), self.percents)

    def _bin_rows(self, ready: list[int]) -> list[Row]:
        keys: list[tuple[int, str]] = []
        hists = []
        for k in ready:
            slot = self.open.pop(k)
            for letter in self.directions:
                hist = slot.get(letter)
                if hist is not None and hist.sum() > 0:
                    keys.append((k, letter))
                    hists.append(hist)
        if not hists:
            return []
        total, low, mean, pcts, high = bin_stats(np.vstack(hists), self.values, self.percents,
                                                 self.method)
        return [Row((k + 1) * self.span, letter, float(total[i]), float(low[i]),
                    float(mean[i]), pcts[i].tolist(), float(high[i]))
                for i, (k, letter) in enumerate(keys)]


__all__ = [
    "DIRECTION_LETTERS",
    "IntervalConsumer",
    "IntervalSeries",
    "Row",
    "group_rows",
    "group_sums",
    "interval_groups",
    "take",
]
