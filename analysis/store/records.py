"""What the store keeps per (host, target, op, minute): the minute record of SPEC section 2."""

from __future__ import annotations

from dataclasses import dataclass, field

from slowdown.analysis.histogram import Histogram

MINUTE = 60
HOUR = 3600
TABLES_SPAN = {"minutes": MINUTE, "hours": HOUR}  # the span of each table's records


@dataclass
class Record:
    """Latencies of one op in one span (a UTC minute, or an hour after rollup).

    ``histogram`` carries count, sum, sum of squares, min and max of the ops that returned:
    the successful ones and those that hung for longer than the interval and then failed (a
    user waited that long); ``errors`` counts failed ops (those too), ``skipped`` ticks that
    found the previous run still going, ``stuck`` is the longest age (seconds) an op had been
    in flight during the span, and ``stuck_end`` the age at the span's end of the oldest op
    still in flight then (0 when none): the hang that is not over yet, which raises the
    windows that end there.
    """

    host: str
    target: str
    op: str
    start: int  # unix seconds, UTC, a multiple of ``span``
    histogram: Histogram = field(default_factory=Histogram)
    errors: int = 0
    skipped: int = 0
    stuck: float = 0.0
    span: int = MINUTE
    stuck_end: float = 0.0

    @property
    def key(self) -> tuple[str, str, str, int]:
        return (self.host, self.target, self.op, self.start)

    def merge(self, other: Record) -> None:
        """Fold ``other`` (same op, any span) into this record."""
        self.histogram.merge(other.histogram)
        self.errors += other.errors
        self.skipped += other.skipped
        self.stuck = max(self.stuck, other.stuck)
        self.stuck_end = max(self.stuck_end, other.stuck_end)


# A window takes every record that overlaps it, each in proportion to the part of its span
# inside the window (SPEC section 6, docs/WINDOWS.md): a record's samples are taken as spread
# evenly over its span. Weights are kept as whole "units" so that every reader sums them
# exactly: a whole record of any span weighs UNIT units per sample, and a record cut by an
# edge ``overlap * UNIT // span`` (whole: records start on whole seconds and UNIT is a
# multiple of every span's length). Minute records never straddle a window of whole minutes.
UNIT = HOUR


# How an upsert merges a record into the stored one of the same key (store.py,
# ten_minute_records.py): counts and sums add, extremes and stuck ages keep the larger,
# histograms merge.
MERGED = """
            count = count + excluded.count,
            errors = errors + excluded.errors,
            skipped = skipped + excluded.skipped,
            sum = sum + excluded.sum,
            sumsq = sumsq + excluded.sumsq,
            min = coalesce(min(min, excluded.min), min, excluded.min),
            max = coalesce(max(max, excluded.max), max, excluded.max),
            stuck = max(stuck, excluded.stuck),
            hist = hist_merge(hist, excluded.hist)"""


def overlap_units(start: int, span: int, first: int | None, end: int | None) -> int:
    """Units per sample of the record ``[start, start + span)`` in the window ``[first, end)``
    (``UNIT`` when wholly inside, 0 outside); None for an open end."""
    lo = start if first is None else max(start, first)
    hi = start + span if end is None else min(start + span, end)
    return max(0, hi - lo) * (UNIT // span)


def error_rate(samples: float, errors: float) -> float | None:
    """Failed ops over attempts (completed plus failed): what ``stats`` counts, the
    ``error_rate`` alert rules watch and ``check`` judges; None without an attempt."""
    attempts = samples + errors
    return errors / attempts if attempts else None


def minute_of(timestamp: float) -> int:
    """Start of the UTC minute holding ``timestamp``."""
    return int(timestamp // MINUTE) * MINUTE


@dataclass
class Aggregate:
    """Everything recorded for a selection of records, merged: what a window's statistics need."""

    histogram: Histogram = field(default_factory=Histogram)
    errors: float = 0  # whole, or with fractions where a window cuts a record
    skipped: float = 0
    stuck: float = 0.0  # the longest stuck age of any record in the window
    # The stuck age at the window's end: of each series, its latest record's ``stuck_end``
    # (an op that has returned since counts by its recorded latency instead). The statistics
    # are raised to this one (SPEC section 4, docs/WINDOWS.md).
    stuck_end: float = 0.0
    records: int = 0
    unit: int = 1  # the histogram's counts and sums are in samples times ``unit``
    first: int | None = None  # start of the earliest record merged
    last: int | None = None  # start of the latest record merged

    @property
    def samples(self) -> float:
        """Values in the window: whole ones, or fractions where a record is cut by an edge."""
        return self.histogram.count / self.unit

    @property
    def error_rate(self) -> float | None:
        """Failed ops over attempts in the window (``error_rate``); None without one."""
        return error_rate(self.samples, self.errors)

    def add(self, other: Aggregate) -> None:
        if other.unit != self.unit:
            raise ValueError("aggregates of different units do not add")
        self.histogram.merge(other.histogram)
        self.errors += other.errors
        self.skipped += other.skipped
        self.stuck = max(self.stuck, other.stuck)
        self.stuck_end = max(self.stuck_end, other.stuck_end)  # other series, same end
        self.records += other.records
        starts = [t for t in (self.first, other.first) if t is not None]
        self.first = min(starts) if starts else None
        ends = [t for t in (self.last, other.last) if t is not None]
        self.last = max(ends) if ends else None


NODE_FIELDS = (
    "load1", "cpu", "memory", "disk_read_bytes", "disk_write_bytes", "disk_reads",
    "disk_writes", "net_rx_bytes", "net_tx_bytes",
)


@dataclass
class NodeContext:
    """What the node itself was doing in one minute, beside the filesystem's latencies."""

    host: str
    start: int
    values: dict[str, float | int | None] = field(default_factory=dict)
