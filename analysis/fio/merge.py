"""Many fio logs into one series of intervals: lockstep reading, weighting, offsets, percentiles.

Files are read in blocks, parsed on a thread pool (numpy releases the GIL while it parses;
a histogram block is summed per interval there too, while it is in that core's cache, and
only the sums are kept) and merged in time lockstep: the file that is furthest behind is
read next, and an interval is complete once every file has passed its end. Memory therefore
stays bounded by a few blocks per file plus the intervals still open, however long the run.
A file must be in time order, as fio writes it (disorder among intervals still open does no
harm); a line that falls into an interval already complete is an error.

Times are put on one timeline first: ``timeline = time_ms + offset_ms + host offset``, where
a host offset corrects for hosts whose fio did not start together.

Intervals are ``[k * interval, (k + 1) * interval)`` of the timeline, reported by their end
like fiologparser_hist.py. Two ways to place a histogram-log line:

- ``end`` (default): the whole line counts in the interval its time falls in. fiologparser_hist.py
  ``--noweight`` does the same, with each interval shifted 10 ms earlier
  (``--offset-ms 10`` reproduces it).
- ``weighted``: fiologparser_hist.py's weighting. The samples of bin ``j`` in a line logged
  at ``t`` are taken to have run over ``[t - interval/2 - value_j, t]`` and each interval
  gets the share of that span it overlaps. ``samples`` is then the sum of those shares (so
  the column adds up to the number of samples; fiologparser_hist.py counts every sample of
  a line in full in each interval it touches). Shares before time 0 are dropped, as there.

Percentiles of fio bins, per interval:

- ``interp`` (default): fiologparser_hist.py's. Each bin's weight is put at its value, at
  the middle of its own cumulative share: ``cdf_j = 100 * (cum_j - w_j / 2) / total``, and
  the percentile is read off by linear interpolation (``numpy.interp``) over all bins.
- ``rank``: fio's own (``calc_clat_percentiles`` in fio's stat.c) and slowdown's: the value of
  the first bin whose cumulative count reaches ``ceil(q * n)``, within half a bin of the
  exact order statistic.

min and max are the values of the first and last non-empty bin (fiologparser_hist.py's
weighted mode gives the lower edge of the bin below and the upper edge of the bin above
instead). Latency logs carry each value itself: their percentiles are exact order statistics
of rank ``ceil(q * n)``, min, mean and max exact.
"""

from __future__ import annotations

import math
import os
import re
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from slowdown.analysis.fio import FioLogError
from slowdown.analysis.fio.histlog import (
    DIRECTIONS,
    Block,
    BlockError,
    Buffers,
    HistLog,
    RawBlock,
    TextBlocks,
    layout_error,
    sniff,
)
from slowdown.analysis.fio.latlog import MAX_COLUMNS, MIN_COLUMNS, LatLog, not_latency
from slowdown.analysis.fio.layout import HEADER_COLUMNS, Layout
from slowdown.analysis.histogram import Histogram, mapping_for
from slowdown.analysis.store.records import MINUTE, Record

DIRECTION_LETTERS = {"r": 0, "w": 1, "t": 2}  # fiologparser_hist.py's letters; "m": all
EPOCH_MS = 10**11  # fio times at or above this are unix epoch ms (--log_unix_epoch)
METHODS = ("interp", "rank")


# -- the input files ---------------------------------------------------------------------------

@dataclass
class Source:
    """One log file and where its times go on the common timeline."""

    path: Path
    log: HistLog | LatLog
    first_line: int
    first_time: int
    size: int
    host: str | None = None
    offset_ms: int = 0

    @property
    def epoch(self) -> bool:
        return self.first_time >= EPOCH_MS


def host_of(path: Path, hosts: Iterable[str]) -> str | None:
    """The host a log belongs to: fio's client names logs ``<name>.log.<host>``; otherwise a
    directory named like one of ``hosts`` (from ``--host-offset``)."""
    name = path.name
    if ".log." in name:
        return name.split(".log.", 1)[1]
    parts = set(path.parent.parts)
    found = [h for h in hosts if h in parts]
    return max(found, key=len) if found else None


