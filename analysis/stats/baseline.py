"""Baselines: the expected value of each (target, op, statistic), kept with its validity period.

- Monthly: when a calendar month ends (in the zone of ``[baseline] zone``: the node's local
  zone by default), the previous month's data gives the baselines in force from the first of
  the new month (``maintain``, called by the service after its minute flush).
- Initial: once ``provisional_after`` (24 h) of data exist and no baseline does, one is made
  from all the data so far, in force from then on.
- On demand: ``rebaseline`` (``slowdown rebaseline --reason ...``) after a system change.
- Until a stored baseline is in force, readers compute a provisional one from the data
  recorded so far and say so.

A new baseline closes the one before it (``valid_to``), so every moment has exactly one
baseline in force and a past slowdown is computed against the baseline of its time.

Each baseline keeps the histogram of its data period (``baseline_histograms``), so the
expected value of a cluster is the statistic of the exact merge of the baselines in force on
each of its hosts at that moment: N small rows, never N months of records (docs/FLEET.md says
how hosts that started or were rebaselined at different moments combine). With ``[baseline]
expected = "weekly"`` it keeps each hour of the week's too, and the book asks ``stats/weekly``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from slowdown.analysis.histogram import Histogram, codec
from slowdown.analysis.stats.window import estimate
from slowdown.analysis.store import Selection, Store, aggregate, schema
from slowdown.analysis.store.period_histograms import data_extent
from slowdown.analysis.store.records import MINUTE, Aggregate, minute_of
from slowdown.analysis.words import STATISTICS


@dataclass(frozen=True)
class Baseline:
    target: str
    op: str
    statistic: str
    value: float  # seconds
    samples: int
    data_from: int
    data_to: int
    valid_from: int
    valid_to: int | None = None
    provisional: bool = False
    reason: str | None = None


def month_start(t: float, zone: dt.tzinfo | None = None) -> int:
    """Start of the calendar month holding ``t`` in ``zone`` (None: the local zone of this
    process, which for the service is the node's; see ``[baseline] zone``)."""
    d = dt.datetime.fromtimestamp(t, zone)
    first = d.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    if zone is None:  # local midnight, found by mktime as ``date`` finds it
        return int(time.mktime((first.year, first.month, 1, 0, 0, 0, 0, 0, -1)))
    return int(first.timestamp())


def previous_month_start(start: int, zone: dt.tzinfo | None = None) -> int:
    return month_start(start - 1, zone)


def compute(stores: Sequence[Store], target: str, op: str, statistics: Iterable[str],
            data_from: int, data_to: int) -> list[tuple[str, float, int]]:
    """``(statistic, value, samples)`` over ``[data_from, data_to)``; nothing when empty."""
    return _estimates(_completed(stores, target, op, data_from, data_to), statistics)


def _completed(stores: Sequence[Store], target: str, op: str, data_from: int,
               data_to: int) -> Aggregate:
    """The merged records of ``[data_from, data_to)``, of completed ops only: baselines
    describe normal operation, never raised to stuck ages. A month of minutes is read as
    ten-minute records where whole tens lie in the period (ten times fewer rows)."""
    agg = aggregate(stores, Selection(targets=(target,), ops=(op,), start=data_from,
                                      end=data_to), whole_tens=True)
    agg.stuck = agg.stuck_end = 0.0
    return agg


def _estimates(agg: Aggregate, statistics: Iterable[str]) -> list[tuple[str, float, int]]:
    if not agg.histogram.count:
        return []
    return [(s, estimate(agg, s).value, agg.histogram.count) for s in statistics]


def _span(store: Store) -> dict[tuple[str, str], tuple[int, int]]:
    """(target, op) -> (first minute, end of the last minute) with data, over all hosts."""
    rows = store.conn.execute(
        "SELECT s.target, s.op, min(r.start), max(r.start) FROM minutes r "
        "JOIN series s ON s.id = r.series GROUP BY s.target, s.op"
    )
    spans = {(t, o): (lo, hi + MINUTE) for t, o, lo, hi in rows}
    for t, o, lo, hi in store.conn.execute(
        "SELECT s.target, s.op, min(r.start), max(r.start) FROM hours r "
        "JOIN series s ON s.id = r.series GROUP BY s.target, s.op"
    ):
        old = spans.get((t, o), (lo, hi + 3600))
        spans[(t, o)] = (min(old[0], lo), max(old[1], hi + 3600))
    return spans


PeriodKey = tuple[str, str, int, int]  # (target, op, data_from, data_to)


def save(store: Store, baselines: Sequence[Baseline], computed_at: float | None = None,
         histograms: Mapping[PeriodKey, Histogram] | None = None) -> None:
    """Insert baselines; each closes the one in force before it (same target, op, statistic).
    ``histograms``: the merged data of each baseline's period, kept for cluster merges."""
    now = int(time.time() if computed_at is None else computed_at)
    conn = store.conn
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.executemany(
            "INSERT OR REPLACE INTO baseline_histograms (target, op, data_from, data_to,"
            " samples, hist) VALUES (?, ?, ?, ?, ?, ?)",
            [(*key, h.count, codec.encode(h)) for key, h in (histograms or {}).items()
             if h.count])
        for b in baselines:
            conn.execute(
                "UPDATE baselines SET valid_to = ? WHERE target = ? AND op = ? AND statistic = ?"
                " AND valid_from < ? AND (valid_to IS NULL OR valid_to > ?)",
                (b.valid_from, b.target, b.op, b.statistic, b.valid_from, b.valid_from),
            )
            conn.execute(
                "INSERT INTO baselines (target, op, statistic, value, samples, data_from, data_to,"
                " valid_from, valid_to, provisional, reason, computed_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (b.target, b.op, b.statistic, b.value, b.samples, b.data_from, b.data_to,
                 b.valid_from, b.valid_to, int(b.provisional), b.reason, now),
            )
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def load_histograms(store: Store, at: float | None = None) -> dict[PeriodKey, bytes]:
    """The stored histogram (encoded, with its moments) of each baseline period (none in a
    file of schema 5, read as it is); ``at``: only of the periods of baselines in force then."""
    if getattr(store, "version", schema.VERSION) < 6:
        return {}
    when, params = ("", ()) if at is None else (
        " WHERE EXISTS (SELECT 1 FROM baselines b WHERE b.target = h.target AND b.op = h.op"
        " AND b.data_from = h.data_from AND b.data_to = h.data_to AND b.valid_from <= ?"
        " AND (b.valid_to IS NULL OR b.valid_to > ?))", (at, at))
    return {(t, o, a, b): blob for t, o, a, b, blob in store.conn.execute(
        f"SELECT target, op, data_from, data_to, hist FROM baseline_histograms h{when}", params)}


