"""The long view of one series of hourly statistics: the moments its level shifted and stayed
(change points), the stretches it left its level and came back (episodes: caching, a
maintenance), and its daily and weekly cycles.

The method, in log space (a factor on latency is a step there, the same for any level):

1. Each hour's statistic (the median by default), hours without records left out.
2. The cycles: the mean of the log level by hour of the day, then by day of the week, of what
   is left after taking away the level of each segment between change points (none at first).
3. The change points: ``ruptures`` (kernel change-point detection with the linear kernel, the
   least-squares cost, pruned exact search) on the log level with the cycles taken away, at a
   penalty of ``PENALTY * noise**2 * log(n)``, ``noise`` the robust spread of the hour-to-hour
   differences, or of the day means' differences times sqrt(24) when hours wander together
   (``_noise``); segments of at least a day. Steps 2 and 3 are repeated until the change
   points no longer move (a shift would otherwise leak into the cycles and back).
4. Changes whose factor is below ``MIN_FACTOR`` are merged away; a segment that leaves the
   level of the one before it and comes back within ``MIN_FACTOR`` is an episode.

How sure a change is: of the hours up to three days either side of it, the share on their own
side of the midpoint between the two levels (0.5 is a coin, 1 a clean step). A cycle is
reported when its peak over its trough is at least ``MIN_CYCLE``, a one-way analysis of
variance of the hours by their hour of the day (day of the week) gives p < 0.001, and it
repeats: its profile from the first half of the range and from the second correlate at
``MIN_REPEAT`` or more (hours that wander together pass the analysis of variance, which takes
them for independent, but make no profile that comes back); how much of
the variation it explains is the share of the variance of the log level within segments that
the hour-of-day (day-of-week) means account for.

The penalty was chosen on stationary series of the planted fleets (``testdata/trendkit.py``;
``bench/bench_trends.py``): at most one false change per 100 host-days, measured.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

DAY = 86400
HOUR = 3600
PENALTY = 8.0  # times noise**2 * log(n): BIC's is 2; real hours are not independent
MIN_SEGMENT = 24  # steps (hours): a level that held less than a day did not stay
MIN_FACTOR = 1.2  # a change smaller than 20 % is not one to act on
MIN_CYCLE = 1.1  # a cycle whose peak is less than 10 % over its trough is not reported
MIN_P = 1e-3
MIN_REPEAT = 0.6  # a cycle repeats: its profiles of the two halves of the range correlate
SURE_SPAN = 72  # hours either side of a change weighed for how sure it is
MIN_HOURS = 3 * 24  # fewer hours: nothing to say
BLOCK = 24  # hours of a block whose means give the long-run noise
MIN_BLOCKS = 8  # fewer blocks: the hour-to-hour noise alone
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


@dataclass(frozen=True)
class Change:
    """The level shifted at ``at`` from ``before`` to ``after`` (the statistic, seconds) and
    held until ``until`` (the next change, or the end of the data)."""

    at: int
    before: float
    after: float
    sure: float
    until: int

    @property
    def factor(self) -> float:
        return self.after / self.before


@dataclass(frozen=True)
class Episode:
    """The level left ``level`` for ``inside`` from ``at`` to ``until``, then came back."""

    at: int
    until: int
    level: float
    inside: float
    sure: float

    @property
    def factor(self) -> float:
        return self.inside / self.level


@dataclass(frozen=True)
class Cycle:
    """A daily or weekly cycle: its peak and trough (hour of the day, or day of the week from
    0, Monday), peak over trough, and the share of the variation it explains."""

    kind: str  # "daily" or "weekly"
    peak: int
    trough: int
    factor: float
    explained: float
    p: float
    repeat: float  # the correlation of the first half's profile with the second half's


@dataclass(frozen=True)
class Trends:
    first: int  # the first and last hour with data
    last: int
    hours: int
    changes: list[Change]
    episodes: list[Episode]
    cycles: list[Cycle]
    noise: float  # the robust hour-to-hour spread, log


def analyse(times: np.ndarray, values: np.ndarray) -> Trends | None:
    """The trends of hourly ``values`` at ``times`` (hour starts); None for fewer than
    ``MIN_HOURS`` hours with a positive value."""
    keep = np.isfinite(values) & (values > 0)
    t = np.asarray(times, np.int64)[keep]
    order = np.argsort(t, kind="stable")
    t, y = t[order], np.log(np.asarray(values, np.float64)[keep][order])
    if len(y) < MIN_HOURS:
        return None
    hour = (t % DAY) // HOUR
    weekday = (t // DAY + 3) % 7  # 1970-01-01 was a Thursday
    weeks = (t[-1] - t[0]) >= 14 * DAY
    bounds: list[int] = [len(y)]
    cycle = np.zeros(len(y))
    noise = _noise(y)
    for _ in range(4):
        level = _levels(y - cycle, bounds)
        cycle = _cycles(y - level, hour, weekday, weeks)[0]
        noise = _noise(y - cycle)
        found = _merged(y - cycle, _detect(y - cycle, noise))
        if found == bounds:
            break
        bounds = found
    z = y - cycle
    level = _levels(z, bounds)
    cycle, daily, weekly = _cycles(y - level, hour, weekday, weeks)
    segments = [0, *bounds]
    means = [float(z[a:b].mean()) for a, b in zip(segments[:-1], segments[1:])]
    changes, episodes = [], []
    i = 1
    while i < len(means):
        at = segments[i]
        back = i + 1 < len(means) and abs(means[i + 1] - means[i - 1]) < np.log(MIN_FACTOR)
        if back:
            episodes.append(Episode(int(t[at]), int(t[segments[i + 1]]),
                                    float(np.exp(means[i - 1])), float(np.exp(means[i])),
                                    _sure(z, segments, i, means)))
            i += 2
            continue
        until = int(t[segments[i + 1]]) if i + 1 < len(means) else int(t[-1]) + HOUR
        changes.append(Change(int(t[at]), float(np.exp(means[i - 1])),
                              float(np.exp(means[i])), _sure(z, segments, i, means), until))
        i += 1
    residual = y - level
    total = float(np.var(residual)) or 1.0
    cycles = [_cycle("daily", daily, float(np.var(daily[hour])) / total, hour, residual)]
    if weeks:  # tested on day means: a day's hours are not independent of each other
        day = (t - t[0]) // DAY
        counts = np.bincount(day)
        sums = np.bincount(day, weights=residual - daily[hour])
        whole = counts > 0
        cycles.append(_cycle("weekly", weekly, float(np.var(weekly[weekday])) / total,
                             ((t[0] // DAY + np.flatnonzero(whole)) + 3) % 7,
                             sums[whole] / counts[whole]))
    cycles = [c for c in cycles if c is not None]
    return Trends(int(t[0]), int(t[-1]), len(y), changes, episodes, cycles, noise)


def _noise(y: np.ndarray) -> float:
    """The spread of one hour's value as a segment's mean sees it, robustly: from the
    hour-to-hour differences (a shift is one difference among hundreds; the median absolute
    deviation ignores it), or, where hours wander together (a slow afternoon is slow for
    hours), from the differences of day means times sqrt(24) when that is larger: the
    long-run spread, which the mean of a day's hours has, not the hour-to-hour one."""
    hourly = _spread(np.diff(y))
    days = len(y) // BLOCK
    if days < MIN_BLOCKS:
        return hourly
    means = y[:days * BLOCK].reshape(days, BLOCK).mean(axis=1)
    return max(hourly, _spread(np.diff(means)) * np.sqrt(BLOCK))


