"""Latency histograms: the exponential bucket scheme and its encodings.

A value ``v`` falls in bucket ``i`` with ``base**i < v <= base**(i+1)``, ``base =
2**(2**-scale)`` (Prometheus native / OpenTelemetry exponential histograms), so any quantile
is within ``base - 1`` relative error and histograms of one scale merge exactly by adding
counts. ``mapping`` maps values to buckets, ``buckets`` keeps the counts, ``histogram``
adds the exact moments, ``codec`` turns them into bytes and back. Imports nothing of ours.
"""

from __future__ import annotations

from slowdown.analysis.histogram.histogram import Histogram, mapping_for, rank

__all__ = ["Histogram", "mapping_for", "rank"]
