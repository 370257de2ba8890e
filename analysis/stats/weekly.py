"""The expected value that knows the week (``[baseline] expected = "weekly"``).

The baseline in force keeps, beside its period's histogram, the histogram of each hour of
the week of that period (``store.weekly_histograms``). The expected value of a moment is:

1. per hour of the week, the statistic of the hosts' histograms of that hour merged exactly
   (a cluster's: each host's baseline in force, as the flat value merges them);
2. smoothed across neighbouring hours: a weighted geometric mean over a circular kernel,
   the hour itself 4, the same hour of the day before and after 2 each, the hour before and
   after on the same day 1 each (``KERNEL``). The days weigh more than the hours: a nightly
   job starts on the clock, on every day, so the same hour of the neighbouring days tells of
   it and the neighbouring hours do not; four weeks give only four values of one hour of the
   week, and the kernel gives each of them the weight of ten. A geometric mean of values,
   not a mixture of histograms: a mixture's tail quantile would take a neighbour's slow tail
   whole (q99 of an hour next to the backups would be the backups'). An hour of a 3x nightly
   job two hours long reads 3 / 3^0.9 = 1.12 at its own hour, not 3.
3. a window of an hour or less takes the smoothed values of the hours it covers (a geometric
   mean weighted by overlap); a longer window takes the statistic of the hours' histograms
   merged, each weighted by its overlap: the statistic the usual week shows over such a
   window (a day's q99 holds the backups' two hours; a mean of hourly values would not).

Before every hour of the week has ``MIN_SAMPLES`` values in the baseline's period (less
than a week of data: the initial baseline after a day, a rebaseline from a day), or where a
host's baseline in force was made without them, the expected value is the flat one, and the
readers say why (``Expected.basis``, ``Expected.note``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from slowdown.analysis.histogram import Histogram
from slowdown.analysis.stats.window import estimate
from slowdown.analysis.store import weekly_histograms as wh
from slowdown.analysis.store.records import Aggregate, minute_of

KERNEL = ((0, 4), (-24, 2), (24, 2), (-1, 1), (1, 1))  # (hours away, weight), circular
MIN_SAMPLES = 20  # per hour of the week, before the weekly value is taken
DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
SLOT = 600


def hour_name(how: int) -> str:
    return f"{DAYS[how // 24]} {how % 24:02d}h"


class Weekly:
    """A book's weekly tables: the files' weekly histograms read once, each cluster's hours
    merged once, each statistic's smoothed values taken once."""

    def __init__(self, book, zone_name: str, zone) -> None:
        self.book, self.zone_name, self.zone = book, zone_name, zone
        self._blobs: list[dict] | None = None
        self._hours: dict[tuple, tuple[list[Histogram | None], str]] = {}
        self._values: dict[tuple, list[float]] = {}
        self._mixtures: dict[tuple, float] = {}
        self._slots: dict[int, int] = {}

    def _how(self, t: float) -> int:
        slot = int(t // SLOT)
        how = self._slots.get(slot)
        if how is None:
            how = self._slots[slot] = wh.hour_of_week(slot * SLOT, self.zone)
        return how

    def _found(self, target: str, op: str, statistic: str, at: float):
        """(file index, baseline) in force at ``at`` on each file."""
        from slowdown.analysis.stats.baseline import _in_force

        wanted = (target, op, statistic)
        return [(i, b) for i, index in enumerate(self.book._index)
                if (b := _in_force(index.get(wanted, ()), target, op, statistic, at))
                is not None]

    def hours(self, found) -> tuple[list[Histogram | None], str]:
        """The merged histogram of each hour of the week (None: too few values) and, where
        the weekly value cannot be taken, why."""
        target, op = found[0][1].target, found[0][1].op
        key = (target, op, tuple((i, b.data_from, b.data_to) for i, b in found))
        if key in self._hours:
            return self._hours[key]
        if self._blobs is None:
            self._blobs = [wh.load(store, self.zone_name) for store in self.book.stores]
        parts = [self._blobs[i].get((target, op, b.data_from, b.data_to)) for i, b in found]
        hours: list[Histogram | None] = [None] * wh.HOURS
        note = ""
        if any(p is None for p in parts):
            note = (f"flat: a baseline in force was made without weekly histograms of zone "
                    f"{self.zone_name} (rebaseline with expected = \"weekly\")")
        else:
            for how in range(wh.HOURS):
                blobs = [p[how] for p in parts if how in p]
                if blobs:
                    h = wh.merged(blobs)
                    hours[how] = h if h.count >= MIN_SAMPLES else None
            short = sum(h is None for h in hours)
            if short:
                note = (f"flat: less than a week of data ({wh.HOURS - short} of {wh.HOURS} "
                        f"hours of the week with {MIN_SAMPLES} values)")
        self._hours[key] = (hours, note)
        return hours, note

    def values(self, found, statistic: str) -> list[float]:
        """The smoothed expected value of each hour of the week."""
        hours, _ = self.hours(found)
        key = (found[0][1].target, found[0][1].op, statistic,
               tuple((i, b.data_from, b.data_to) for i, b in found))
        if key not in self._values:
            raw = [estimate(Aggregate(h), statistic).value for h in hours]  # type: ignore
            self._values[key] = smooth(raw)
        return self._values[key]

    def expected(self, flat, target: str, op: str, statistic: str, at: float,
                 window: float = 0.0):
        """The weekly expected value of a window ending at ``at`` (0: the moment ``at``),
        or ``flat`` with the reason it stays."""
        if flat.baseline is None:
            return dataclasses.replace(flat, basis="flat", note="flat: no baseline in force "
                                       "yet (provisional, from the data so far)")
        found = self._found(target, op, statistic, at)
        if not found:
            return dataclasses.replace(flat, basis="flat", note="flat")
        note = self.hours(found)[1]
        if note:
            return dataclasses.replace(flat, basis="flat", note=note)
        value = self.window_value(found, statistic, at, window)
        if value is None or math.isnan(value) or value <= 0:
            return dataclasses.replace(flat, basis="flat", note="flat: no weekly value")
        return dataclasses.replace(flat, value=value, basis="weekly",
                                   note=f"weekly: {hour_name(self._how(max(at - 1, 0)))}")

    def window_value(self, found, statistic: str, at: float, window: float) -> float | None:
        if window <= 0:
            return self.values(found, statistic)[self._how(at)]
        end = minute_of(at)
        weights = self.overlaps(end - window, end)
        if window <= 3600:
            values = self.values(found, statistic)
            total = sum(weights.values())
            return math.exp(math.fsum(w * math.log(values[how]) for how, w in weights.items())
                            / total)
        key = (tuple((i, b.data_from, b.data_to) for i, b in found), found[0][1].target,
               found[0][1].op, statistic, tuple(sorted(weights.items())))
        if key not in self._mixtures:  # a window recurs every week: each merged once
            hours, _ = self.hours(found)
            mixture = Histogram()
            for how, w in sorted(weights.items()):
                mixture.merge(scaled(hours[how], int(w // 60) or 1))  # type: ignore[arg-type]
            self._mixtures[key] = estimate(Aggregate(mixture), statistic).value
        return self._mixtures[key]

    def periods(self, flat: list[tuple[int, float]], target: str, op: str, statistic: str,
                first: int, last: int) -> list[tuple[int, float]]:
        """``expected_periods`` (``flat``) with the weekly value of each hour where one can be
        taken: a new period wherever the value changes (the hosts' baselines in force are
        the same within each flat period, which splits where any changes)."""
        out: list[tuple[int, float]] = []
        ends = [b for b, _ in flat[1:]] + [last + 1]
        for (begin, value), end in zip(flat, ends):
            found = self._found(target, op, statistic, begin)
            values = self.values(found, statistic) if found and not self.hours(found)[1] \
                else None
            t = begin
            while t < end:
                v = value if values is None else values[self._how(t)]
                if not out or not (out[-1][1] == v or (math.isnan(out[-1][1]) and math.isnan(v))):
                    out.append((t, v))
                t = int((t // SLOT + 1) * SLOT)
        return out or flat

    def overlaps(self, start: float, end: float) -> dict[int, float]:
        """Seconds of ``[start, end)`` in each hour of the week."""
        weights: dict[int, float] = {}
        t = start
        while t < end:
            nxt = min(end, (t // SLOT + 1) * SLOT)
            how = self._how(t)
            weights[how] = weights.get(how, 0.0) + (nxt - t)
            t = nxt
        return weights


def smooth(raw: Sequence[float]) -> list[float]:
    """``KERNEL``'s weighted geometric mean of each hour's neighbours, around the week."""
    n = len(raw)
    logs = [math.log(v) if v and v > 0 and not math.isnan(v) else None for v in raw]
    out = []
    for how in range(n):
        num = den = 0.0
        for offset, w in KERNEL:
            v = logs[(how + offset) % n]
            if v is not None:
                num, den = num + w * v, den + w
        out.append(math.exp(num / den) if den else math.nan)
    return out


def scaled(h: Histogram, w: int) -> Histogram:
    """``h`` counted ``w`` times: the weight of an hour in a mixture."""
    out = h.copy()
    if w != 1:
        counts = out.buckets.counts
        for index in counts:
            counts[index] *= w
        out.zero_count *= w
        out.count *= w
        out.sum *= w
        out.sumsq *= w
    return out