def open_sources(paths: Sequence[Path], *, lat_unit: str = "ns", offset_ms: int = 0,
                 host_offsets: dict[str, int] | None = None,
                 warn: Callable[[str], None] = lambda message: None) -> list[Source]:
    """Look at the first line of every file: its kind, layout and host; check they merge."""
    host_offsets = dict(host_offsets or {})
    sources: list[Source] = []
    seen: dict[Path, Path] = {}
    for path in paths:
        path = Path(path)
        try:
            real = path.resolve()
            size = path.stat().st_size
            first = sniff(path)
        except OSError as exc:
            raise FioLogError(path, None, f"cannot read it: {exc.strerror or exc}") from None
        if real in seen:
            raise FioLogError(path, None, f"given twice (also as {seen[real]}): its samples "
                                          "would count twice")
        seen[real] = path
        if first is None:
            warn(f"{path}: empty, skipped")
            continue
        line, columns, first_time = first
        log: HistLog | LatLog
        if MIN_COLUMNS <= columns <= MAX_COLUMNS:
            what = not_latency(path)
            if what is not None:
                raise FioLogError(path, line, f"expected a latency log, found {what} "
                                              "(by its name): it holds no latencies")
            log = LatLog(path, columns, lat_unit)
        else:
            layout = Layout.from_bins(columns - HEADER_COLUMNS)
            if layout is None:
                raise layout_error(path, line, columns)
            log = HistLog(path, layout)
        sources.append(Source(path, log, line, first_time, size))
    if not sources:
        raise FioLogError(paths[0] if paths else "-", None, "no samples: every file is empty")
    _check_kinds(sources)
    hosts = list(host_offsets)
    for source in sources:
        source.host = host_of(source.path, hosts)
        source.offset_ms = offset_ms + host_offsets.get(source.host or "", 0)
    unused = [h for h in hosts if not any(s.host == h for s in sources)]
    if unused:
        raise FioLogError(
            f"--host-offset {unused[0]}", None,
            "no file belongs to this host (a log belongs to host H when it is named "
            "<name>.log.H, as fio's client writes them, or lies in a directory named H)")
    if len({s.epoch for s in sources}) > 1:
        relative = next(s for s in sources if not s.epoch)
        absolute = next(s for s in sources if s.epoch)
        raise FioLogError(relative.path, relative.first_line,
                          f"times relative to the job start ({relative.first_time} ms), but "
                          f"{absolute.path} has unix epoch times (--log_unix_epoch): they "
                          "do not merge")
    return sources


def _check_kinds(sources: list[Source]) -> None:
    first = sources[0]
    for source in sources[1:]:
        if source.log.kind != first.log.kind:
            raise FioLogError(source.path, source.first_line,
                              f"a {source.log.kind} log, but {first.path} is a "
                              f"{first.log.kind} log: give one kind of log at a time")
    if first.log.kind == "latency":
        return
    family = first.log.layout.family
    for source in sources[1:]:
        layout = source.log.layout
        if layout.family != family:
            raise FioLogError(source.path, source.first_line,
                              f"the {layout.family}, but {first.path} has the {family}: "
                              "mixed layouts do not merge")


def common_layout(sources: Sequence[Source]) -> Layout | None:
    """The layout all histogram logs merge into: the coarsest among them (coarse bins are
    unions of fine ones, so finer logs coarsen exactly)."""
    layouts = [s.log.layout for s in sources if isinstance(s.log, HistLog)]
    if not layouts:
        return None
    return max(layouts, key=lambda layout: layout.coarseness)


# -- results -----------------------------------------------------------------------------------

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


def parse_percentiles(text: str) -> list[float]:
    """``"90,95,99"`` or ``"90:95:99.9"`` (fiologparser_hist.py's form) -> [90, 95, 99.9]."""
    values = []
    for part in re.split(r"[,:]", text):
        part = part.strip()
        try:
            value = float(part)
        except ValueError:
            raise ValueError(f"expected percentiles like 90,95,99; got {text!r}") from None
        if not 0.0 <= value <= 100.0 or math.isnan(value):
            raise ValueError(f"percentiles lie within 0..100; got {part!r}")
        values.append(value)
    return values


