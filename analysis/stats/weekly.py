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

from slowdown.analysis.histogram import Histogram, codec
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
    """A book's weekly tables: the files' weekly histograms read once; an hour's merge, its
    statistic and its smoothed value taken once, and only for the hours asked for (a line
    of ``slowdown`` needs five hours of each op, not 168)."""

    def __init__(self, book, zone_name: str, zone) -> None:
        self.book, self.zone_name, self.zone = book, zone_name, zone
        self._rows: list[dict] | None = None
        self._notes: dict[tuple, str] = {}
        self._merged: dict[tuple, Histogram] = {}
        self._raw: dict[tuple, float] = {}
        self._smoothed: dict[tuple, float] = {}
        self._mixtures: dict[tuple, float] = {}
        self._slots: dict[int, int] = {}

    def _how(self, t: float) -> int:
        slot = int(t // SLOT)
        how = self._slots.get(slot)
        if how is None:
            how = self._slots[slot] = wh.hour_of_week(slot * SLOT, self.zone)
        return how

    def _found(self, target: str, op: str, statistic: str, at: float) -> tuple:
        """((file index, baseline), ...) in force at ``at`` on each file."""
        from slowdown.analysis.stats.baseline import _in_force

        wanted = (target, op, statistic)
        return tuple((i, b) for i, index in enumerate(self.book._index)
                     if (b := _in_force(index.get(wanted, ()), target, op, statistic, at))
                     is not None)

    @staticmethod
    def _key(found) -> tuple:
        return (found[0][1].target, found[0][1].op,
                tuple((i, b.data_from, b.data_to) for i, b in found))

    def _parts(self, found) -> list:
        if self._rows is None:
            self._rows = [wh.load(store, self.zone_name) for store in self.book.stores]
        return [self._rows[i].get((b.target, b.op, b.data_from, b.data_to)) for i, b in found]

    def note(self, found) -> str:
        """Why the weekly value cannot be taken ("": it can): a host's baseline in force
        without its hours of the week, or an hour of the week with too few values (counted
        from the rows, nothing decoded)."""
        key = self._key(found)
        if key not in self._notes:
            parts = self._parts(found)
            if any(p is None for p in parts):
                note = (f"flat: a baseline in force was made without weekly histograms of "
                        f"zone {self.zone_name} (rebaseline with expected = \"weekly\")")
            else:
                short = sum(sum(p[how][0] for p in parts if how in p) < MIN_SAMPLES
                            for how in range(wh.HOURS))
                note = (f"flat: less than a week of data ({wh.HOURS - short} of {wh.HOURS} "
                        f"hours of the week with {MIN_SAMPLES} values)") if short else ""
            self._notes[key] = note
        return self._notes[key]

    def hour(self, found, how: int) -> Histogram:
        """The hosts' histograms of hour ``how`` merged."""
        key = (self._key(found), how)
        if key not in self._merged:
            blobs = [p[how][1] for p in self._parts(found) if how in p]
            self._merged[key] = codec.decode(blobs[0]) if len(blobs) == 1 else \
                wh.merged(blobs)
        return self._merged[key]

    def _raw_value(self, found, statistic: str, how: int) -> float:
        key = (self._key(found), statistic, how)
        if key not in self._raw:
            self._raw[key] = estimate(Aggregate(self.hour(found, how)), statistic).value
        return self._raw[key]

    def value(self, found, statistic: str, how: int) -> float:
        """The smoothed expected value of hour ``how`` (``smooth``'s kernel)."""
        key = (self._key(found), statistic, how)
        if key not in self._smoothed:
            self._smoothed[key] = smoothed(
                lambda h: self._raw_value(found, statistic, h), how, wh.HOURS)
        return self._smoothed[key]

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
        note = self.note(found)
        if note:
            return dataclasses.replace(flat, basis="flat", note=note)
        value, hours = self.window_value(found, statistic, at, window)
        if value is None or math.isnan(value) or value <= 0:
            return dataclasses.replace(flat, basis="flat", note="flat: no weekly value")
        names = [hour_name(h) for h in hours]
        return dataclasses.replace(flat, value=value, basis="weekly", note="weekly: " + (
            names[0] if len(names) == 1 else f"{names[0]}-{names[-1][4:]}"))

    def window_value(self, found, statistic: str, at: float, window: float
                     ) -> tuple[float | None, list[int]]:
        """The value and the hours of the week of the window, in time order."""
        if window <= 0:
            how = self._how(at)
            return self.value(found, statistic, how), [how]
        end = minute_of(at)
        weights = self.overlaps(end - window, end)
        hours = list(weights)
        if window <= 3600:
            total = sum(weights.values())
            return math.exp(math.fsum(w * math.log(self.value(found, statistic, how))
                                      for how, w in weights.items()) / total), hours
        key = (self._key(found), statistic, tuple(sorted(weights.items())))
        if key not in self._mixtures:  # a window recurs every week: each merged once
            mixture = Histogram()
            for how, w in sorted(weights.items()):
                mixture.merge(scaled(self.hour(found, how), int(w // 60) or 1))
            self._mixtures[key] = estimate(Aggregate(mixture), statistic).value
        return self._mixtures[key], hours

    def periods(self, flat: list[tuple[int, float]], target: str, op: str, statistic: str,
                first: int, last: int) -> list[tuple[int, float]]:
        """``expected_periods`` (``flat``) with the weekly value of each hour where one can be
        taken: a new period wherever the value changes (the hosts' baselines in force are
        the same within each flat period, which splits where any changes)."""
        out: list[tuple[int, float]] = []
        ends = [b for b, _ in flat[1:]] + [last + 1]
        for (begin, value), end in zip(flat, ends):
            found = self._found(target, op, statistic, begin)
            weekly = bool(found) and not self.note(found)
            t = begin
            while t < end:
                v = self.value(found, statistic, self._how(t)) if weekly else value
                if not out or not (out[-1][1] == v or (math.isnan(out[-1][1]) and math.isnan(v))):
                    out.append((t, v))
                t = int((t // SLOT + 1) * SLOT)
        return out or flat

    def overlaps(self, start: float, end: float) -> dict[int, float]:
        """Seconds of ``[start, end)`` in each hour of the week, in time order."""
        weights: dict[int, float] = {}
        t = start
        while t < end:
            nxt = min(end, (t // SLOT + 1) * SLOT)
            how = self._how(t)
            weights[how] = weights.get(how, 0.0) + (nxt - t)
            t = nxt
        return weights


def smoothed(raw, how: int, n: int) -> float:
    """``KERNEL``'s weighted geometric mean of hour ``how``'s neighbours, around the week
    (``raw``: an hour's value; one that is not positive is left out)."""
    num = den = 0.0
    for offset, w in KERNEL:
        v = raw((how + offset) % n)
        if v and v > 0 and not math.isnan(v):
            num, den = num + w * math.log(v), den + w
    return math.exp(num / den) if den else math.nan


def smooth(raw: Sequence[float]) -> list[float]:
    """Every hour's ``smoothed`` value of a week of values."""
    return [smoothed(raw.__getitem__, how, len(raw)) for how in range(len(raw))]


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
