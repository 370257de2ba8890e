"""Merged logs as minute records of slowdown's exponential histogram, for the database.

Guarantees: one record per minute, host and direction that holds samples, in order of
minute, then host and direction; every sample of every log counted once, fio bins at their
bin value (see ``output`` for the accuracy), latency-log values one by one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from slowdown.analysis.fio.intervals import (
    IntervalConsumer,
    group_sums,
    interval_groups,
    take,
)
from slowdown.analysis.fio.logblock import DIRECTIONS, Block
from slowdown.analysis.fio.sources import Source, common_layout
from slowdown.analysis.histogram import Histogram, mapping_for
from slowdown.analysis.store.records import MINUTE, Record


class MinuteRecords(IntervalConsumer):
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
            order, keys, bounds = interval_groups(times[rows], self.span, block.ordered)
            picked = take(rows, order)
            if counts is not None:
                for key, total in zip(keys, group_sums(counts[picked], None, bounds)):
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


__all__ = ["MinuteRecords"]