def bin_stats(hists: np.ndarray, values: np.ndarray, percents: Sequence[float],
              method: str) -> tuple[np.ndarray, ...]:
    """Per row of ``hists`` (weights per bin): total, min, mean, percentiles, max.

    Rows must have a positive total. Percentiles come as an array (rows, len(percents)).
    """
    hists = np.asarray(hists, dtype=np.float64)
    total = hists.sum(axis=1)
    nonzero = hists > 0
    first = nonzero.argmax(axis=1)
    last = hists.shape[1] - 1 - nonzero[:, ::-1].argmax(axis=1)
    mean = (hists * values).sum(axis=1) / total  # not a BLAS product: its threads spin on
    cum = np.cumsum(hists, axis=1)
    out = np.empty((hists.shape[0], len(percents)))
    if method == "interp":
        cdf = 100.0 * (cum - hists / 2.0) / total[:, None]
        for i, p in enumerate(percents):
            j = np.count_nonzero(cdf <= p, axis=1) - 1  # last point at or below p
            below = j < 0
            top = j >= hists.shape[1] - 1
            jc = np.clip(j, 0, hists.shape[1] - 2)
            rows = np.arange(hists.shape[0])
            x0, x1 = cdf[rows, jc], cdf[rows, jc + 1]
            with np.errstate(invalid="ignore", divide="ignore"):
                step = (p - x0) / (x1 - x0)
            estimate = values[jc] + (values[jc + 1] - values[jc]) * step
            estimate = np.where(x0 == p, values[jc], estimate)
            estimate = np.where(below, values[0], estimate)
            out[:, i] = np.where(top, values[-1], estimate)
    elif method == "rank":
        for i, p in enumerate(percents):
            threshold = np.round(p / 100.0 * total, 9)
            j = np.count_nonzero(cum < threshold[:, None], axis=1)
            out[:, i] = values[np.clip(j, first, last)]
    else:
        raise ValueError(f"percentile method must be one of {', '.join(METHODS)}")
    return total, values[first], mean, out, values[last]


def exact_stats(values: np.ndarray, percents: Sequence[float]) -> tuple:
    """count, min, mean, percentiles (list) and max of raw values: order statistics of rank
    ``max(1, ceil(q * n))``. ``values`` is reordered in place."""
    n = values.size
    ranks = [max(1, math.ceil(round(p / 100.0 * n, 9))) - 1 for p in percents]
    # One selection per rank, each in the part above the previous one: about 2n steps,
    # where numpy's partition with several ranks at once takes several times longer.
    found: dict[int, float] = {}
    below = 0
    for rank in sorted(set(ranks)):
        values[below:].partition(rank - below)
        found[rank] = float(values[rank])  # the next selection may move it
        below = rank
    return (n, float(values.min()), float(values.sum(dtype=np.float64)) / n,
            [found[r] for r in ranks], float(values.max()))


def _groups(keys: np.ndarray) -> tuple[np.ndarray | None, list[int], np.ndarray]:
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


def _intervals(times: np.ndarray, span: int, ordered: bool
               ) -> tuple[np.ndarray | None, list[int], np.ndarray]:
    """Rows grouped by interval ``time // span``, as ``_groups``. Times in order (fio's
    case) are cut with a binary search per interval instead of a division per row."""
    if not ordered or times.size == 0:
        return _groups(times // span)
    first, last = int(times[0]) // span, int(times[-1]) // span
    cuts = np.searchsorted(times, np.arange(first + 1, last + 1, dtype=np.int64) * span)
    bounds = np.concatenate(([0], cuts, [times.size]))
    full = np.flatnonzero(bounds[1:] > bounds[:-1])
    keys = (full + first).tolist()
    return None, keys, np.append(bounds[full], times.size)


def _timeline(source: Source, block: Block) -> np.ndarray:
    return block.times + source.offset_ms if source.offset_ms else block.times


def _take(array: np.ndarray, order: np.ndarray | None) -> np.ndarray:
    return array if order is None else array[order]


def _sums(counts: np.ndarray, order: np.ndarray | None, bounds: np.ndarray) -> list:
    """Bin counts summed per group of rows (slices of rows in order: no copy)."""
    rows = _take(counts, order)
    return [rows[a:b].sum(axis=0) for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist())]


