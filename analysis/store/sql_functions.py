"""The SQL functions every connection of the store registers: how records merge inside SQLite
(upserts, rollups) and the derived columns that SQL readers (Grafana) use.

``hist_merge(a, b)`` and the aggregate ``hist_sum(hist)`` merge histogram blobs;
``latest(start, value)`` keeps the value of the latest row (an hour's stuck age at its end is
its last minute's); ``hist_derived(hist, min, max, i)`` is derived column ``i`` of a blob, as
``derived`` gives them for a histogram.
"""

from __future__ import annotations

import functools
import sqlite3

from slowdown.analysis.histogram import Histogram, codec
from slowdown.analysis.store import schema


class _Latest:
    """SQL aggregate ``latest(start, value)``: the value of the row with the latest start (for
    rollups: an hour's stuck age at its end is its last minute's)."""

    def __init__(self) -> None:
        self.start: float | None = None
        self.value: object = None

    def step(self, start: float, value: object) -> None:
        if self.start is None or start > self.start:
            self.start, self.value = start, value

    def finalize(self) -> object:
        return self.value


class _HistSum:
    """SQL aggregate ``hist_sum(hist)``: the merge of many histogram blobs (for rollups)."""

    def __init__(self) -> None:
        self.blobs: list[bytes] = []

    def step(self, blob: bytes) -> None:
        self.blobs.append(blob)

    def finalize(self) -> bytes:
        return codec.encode(codec.merge_blobs(self.blobs), moments=False)


def _hist_merge(a: bytes | None, b: bytes | None) -> bytes | None:
    """SQL function ``hist_merge(a, b)``: two histogram blobs merged into one."""
    if a is None or b is None:
        return a if b is None else b
    return codec.encode(codec.merge_blobs([a, b]), moments=False)


def derived(h: Histogram) -> tuple:
    """The derived columns of a record: p50, p90, p95, p99 (None when empty) and the bucket
    counts at ``schema.BUCKETS_SCALE`` as JSON, clamped to the range that SQL readers know."""
    quantiles = h.quantiles(schema.DERIVED_QUANTILES) if h.count else [None] * 4
    shift = h.scale - schema.BUCKETS_SCALE
    lowest, highest = schema.BUCKETS_LOWEST, schema.BUCKETS_HIGHEST
    counts: dict[int, int] = {lowest: h.zero_count} if h.zero_count else {}
    for index, count in h.buckets.counts.items():
        coarse = index >> shift if shift >= 0 else index << -shift
        coarse = lowest if coarse < lowest else highest if coarse > highest else coarse
        counts[coarse] = counts.get(coarse, 0) + count
    text = ",".join(f'"{i}":{c}' for i, c in sorted(counts.items()) if c)
    return (*quantiles, "{" + text + "}")


@functools.lru_cache(maxsize=16)
def _derived_of_blob(blob: bytes, low: float | None, high: float | None) -> tuple:
    return derived(codec.decode(blob, None, 0.0, 0.0, low, high))


def _hist_derived(blob: bytes, low: float | None, high: float | None, column: int):
    """SQL function ``hist_derived(hist, min, max, i)``: derived column ``i`` of a blob."""
    return _derived_of_blob(blob, low, high)[column]


def register(conn: sqlite3.Connection) -> None:
    """Make the functions above known to ``conn``."""
    conn.create_function("hist_merge", 2, _hist_merge, deterministic=True)
    conn.create_function("hist_derived", 4, _hist_derived, deterministic=True)
    conn.create_aggregate("hist_sum", 1, _HistSum)
    conn.create_aggregate("latest", 2, _Latest)