def _made(store: Store, target: str, op: str, stats: Sequence[str], start: int, end: int,
          valid_from: int, reason: str, made: list[Baseline],
          histograms: dict[PeriodKey, Histogram], provisional: bool = False) -> None:
    """The baselines of one (target, op) from ``[start, end)``, with their histogram."""
    agg = _completed([store], target, op, start, end)
    made += [Baseline(target, op, s, v, n, start, end, valid_from, reason=reason,
                      provisional=provisional)
             for s, v, n in _estimates(agg, stats)]
    if agg.histogram.count:
        histograms[(target, op, start, end)] = agg.histogram


_FIELDS = tuple(f.name for f in dataclasses.fields(Baseline))


def load(store: Store, at: float | None = None,
         statistics: Sequence[str] | None = None) -> list[Baseline]:
    """The file's baselines in the order they were made; ``at``: only those in force then
    (a cluster view of one moment: about half the rows of every file); ``statistics``: only
    of those (a cluster's ``slowdown``: one of six)."""
    conditions, params = [], []
    if at is not None:
        conditions.append("valid_from <= ? AND (valid_to IS NULL OR valid_to > ?)")
        params += [at, at]
    if statistics is not None:
        conditions.append(f"statistic IN ({', '.join('?' for _ in statistics)})")
        params += list(statistics)
    when = " WHERE " + " AND ".join(conditions) if conditions else ""
    rows = store.conn.execute(
        "SELECT target, op, statistic, value, samples, data_from, data_to, valid_from, valid_to,"
        f" provisional, reason FROM baselines{when} ORDER BY valid_from, id", params)
    # Made as ``Baseline(*row)`` would, without the frozen __init__'s setattr per field
    # (half the time of reading a file's baselines).
    made = []
    for row in rows:
        b = object.__new__(Baseline)
        fields = b.__dict__
        fields.update(zip(_FIELDS, row))
        fields["provisional"] = bool(row[9])
        made.append(b)
    return made


def _statistics(extra: Iterable[str]) -> list[str]:
    return list(dict.fromkeys([*STATISTICS, *extra]))


