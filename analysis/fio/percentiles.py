"""Percentiles, min, mean and max of an interval: of fio bins, or exact of raw latencies.

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

Guarantees: ``bin_stats`` figures each row (an interval's bins) on its own, in a few
vectorised passes over all rows; ``exact_stats`` gives the same figures whatever the order of
the values; ``parse_percentiles`` accepts only numbers within 0..100.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import numpy as np

METHODS = ("interp", "rank")


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


__all__ = ["METHODS", "bin_stats", "exact_stats", "parse_percentiles"]
