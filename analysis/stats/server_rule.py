"""Naming a slow server: ``slow`` only when the samples say so, ``few`` when they cannot.

The rule (docs/SERVERS.md, "Naming a slow server"), for each server of one (target, op):

- its median's confidence interval from the order statistics of its ``n`` probes: the
  values of ranks ``l = floor((n - z sqrt(n)) / 2)`` and ``u = ceil(1 + (n + z sqrt(n)) / 2)``
  (the binomial's normal approximation; ``z = Z``, two-sided 99.9 %), read from the
  histogram as the bucket edges that hold them, the lower edge for ``l``, the upper for ``u``
  (the bucket's width never makes a server look slower than it is);
- the same interval of the other servers of that op, pooled (their histograms merged),
  leaving out those a first pass found slow;
- ``slow`` when the server's lower end stands above ``FACTOR`` times the others' upper end;
  ``few`` when either interval has no end (``l < 1`` or ``u > n``: fewer than ``MIN_PROBES``
  probes, or no other server); else ``ok``;
- a server alone in its op (no other server known: one MDS rank serves every metadata op)
  has no others to stand above: it is judged against the op's expected value instead
  (``judge_alone``), ``slow`` when its lower end stands above ``FACTOR`` times it. That
  says the op is slow and the only server it goes to is this one; it cannot tell the server
  from the way to it.

The median, not a tail quantile: a hiccup of a few probes moves neither interval, and the
interval of a median needs the fewest probes. Pure Python over bucket counts (no numpy):
the verdict's text may call it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from slowdown.analysis.histogram.histogram import Histogram, rank

Z = 3.2905  # two-sided 99.9 %
FACTOR = 1.5  # the server's interval above the others' by at least this factor
SLOW, OK, FEW = "slow", "ok", "few"


def median_ranks(n: int, z: float = Z) -> tuple[int, int]:
    """1-based ranks ``(l, u)`` of the order statistics bounding the median's interval."""
    half = z * math.sqrt(n) / 2
    return math.floor(n / 2 - half), math.ceil(1 + n / 2 + half)


def min_probes(z: float = Z) -> int:
    """The fewest probes whose median interval has both ends (``l >= 1``, ``u <= n``)."""
    n = 1
    while True:
        low, high = median_ranks(n, z)
        if low >= 1 and high <= n:
            return n
        n += 1


MIN_PROBES = min_probes()


def _buckets_at(h: Histogram, ranks: Iterable[int]) -> dict[int, int | None]:
    """The bucket index holding each rank (None: the zero bucket)."""
    pending = sorted(set(ranks))
    out: dict[int, int | None] = {}
    seen = h.zero_count
    while pending and pending[0] <= seen:
        out[pending.pop(0)] = None
    for index, count in h.buckets.items():
        if not pending:
            break
        seen += count
        while pending and seen >= pending[0]:
            out[pending.pop(0)] = index
    for r in pending:  # counts and buckets disagree: the top bucket
        out[r] = max(h.buckets.items())[0] if len(h.buckets) else None
    return out


def _edge(h: Histogram, index: int | None, upper: bool) -> float:
    if index is None:
        return 0.0
    return h.mapping.upper_bound(index) if upper else h.mapping.lower_bound(index)


def quantile(h: Histogram, q: float) -> float:
    """The ``q``-quantile's estimate from the buckets alone (merged records keep no
    extremes): the representative value of the bucket holding its rank; NaN when empty."""
    if not h.count:
        return math.nan
    index = _buckets_at(h, [rank(q, h.count)])[rank(q, h.count)]
    return 0.0 if index is None else h.mapping.value(index)


def median_interval(h: Histogram, z: float = Z) -> tuple[float, float] | None:
    """The median's interval ``(lower edge at rank l, upper edge at rank u)``, or None when
    the probes are too few to bound it."""
    n = h.count
    low, high = median_ranks(n, z)
    if low < 1 or high > n:
        return None
    at = _buckets_at(h, [low, high])
    return _edge(h, at[low], False), _edge(h, at[high], True)