def maintain(store: Store, now: float, provisional_after: float = 86400.0,
             statistics: Iterable[str] = (), zone: dt.tzinfo | None = None,
             weekly: str | None = None) -> list[Baseline]:
    """Make the monthly and initial baselines that are due (months of ``zone``, see
    ``month_start``); returns what it saved. ``weekly``: the zone's name (``[baseline]
    zone``) with ``expected = "weekly"``: their hours of the week too (stats/weekly_upkeep)."""
    stats = _statistics(statistics)
    existing = load(store)
    this_month = month_start(now, zone)
    made: list[Baseline] = []
    histograms: dict[PeriodKey, Histogram] = {}
    for (target, op), (first, end) in sorted(_span(store).items()):
        mine = [b for b in existing if (b.target, b.op) == (target, op)]
        if first < this_month and not any(b.valid_from == this_month for b in mine):
            # The month that just ended, from its start or since the last manual rebaseline.
            start = previous_month_start(this_month, zone)
            manual = [b.valid_from for b in mine if b.reason not in ("monthly", "initial")
                      and start <= b.valid_from < this_month]
            start = max([start, first, *manual])
            if this_month - start >= provisional_after:
                _made(store, target, op, stats, start, this_month, this_month, "monthly", made,
                      histograms)
                continue
        to = minute_of(now)
        if not mine:
            if min(end, to) - first >= provisional_after:
                _made(store, target, op, stats, first, to, to, "initial", made, histograms)
        else:
            _grown_up(store, target, op, stats, mine, to, provisional_after, made, histograms)
    if made:
        save(store, made, now, histograms)
    if weekly is not None:
        from slowdown.analysis.stats.weekly_upkeep import upkeep
        made += upkeep(store, now, weekly, zone, stats, made, histograms)
    return made


def _grown_up(store: Store, target: str, op: str, stats: Sequence[str],
              mine: Sequence[Baseline], to: int, provisional_after: float,
              made: list[Baseline], histograms: dict[PeriodKey, Histogram]) -> None:
    """A provisional baseline in force (a rebaseline from too little data) replaced, with
    its reason, once ``provisional_after`` of data exists from its period on: as the initial
    one is made after a first day."""
    current = [b for b in mine if b.valid_to is None and b.valid_from <= to]
    if not current or not all(b.provisional for b in current):
        return
    since = min(b.data_from for b in current)
    found = data_extent(store, target, op, since, to)
    if found is not None and found[1] - found[0] >= provisional_after:
        _made(store, target, op, stats, found[0], to, to, current[0].reason or "initial",
              made, histograms)


def rebaseline(store: Store, now: float, reason: str, data_from: float | None = None,
               data_to: float | None = None, targets: Iterable[str] = (),
               statistics: Iterable[str] = (), provisional_after: float = 0.0,
               weekly: tuple[str, dt.tzinfo | None] | None = None) -> list[Baseline]:
    """New baselines in force from now, from ``[data_from, data_to)`` (default: the last day).
    A pair whose records there span less than ``provisional_after`` (``[baseline]
    provisional_after``, which ``slowdown rebaseline`` passes; 0: none) gets provisional ones,
    which ``maintain`` replaces once that much data exists: a few minutes of data make a poor
    expected value, and the readers must say so."""
    if not reason.strip():
        raise ValueError("a rebaseline needs a reason")
    to = minute_of(now if data_to is None else data_to)
    start = minute_of(to - 86400 if data_from is None else data_from)
    if start >= to:
        raise ValueError("the data period is empty")
    wanted = set(targets)
    made: list[Baseline] = []
    histograms: dict[PeriodKey, Histogram] = {}
    for target, op in sorted({(t, o) for _, t, o in store.series()}):
        if wanted and target not in wanted:
            continue
        found = data_extent(store, target, op, start, to)
        short = found is None or found[1] - found[0] < provisional_after
        _made(store, target, op, _statistics(statistics), start, to, minute_of(now), reason,
              made, histograms, provisional=short)
    if not made:
        raise ValueError("no data in that period")
    save(store, made, now, histograms)
    if weekly is not None:  # (zone name, zone): the hours of the week of each new period
        from slowdown.analysis.stats.weekly_upkeep import save_periods
        save_periods(store, sorted(histograms), *weekly)
    return made


@dataclass(frozen=True)
class Expected:
    """The denominator of a slowdown: a value, and where it came from."""

    value: float
    statistic: str
    provisional: bool
    baseline: Baseline | None  # None for a provisional value computed on the fly
    hosts: int = 1  # files whose baselines were merged into it (a cluster's)
    basis: str | None = None  # with expected = "weekly": "weekly" or "flat" (see note)
    note: str = ""  # why the flat value stands, or the hour of the week taken (stats/weekly)


