"""Window statistics from merged histograms, with sample counts and confidence intervals.

A window's statistic comes from the merged histogram of its minutes and is raised to the
stuck age at the window's end (``Aggregate.stuck_end``): an op stuck for 40 s then makes the
window at least 40 s slow, even if no op completed (a hung filesystem reads as slow, not as
"no data"). Once the op has returned and its latency is recorded, it counts like any other
sample and the hang raises the window no more.

Confidence intervals for quantiles are distribution-free: for the ``q``-quantile of ``n``
values, the order statistics of ranks ``l < u`` cover it with probability
``P(l <= B < u)``, ``B ~ Binomial(n, q)``; we pick the narrowest symmetric-in-probability
pair reaching the confidence (exact binomial up to a few thousand values, the normal
approximation with continuity correction beyond) and read both ranks off the histogram.
The mean's interval is the normal one from the exact sums; the max has none.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from slowdown.analysis.histogram import Histogram, rank
from slowdown.analysis.store.records import Aggregate

NAMED_QUANTILES = {"median": 0.5, "min": 0.0}


def quantile_of(name: str) -> float | None:
    """The quantile a statistic name stands for (``q95`` -> 0.95), None for mean/max."""
    if name in NAMED_QUANTILES:
        return NAMED_QUANTILES[name]
    if name.startswith("q"):
        try:
            value = float(name[1:]) / 100.0
        except ValueError:
            raise ValueError(f"unknown statistic {name!r}") from None
        if not 0.0 < value < 1.0:
            raise ValueError(f"unknown statistic {name!r}")
        return value
    if name in ("mean", "max"):
        return None
    raise ValueError(f"unknown statistic {name!r}")


@dataclass(frozen=True)
class Estimate:
    """One statistic of one window: value (seconds), the values behind it, an interval."""

    statistic: str
    value: float  # NaN when there is neither data nor a stuck op
    count: int  # values in the merged histogram
    low: float | None = None  # confidence interval, when asked for and defined
    high: float | None = None
    stuck: float = 0.0  # stuck age at the window's end: of an op not returned by then
    raised: bool = False  # the value is the stuck age, not the histogram's

    @property
    def half_width(self) -> float | None:
        """Largest relative distance from the value to an end of its interval."""
        if self.low is None or self.high is None or not self.value:
            return None
        return max(self.value - self.low, self.high - self.value) / self.value


def _binom_cdf_table(n: int, p: float) -> list[float]:
    """P(B <= k) for k = 0..n, exactly (log-space terms, summed in order)."""
    if p <= 0.0 or p >= 1.0:
        return [1.0 if (p <= 0.0 or k == n) else 0.0 for k in range(n + 1)]
    logp, logq = math.log(p), math.log1p(-p)
    lgn = math.lgamma(n + 1)
    cdf, total = [], 0.0
    for k in range(n + 1):
        total += math.exp(lgn - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * logp
                          + (n - k) * logq)
        cdf.append(min(total, 1.0))
    return cdf


def _normal_quantile(p: float) -> float:
    from statistics import NormalDist

    return NormalDist().inv_cdf(p)


EXACT_LIMIT = 5000


def quantile_ranks(n: int, q: float, confidence: float = 0.95) -> tuple[int, int] | None:
    """1-based ranks ``(l, u)`` with ``P(X_(l) <= x_q <= X_(u)) >= confidence``.

    None when ``n`` values cannot give that confidence at all (too few values for an
    extreme quantile: e.g. a 95 % interval for q99 needs about 300 values).
    """
    if n <= 0 or not 0.0 < confidence < 1.0:
        return None
    alpha = (1.0 - confidence) / 2.0
    if n <= EXACT_LIMIT:
        cdf = _binom_cdf_table(n, q)
        # X_(l) <= x_q  iff  B >= l, i.e. P = 1 - cdf[l-1]; X_(u) >= x_q iff B <= u - 1.
        lower = 0
        for k in range(n, 0, -1):  # largest l with P(B <= l - 1) <= alpha
            if cdf[k - 1] <= alpha:
                lower = k
                break
        upper = 0
        for k in range(1, n + 1):  # smallest u with P(B <= u - 1) >= 1 - alpha
            if cdf[k - 1] >= 1.0 - alpha:
                upper = k
                break
        if not lower or not upper:
            return None
        return lower, upper
    z = _normal_quantile(1.0 - alpha)
    spread = z * math.sqrt(n * q * (1.0 - q))
    lower = math.floor(n * q - spread)
    upper = math.ceil(n * q + spread) + 1
    if lower < 1 or upper > n:
        return None
    return lower, upper


def value_at(h: Histogram, r: int, unit: int = 1) -> float:
    """The value of rank ``r`` (1-based, in samples) of a histogram whose counts are samples
    times ``unit``: the minimum for rank 1, the maximum from the last rank on, else the
    bucket where the cumulative count reaches ``r * unit``. With ``unit`` 1 this is
    ``Histogram.value_at_rank``."""
    if not h.count:
        return math.nan
    if r <= 1:
        return h.min
    if r * unit >= h.count:
        return h.max
    return h.value_at_rank(r * unit)


def quantile(agg: Aggregate, q: float) -> float:
    """The ``q``-quantile of a window (NaN when empty). Of whole records: the value of rank
    ``ceil(q * n)`` (``Histogram.quantile``). Where the window cuts a record (counts in
    units, ``store.window``): the bucket where the cumulative weight reaches ``q`` of the
    window's weight, so that a window inside one record has that record's quantile.
    ``stats.series`` takes both the same way, vectorised."""
    return value_at(agg.histogram, rank(q, agg.histogram.count))


def estimate(agg: Aggregate, statistic: str, confidence: float | None = None) -> Estimate:
    """The statistic of a merged window, raised to its stuck age at its end. ``count`` is the
    number of values, rounded where a window cuts a record (``Aggregate.samples``)."""
    h: Histogram = agg.histogram
    samples, unit = agg.samples, agg.unit
    n = round(samples)
    q = quantile_of(statistic)
    low = high = None
    if statistic == "mean":
        value = h.mean
        if confidence and n > 1:
            z = _normal_quantile(0.5 + confidence / 2.0)
            sd = math.sqrt(max(h.sumsq - h.sum * h.sum / h.count, 0.0) / unit / (n - 1))
            low, high = value - z * sd / math.sqrt(n), value + z * sd / math.sqrt(n)
    elif statistic == "max":
        value = h.max if n else math.nan
    else:
        value = quantile(agg, q)
        if confidence and n:
            ranks = quantile_ranks(n, q, confidence)
            if ranks is not None:
                low, high = value_at(h, ranks[0], unit), value_at(h, ranks[1], unit)
    stuck = agg.stuck_end
    raised = bool(stuck) and (math.isnan(value) or stuck > value)
    if raised:
        value = stuck
        low = high = None
    return Estimate(statistic, value, n, low, high, stuck, raised)