def _spread(d: np.ndarray) -> float:
    """The standard deviation of a value whose differences are ``d``, from their median
    absolute deviation."""
    if len(d) == 0:
        return 0.0
    return float(np.median(np.abs(d - np.median(d))) / 0.6745 / np.sqrt(2))


def _levels(z: np.ndarray, bounds: list[int]) -> np.ndarray:
    out = np.empty(len(z))
    a = 0
    for b in bounds:
        out[a:b] = z[a:b].mean()
        a = b
    return out


def _cycles(r: np.ndarray, hour: np.ndarray, weekday: np.ndarray, weeks: bool):
    """The daily and weekly profile of ``r`` (mean 0 each, log), and their sum at each hour."""
    daily = _profile(r, hour, 24)
    weekly = _profile(r - daily[hour], weekday, 7) if weeks else np.zeros(7)
    return daily[hour] + weekly[weekday], daily, weekly


def _profile(r: np.ndarray, group: np.ndarray, n: int) -> np.ndarray:
    counts = np.bincount(group, minlength=n)
    sums = np.bincount(group, weights=r, minlength=n)
    means = np.divide(sums, counts, out=np.zeros(n), where=counts > 0)
    present = counts > 0
    means[present] -= np.average(means[present], weights=counts[present])
    return means


def _detect(z: np.ndarray, noise: float) -> list[int]:
    """The ends of the segments ``ruptures`` finds in ``z`` (the last one ``len(z)``)."""
    import ruptures  # lazily: scipy and ruptures cost a plain ``slowdown`` their start-up

    if noise <= 0:
        noise = float(np.std(z)) or 1e-9
    algo = ruptures.KernelCPD(kernel="linear", min_size=MIN_SEGMENT).fit(z.reshape(-1, 1))
    return [int(b) for b in algo.predict(pen=PENALTY * noise ** 2 * np.log(len(z)))]