def _in_force(rows: Sequence[Baseline], target: str, op: str, statistic: str,
              at: float) -> Baseline | None:
    found = None
    for b in rows:
        if (b.target, b.op, b.statistic) == (target, op, statistic) and b.valid_from <= at \
                and (b.valid_to is None or at < b.valid_to):
            found = b
    return found


def _stored_merge(parts: Sequence[tuple[bytes | None, Store, Baseline]]) -> Histogram:
    """The merge of baselines' histograms: the stored ones (blobs with their moments) at
    once; one without (made before schema 6 from records since pruned) from whatever
    records of its period its file still holds."""
    blobs = [blob for blob, _, _ in parts if blob is not None]
    merged = codec.merge_blobs(blobs, vector_from=16)  # a month's blob: hundreds of buckets
    moments = [codec.moments_of(blob) for blob in blobs]
    merged.sum = math.fsum(m[0] for m in moments)
    merged.sumsq = math.fsum(m[1] for m in moments)
    merged.min = min((m[2] for m in moments), default=math.inf)
    merged.max = max((m[3] for m in moments), default=-math.inf)
    for blob, store, b in parts:
        if blob is None:
            merged.merge(_completed([store], b.target, b.op, b.data_from, b.data_to).histogram)
    return merged


class BaselineBook:
    """Finds the baseline in force at a time, for one file or a cluster of files.

    For several files (hosts) the expected value is the statistic of the merged histograms
    of the baselines in force on each host at that moment (each file's own); a host with
    none in force then (its first day) adds nothing. Where no host has one, the value is
    provisional: computed from every host's data recorded so far.
    """

    def __init__(self, stores: Sequence[Store], expected: str = "same",
                 loaded: Sequence[tuple[list[Baseline], dict[PeriodKey, bytes]]] | None = None,
                 statistics: Sequence[str] | None = None,
                 zone: tuple[str, dt.tzinfo | None] | None = None) -> None:
        """``loaded``: each store's ``load`` and ``load_histograms``, read already;
        ``statistics``: the only ones ``loaded`` holds (asked for another, the book reads
        every baseline of the files again); ``zone``: ``[baseline] zone``'s name and zone
        (``BaselineConfig.weekly``), whose hours of the week a weekly book reads."""
        self.stores = list(stores)
        self.mode, self.zone = expected, zone
        if expected == "weekly":
            from slowdown.analysis.stats.weekly import Weekly
            self.weekly = Weekly(self, *(zone or ("local", None)))
        self.only = set(statistics) if loaded and statistics is not None else None
        self._read(loaded)

    def _read(self, loaded: Sequence[tuple[list[Baseline], dict[PeriodKey, bytes]]] | None
              ) -> None:
        self.books: list[list[Baseline]] = [rows for rows, _ in loaded] if loaded else \
            [load(store) for store in self.stores]
        self.rows: list[Baseline] = self.books[0] if self.books else []
        self._index: list[dict[tuple[str, str, str], list[Baseline]]] = []
        for rows in self.books:  # each file's baselines by (target, op, statistic)
            index: dict[tuple[str, str, str], list[Baseline]] = {}
            for b in rows:
                index.setdefault((b.target, b.op, b.statistic), []).append(b)
            self._index.append(index)
        self._histograms: list[dict[PeriodKey, bytes]] = (
            ([blobs for _, blobs in loaded] if loaded else
             [load_histograms(store) for store in self.stores])
            if len(self.stores) > 1 else [])
        self._aggregates: dict[tuple[str, str, int, int], Aggregate] = {}
        self._clusters: dict[tuple, Aggregate] = {}
        self._cluster_at: dict[tuple, Expected | None] = {}
        self._first: dict[tuple[str, str], int | None] = {}

    def _holding(self, statistic: str) -> None:
        """Every baseline read, where ``statistic`` is not among those loaded."""
        if self.only is not None and statistic not in self.only:
            self.only = None
            self._read(None)

    def in_force(self, target: str, op: str, statistic: str, at: float) -> Baseline | None:
        self._holding(statistic)
        return _in_force(self.rows, target, op, statistic, at)

    def _merged(self, target: str, op: str, statistic: str, start: int, end: int):
        span = (target, op, start, end)  # one merge for every statistic of a span
        if span not in self._aggregates:
            self._aggregates[span] = _completed(self.stores, target, op, start, end)
        rows = _estimates(self._aggregates[span], [statistic])
        return (rows[0][1], rows[0][2]) if rows else None

    def _cluster(self, target: str, op: str, statistic: str, at: float) -> Expected | None:
        """The merge of the baselines in force at ``at`` on each host (each asked once: every
        window of a moment asks for the same)."""
        wanted = (target, op, statistic)
        if (*wanted, at) not in self._cluster_at:
            self._cluster_at[(*wanted, at)] = self._cluster_of(target, op, statistic, at)
        return self._cluster_at[(*wanted, at)]

    def _cluster_of(self, target: str, op: str, statistic: str, at: float) -> Expected | None:
        wanted = (target, op, statistic)
        found = [(i, b) for i, index in enumerate(self._index)
                 if (b := _in_force(index.get(wanted, ()), target, op, statistic, at))
                 is not None]
        if not found:
            return None
        key = (target, op, tuple((i, b.data_from, b.data_to) for i, b in found))
        agg = self._clusters.get(key)
        if agg is None:
            agg = self._clusters[key] = Aggregate(_stored_merge(
                [(self._histograms[i].get((target, op, b.data_from, b.data_to)),
                  self.stores[i], b) for i, b in found]))
        rows = _estimates(agg, [statistic])
        if not rows or math.isnan(rows[0][1]):
            return None
        return Expected(rows[0][1], statistic, any(b.provisional for _, b in found),
                        found[0][1], hosts=len(found))

    def _first_minute(self, target: str, op: str) -> int | None:
        key = (target, op)
        if key not in self._first:
            firsts = []
            for store in self.stores:
                row = store.conn.execute(
                    "SELECT min(r.start) FROM minutes r JOIN series s ON s.id = r.series"
                    " WHERE s.target = ? AND s.op = ?", (target, op)).fetchone()
                if row[0] is not None:
                    firsts.append(row[0])
            self._first[key] = min(firsts) if firsts else None
        return self._first[key]

    def expected(self, target: str, op: str, statistic: str, at: float,
                 window: float = 0.0) -> Expected | None:
        """The expected value at ``at``; with ``expected = "weekly"``, of the hours of the
        week of the window of ``window`` seconds ending then (0: of the moment)."""
        flat = self._flat(target, op, statistic, at)
        if self.mode != "weekly" or flat is None:
            return flat
        return self.weekly.expected(flat, target, op, flat.statistic, at, window)

    def _flat(self, target: str, op: str, statistic: str, at: float) -> Expected | None:
        stat = statistic if self.mode != "median" else "median"
        self._holding(stat)
        if len(self.stores) == 1:
            b = self.in_force(target, op, stat, at)
            if b is not None:
                return Expected(b.value, stat, b.provisional, b)
        else:
            found = self._cluster(target, op, stat, at)
            if found is not None:
                return found
        first = self._first_minute(target, op)
        if first is None:
            return None
        merged = self._merged(target, op, stat, first, minute_of(at))
        if merged is None or not merged[0] or math.isnan(merged[0]):
            return None
        return Expected(merged[0], stat, True, None, hosts=len(self.stores))

    def expected_periods(self, target: str, op: str, statistic: str, first: int,
                         last: int) -> list[tuple[int, float]]:
        """``(begin, expected)`` for each period of ``[first, last]`` between baseline
        changes (on any host of a cluster), in time order (NaN where there is none), so that
        a series of minutes takes the value in force at each minute. Where no baseline is in
        force the provisional value is the one known at the end of that period."""
        stat = statistic if self.mode != "median" else "median"
        self._holding(stat)
        changes = sorted({t for rows in self.books for b in rows
                          if (b.target, b.op, b.statistic) == (target, op, stat)
                          for t in (b.valid_from, b.valid_to)
                          if t is not None and first < t <= last})
        periods = []
        for begin, end in zip([first, *changes], [*changes, last + 1]):
            e = self._flat(target, op, statistic, begin)
            if e is None or e.baseline is None:  # provisional: as known at the end
                e = self._computed_later(target, op, stat, begin, end) or \
                    self._flat(target, op, statistic, end - 1)
            periods.append((begin, math.nan if e is None else e.value))
        if self.mode == "weekly":  # each hour's value where the week's can be taken
            return self.weekly.periods(periods, target, op, stat, first, last)
        return periods

    def _computed_later(self, target: str, op: str, stat: str, begin: int,
                        end: int) -> Expected | None:
        """The baseline that took over at ``end`` from data covering ``[begin, end)`` (the
        initial one after the first day, say): what the provisional value would have been
        at the end, without merging that data again. Only for one file (a cluster's is
        recomputed from every host anyway)."""
        if len(self.stores) != 1:
            return None
        for b in self.rows:
            if (b.target, b.op, b.statistic) == (target, op, stat) and b.valid_from == end \
                    and b.data_from <= begin and b.data_to == end:
                return Expected(b.value, stat, True, None)
        return None