class _Consumer:
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


class IntervalSeries(_Consumer):
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
            order, keys, bounds = _intervals(tt, self.span, block.ordered)
            sums.append((letter, keys, _sums(cc, order, bounds)))
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
            order, keys, bounds = _groups(k[keep])
            share = _take(share[keep], order)
            bins = _take(bin_[entry[keep]], order)
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
            order, keys, bounds = _intervals(tt, self.span, block.ordered)
            vv = _take(vv, order)
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


class MinuteRecords(_Consumer):
    """Minute records of our exponential histogram per (host, direction), for the database."""

    span = MINUTE * 1000

    def __init__(self, sources: Sequence[Source], *, target: str, start_ms: int,
                 host: Callable[[Source], str]) -> None:
        self.target = target
        self.start_ms = int(start_ms)  # added to timeline times: unix epoch ms
        self.host = host
        self.layout = common_layout(sources)
        self.open: dict[int, dict[tuple[str, int], Any]] = {}  # minute -> (host, ddir) -> ...
        self.done_before = -(2**62)
        self.records: list[Record] = []
        self.mapping = mapping_for(Histogram().scale)
        if self.layout is not None:
            seconds = self.layout.values * self.layout.unit_seconds
            self.seconds = seconds
            positive = seconds > 0
            self.positive = positive
            self.index = np.zeros(seconds.size, dtype=np.int64)
            self.index[positive] = self.mapping.indices(seconds[positive])
        else:
            self.unit_seconds = sources[0].log.unit_seconds

    def add(self, source: Source, block: Block, prepared: None = None) -> None:
        times = block.times + source.offset_ms + self.start_ms
        self._late(block, times)
        host = self.host(source)
        counts = block.counts
        if counts is not None and source.log.layout != self.layout:
            counts = source.log.layout.coarsen(counts, self.layout.coarseness)
        for ddir in range(len(DIRECTIONS)):
            rows = np.flatnonzero(block.ddir == ddir)
            if rows.size == 0:
                continue
            order, keys, bounds = _intervals(times[rows], self.span, block.ordered)
            picked = _take(rows, order)
            if counts is not None:
                for key, total in zip(keys, _sums(counts[picked], None, bounds)):
                    slot = self.open.setdefault(key, {})
                    if (host, ddir) in slot:
                        slot[(host, ddir)] += total
                    else:
                        slot[(host, ddir)] = total
            else:
                values = block.values[picked] * self.unit_seconds
                for key, a, b in zip(keys, bounds[:-1], bounds[1:]):
                    slot = self.open.setdefault(key, {})
                    hist = slot.get((host, ddir))
                    if hist is None:
                        hist = slot[(host, ddir)] = Histogram()
                    hist.record_many(values[a:b])

    def _histogram(self, counts: np.ndarray) -> Histogram:
        h = Histogram()
        nonzero = np.flatnonzero(counts)
        c = counts[nonzero]
        v = self.seconds[nonzero]
        positive = self.positive[nonzero]
        h.buckets.add_arrays(self.index[nonzero][positive], c[positive])
        h.zero_count = int(c[~positive].sum())
        h.count = int(c.sum())
        h.sum = float((c * v).sum())
        h.sumsq = float((c * v * v).sum())
        h.min = float(v[0])
        h.max = float(v[-1])
        return h

    def flush(self, watermark: float) -> list[Record]:
        before = self.complete_before(watermark + self.start_ms)
        ready = sorted(k for k in self.open if k < before)
        self.done_before = max(self.done_before, before)
        done = []
        for k in ready:
            for (host, ddir), acc in sorted(self.open.pop(k).items()):
                h = acc if isinstance(acc, Histogram) else self._histogram(acc)
                if h.count:
                    done.append(Record(host, self.target, DIRECTIONS[ddir], k * MINUTE, h))
        self.records.extend(done)
        return done