def _merged(z: np.ndarray, bounds: list[int]) -> list[int]:
    """``bounds`` less the changes below ``MIN_FACTOR``, the smallest merged away first."""
    bounds = list(bounds)
    while len(bounds) > 1:
        segments = [0, *bounds]
        means = [z[a:b].mean() for a, b in zip(segments[:-1], segments[1:])]
        steps = np.abs(np.diff(means))
        smallest = int(np.argmin(steps))
        if steps[smallest] >= np.log(MIN_FACTOR):
            break
        del bounds[smallest]
    return bounds


def _sure(z: np.ndarray, segments: list[int], i: int, means: list[float]) -> float:
    """The share of the hours near the change at ``segments[i]`` on their own side of the
    midpoint between the levels before and after it."""
    at = segments[i]
    before = z[max(segments[i - 1], at - SURE_SPAN):at]
    after = z[at:min(segments[i + 1], at + SURE_SPAN)]
    mid = (means[i - 1] + means[i]) / 2
    up = means[i] > means[i - 1]
    right = np.count_nonzero(before < mid if up else before > mid) + \
        np.count_nonzero(after > mid if up else after < mid)
    return float(right / (len(before) + len(after)))


def _cycle(kind: str, profile: np.ndarray, explained: float, group: np.ndarray,
           residual: np.ndarray) -> Cycle | None:
    """The cycle of ``profile`` when it is large, clear and repeated enough (``MIN_CYCLE``,
    ``MIN_P``, ``MIN_REPEAT``), tested on ``residual`` by ``group`` (hours by hour of the
    day; day means by day of the week); ``explained``: the share of the variation."""
    from scipy.stats import f_oneway  # lazily, as ruptures

    present = np.bincount(group, minlength=len(profile)) > 1
    if present.sum() < 2:
        return None
    factor = float(np.exp(profile[present].max() - profile[present].min()))
    p = float(f_oneway(*(residual[group == g] for g in np.flatnonzero(present))).pvalue)
    n = len(group) // 2
    halves = [_profile(residual[part], group[part], len(profile))
              for part in (slice(0, n), slice(n, None))]
    repeat = float(np.corrcoef(*halves)[0, 1]) if all(h.std() > 0 for h in halves) else 0.0
    if factor < MIN_CYCLE or not p < MIN_P or not repeat >= MIN_REPEAT:
        return None
    masked = np.where(present, profile, np.nan)
    return Cycle(kind, int(np.nanargmax(masked)), int(np.nanargmin(masked)), factor,
                 explained, p, repeat)


__all__ = ["MIN_FACTOR", "PENALTY", "WEEKDAYS", "Change", "Cycle", "Episode", "Trends",
           "analyse"]