@dataclass(frozen=True)
class Judgment:
    """One server's word for one op, and the numbers behind it."""

    word: str
    probes: int
    median: float
    q95: float
    others_median: float  # the other servers' pooled median (NaN: none)
    interval: tuple[float, float] | None  # its median's
    others_interval: tuple[float, float] | None
    against: str = "others"  # what it was judged against: "others", or "expected" (alone)

    @property
    def against_others(self) -> float:
        """Its median over the others' (NaN where either is unknown)."""
        if not self.others_median or math.isnan(self.others_median) or math.isnan(self.median):
            return math.nan
        return self.median / self.others_median


def judge_one(mine: Histogram, others: Histogram, z: float = Z,
              factor: float = FACTOR) -> Judgment:
    """The rule for one server against the pooled others of the same op."""
    interval = median_interval(mine, z)
    theirs = median_interval(others, z)
    if interval is None or theirs is None:
        word = FEW
    else:
        word = SLOW if interval[0] > factor * theirs[1] else OK
    return Judgment(word, mine.count, quantile(mine, 0.5), quantile(mine, 0.95),
                    quantile(others, 0.5), interval, theirs)


def judge_alone(mine: Histogram, expected: float | None, z: float = Z,
                factor: float = FACTOR) -> Judgment:
    """The rule for a server with no other of its op, against the op's expected value (a
    point: the baseline's median); ``few`` without a baseline or with too few probes."""
    interval = median_interval(mine, z)
    if interval is None or not expected or math.isnan(expected):
        word = FEW
    else:
        word = SLOW if interval[0] > factor * expected else OK
    return Judgment(word, mine.count, quantile(mine, 0.5), quantile(mine, 0.95), math.nan,
                    interval, None, "expected")


def judge(servers: Mapping[str, Histogram], z: float = Z,
          factor: float = FACTOR) -> dict[str, Judgment]:
    """Each server of one (target, op) against the others pooled; twice: the second time
    the others leave out the servers the first found slow (one of four bricks 12x slower
    raises the pooled median of the other three's pool; a second slow one would hide
    behind it, and the healthy ones would read faster than they are)."""
    first = _against_pool(servers, set(), z, factor)
    slow = {name for name, j in first.items() if j.word == SLOW}
    if not slow or len(slow) == len(servers):
        return first
    return _against_pool(servers, slow, z, factor)


def _against_pool(servers: Mapping[str, Histogram], left_out: set[str], z: float,
                  factor: float) -> dict[str, Judgment]:
    pool = [h for name, h in servers.items() if name not in left_out]
    scale = min((h.scale for h in servers.values()), default=None)
    total = Histogram.merged(pool, scale) if scale is not None else Histogram()
    out = {}
    for name, h in servers.items():
        others = _without(total, h) if name not in left_out else total
        out[name] = judge_one(h, others, z, factor)
    return out


def _without(total: Histogram, part: Histogram) -> Histogram:
    """``total`` less ``part``'s buckets (``part`` merged into ``total`` before)."""
    rest = Histogram(total.scale)
    mine = part if part.scale == total.scale else _at_scale(part, total.scale)
    counts = dict(mine.buckets.items())
    for index, count in total.buckets.items():
        left = count - counts.get(index, 0)
        if left:
            rest.buckets.add(index, left)
    rest.zero_count = total.zero_count - mine.zero_count
    rest.count = rest.zero_count + rest.buckets.total()
    return rest


def _at_scale(h: Histogram, scale: int) -> Histogram:
    out = h.copy()
    out.downscale(scale)
    return out


__all__ = [
    "FACTOR",
    "FEW",
    "MIN_PROBES",
    "OK",
    "SLOW",
    "Judgment",
    "Z",
    "judge",
    "judge_alone",
    "judge_one",
    "median_interval",
    "median_ranks",
    "min_probes",
    "quantile",
]