# -- reading in lockstep -----------------------------------------------------------------------

@dataclass
class _Stream:
    source: Source
    text: TextBlocks
    pending: deque = field(default_factory=deque)  # (RawBlock, Future)
    lines: int = 0  # lines of the blocks handed out so far
    watermark: float = -math.inf
    bytes_done: int = 0


def _error(stream: _Stream, raw: RawBlock, exc: BlockError) -> FioLogError:
    line = stream.lines + exc.offset + 1
    message = exc.message
    if raw.unterminated and exc.offset == raw.data.count(b"\n") - 1:
        message += " (the file ends in the middle of this line: truncated?)"
    return FioLogError(stream.source.path, line, message)


def merge(sources: Sequence[Source], consumer: IntervalSeries | MinuteRecords, *,
          workers: int | None = None, memory: int = 256 << 20,
          progress: Callable[[int], None] | None = None) -> Iterator[list]:
    """Feed every file to ``consumer`` in time lockstep; yields what it completes."""
    workers = workers or min(os.cpu_count() or 1, 8)
    # Blocks read ahead per file: with many files the others keep the threads busy.
    depth = 2 if len(sources) < 2 * workers else 1
    # Per file: depth + 1 buffers of text and as many blocks parsed (up to 3 times larger),
    # unless the consumer sums the blocks in the parser threads; there each thread's block
    # and its passes take up to 6 times its text.
    held = len(sources) * (depth + 1) * (1 if consumer.reduces else 4) + 6 * workers
    block_bytes = int(min(max(memory // held, 64 << 10), 4 << 20))
    buffers = Buffers()
    streams = [_Stream(s, TextBlocks(s.path, block_bytes, buffers)) for s in sources]
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="fio-parse")
    if isinstance(consumer, IntervalSeries):
        consumer.pool = pool

    def work(source: Source, raw: RawBlock) -> tuple[Block, Any]:
        if not consumer.reduces:
            return source.log.parse(raw), None
        block = source.log.parse(raw, scratch=True)
        prepared = consumer.prepare(source, block)
        block.counts = None  # the thread's scratch memory, which its next parse reuses
        return block, prepared

    def refill(stream: _Stream) -> None:
        while len(stream.pending) < depth:
            raw = stream.text.read()
            if raw is None:
                return
            future: Future = pool.submit(work, stream.source, raw)
            stream.pending.append((raw, future))

    try:
        for stream in streams:
            refill(stream)
        active = [s for s in streams if s.pending]
        while active:
            stream = min(active, key=lambda s: s.watermark)
            raw, future = stream.pending.popleft()
            try:
                block, prepared = future.result()
            except BlockError as exc:
                raise _error(stream, raw, exc) from None
            refill(stream)
            if len(block):
                try:
                    consumer.add(stream.source, block, prepared)
                except BlockError as exc:
                    raise _error(stream, raw, exc) from None
                last = block.last + stream.source.offset_ms
                stream.watermark = max(stream.watermark, last)
            stream.lines += len(block) if block.rows is None else raw.data.count(b"\n")
            buffers.give(raw.buffer)  # what was parsed from it lives in its own arrays
            if progress is not None:
                progress(stream.text.bytes_read - stream.bytes_done)
                stream.bytes_done = stream.text.bytes_read
            if not stream.pending:
                active.remove(stream)
            low = min((s.watermark for s in active), default=math.inf)
            done = consumer.flush(low)
            if done:
                yield done
        done = consumer.flush(math.inf)
        if done:
            yield done
    finally:
        for stream in streams:
            stream.text.close()
            for _, future in stream.pending:
                future.cancel()
        pool.shutdown(wait=True)


__all__ = [
    "DIRECTION_LETTERS",
    "METHODS",
    "IntervalSeries",
    "MinuteRecords",
    "Row",
    "Source",
    "bin_stats",
    "exact_stats",
    "host_of",
    "merge",
    "open_sources",
    "parse_percentiles",
]
