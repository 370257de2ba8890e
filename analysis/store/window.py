"""One window's aggregate from the records that overlap it: the rule of SPEC section 6.

A window ``[start, end)`` takes every record that overlaps it, each in proportion to the part
of its span inside the window (its samples taken as spread evenly over the span; see
``records.overlap_units`` and docs/WINDOWS.md). Where every record lies wholly inside, the
aggregate is the plain merge of their histograms; where an edge cuts a record (an hour record
and a window shorter than it, or one that ends inside it), every count, sum and sum of
squares is kept in units (``records.UNIT`` per sample), which add exactly in any order.

A window is raised to the stuck age at its end (``stuck_at_end``): of each series (host,
target, op), the ``stuck_end`` of its latest record in the window, the age of an op that had
not returned when that record ended. A hang whose op returned since and was recorded in a
later record of the window raises it no more: the op counts by its recorded latency.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from slowdown.analysis.histogram import Histogram, codec
from slowdown.analysis.store.records import UNIT, Aggregate, overlap_units


def stuck_at_end(rows: Iterable[tuple]) -> float:
    """The longest stuck age at the end of the rows' window: of each series, its latest
    row's ``stuck_end`` (the rows of ``Store.aggregate_rows``, any files)."""
    rows = rows if isinstance(rows, list) else list(rows)
    stuck = [r for r in rows if r[14]]
    if not stuck:  # the usual case: no op was stuck at the end of any record
        return 0.0
    latest: dict[tuple[str, str, str], int] = {}
    for r in rows:
        key = (r[1], r[2], r[3])
        if r[4] > latest.get(key, r[4] - 1):
            latest[key] = r[4]
    return max((r[14] for r in stuck if r[4] == latest[(r[1], r[2], r[3])]), default=0.0)


def aggregate_rows(rows: Iterable[tuple], start: int | None = None,
                   end: int | None = None) -> Aggregate:
    """Rows of ``Store.aggregate_rows`` (of one file or several) merged into the aggregate of
    the window ``[start, end)`` (open where None): a record that the window cuts counts by
    its overlap (``records.overlap_units``), one outside it not at all."""
    rows = list(rows)
    first = -math.inf if start is None else start
    last = math.inf if end is None else end
    if any(r[4] < first or r[4] + r[0] > last for r in rows):  # some not wholly inside
        units = [overlap_units(r[4], r[0], start, end) for r in rows]
        rows = [r for r, u in zip(rows, units) if u]
        units = [u for u in units if u]
        if any(u != UNIT for u in units):
            return _weighted(rows, units)
    result = Aggregate()
    blobs: list[bytes] = []
    total = total_sq = 0.0
    lo, hi = math.inf, -math.inf
    result.stuck_end = stuck_at_end(rows)
    for _, _, _, _, start, count, errors, skipped, s, ss, mn, mx, stuck, blob, _ in rows:
        blobs.append(blob)
        result.errors += errors
        result.skipped += skipped
        if stuck > result.stuck:
            result.stuck = stuck
        result.records += 1
        if result.first is None or start < result.first:
            result.first = start
        if result.last is None or start > result.last:
            result.last = start
        if count:
            total += s
            total_sq += ss
            lo = min(lo, mn)
            hi = max(hi, mx)
    merged = codec.merge_blobs(blobs)
    merged.sum, merged.sumsq, merged.min, merged.max = total, total_sq, lo, hi
    result.histogram = merged
    return result


def _weighted(rows: list[tuple], units: list[int]) -> Aggregate:
    """``aggregate_rows`` where some record is cut by an edge of the window: the histogram's
    counts, sum and sum of squares in units (``records.UNIT`` per sample of a whole record),
    so that they add exactly; errors and skipped ticks in samples (fractions)."""
    result = Aggregate(unit=UNIT, stuck_end=stuck_at_end(rows))
    h = Histogram()
    total = total_sq = 0.0
    lo, hi = math.inf, -math.inf
    parts = []
    for row, u in zip(rows, units):
        _, _, _, _, start, count, errors, skipped, s, ss, mn, mx, stuck, blob, _ = row
        scale, zero, counts, _ = codec.decode_pairs(blob)
        parts.append((scale, zero * u, {i: c * u for i, c in counts.items()}))
        result.errors += errors * u / UNIT
        result.skipped += skipped * u / UNIT
        result.stuck = max(result.stuck, stuck)
        result.records += 1
        result.first = start if result.first is None else min(result.first, start)
        result.last = start if result.last is None else max(result.last, start)
        if count:
            total += s * u
            total_sq += ss * u
            lo, hi = min(lo, mn), max(hi, mx)
    if parts:
        h = Histogram(min(scale for scale, _, _ in parts))
        for scale, zero, counts in parts:
            shift = scale - h.scale
            for index, count in counts.items():
                h.buckets.add(index >> shift, count)
            h.zero_count += zero
        h.count = h.zero_count + h.buckets.total()
    h.sum, h.sumsq, h.min, h.max = total, total_sq, lo, hi
    result.histogram = h
    return result
