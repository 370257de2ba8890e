"""What a weekly baseline keeps: the merged histogram of each hour of the week of a baseline's
data period (schema 10), so that a cluster's expected value of an hour is the statistic of
its hosts' histograms of that hour merged exactly, as ``baseline_histograms`` does for the
whole period.

Hours of the week are those of ``[baseline] zone`` (0 = Monday 00:00-01:00 ... 167 = Sunday
23:00-24:00): a site's nightly jobs run on its local clock, through the changes of summer
time. The zone's name is kept with the rows: a reader in another zone finds none and says so.
A record belongs to the hour of week its start falls in (minute, ten-minute and hour records
all start on ten minutes, so a zone offset of half an hour still puts each whole).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping

from slowdown.analysis.histogram import Histogram, codec

VERSION = 10  # the schema from which files hold weekly histograms
HOURS = 168

CREATE = """
    CREATE TABLE weekly_histograms (
        target     TEXT NOT NULL,
        op         TEXT NOT NULL,
        data_from  INTEGER NOT NULL,          -- the data period, as in baselines
        data_to    INTEGER NOT NULL,
        zone       TEXT NOT NULL,             -- [baseline] zone whose hours these are
        hour       INTEGER NOT NULL,          -- of the week: 0 = Monday 00h, 167 = Sunday 23h
        samples    INTEGER NOT NULL,          -- values in the histogram
        hist       BLOB NOT NULL,             -- codec.encode with its moments
        PRIMARY KEY (target, op, data_from, data_to, zone, hour)
    ) WITHOUT ROWID;
"""

PeriodKey = tuple  # (target, op, data_from, data_to)


def hour_of_week(t: float, zone: dt.tzinfo | None) -> int:
    """The hour of the week of ``t`` in ``zone`` (None: this process's local zone)."""
    d = dt.datetime.fromtimestamp(t, zone)
    return d.weekday() * 24 + d.hour


def holds(store) -> bool:
    return getattr(store, "version", VERSION) >= VERSION


def compute(conn, target: str, op: str, data_from: int, data_to: int,
            zone: dt.tzinfo | None) -> dict[int, Histogram]:
    """The merged histogram (with its moments) of each hour of the week of one (target, op)'s
    minute and hour records starting in ``[data_from, data_to)``, over every host of the
    file; completed ops only, as every baseline."""
    groups: dict[int, list] = {}
    slots: dict[int, int] = {}
    for table in ("minutes", "hours"):
        for start, count, s, ss, mn, mx, blob in conn.execute(
                f"SELECT r.start, r.count, r.sum, r.sumsq, r.min, r.max, r.hist FROM series s "
                f"CROSS JOIN {table} r ON r.series = s.id WHERE s.target = ? AND s.op = ? "
                "AND r.start >= ? AND r.start < ?", (target, op, data_from, data_to)):
            slot = start // 600
            how = slots.get(slot)
            if how is None:
                how = slots[slot] = hour_of_week(slot * 600, zone)
            groups.setdefault(how, []).append((count, s, ss, mn, mx, blob))
    out = {}
    for how, rows in groups.items():
        h = codec.merge_blobs([r[5] for r in rows])
        counted = [r for r in rows if r[0]]
        h.sum = math.fsum(r[1] for r in counted)
        h.sumsq = math.fsum(r[2] for r in counted)
        h.min = min((r[3] for r in counted), default=math.inf)
        h.max = max((r[4] for r in counted), default=-math.inf)
        if h.count:
            out[how] = h
    return out


def save(conn, periods: Mapping[PeriodKey, Mapping[int, Histogram]], zone_name: str) -> None:
    """Insert the weekly histograms of baseline periods (in the caller's transaction)."""
    conn.executemany(
        "INSERT OR REPLACE INTO weekly_histograms (target, op, data_from, data_to, zone, hour,"
        " samples, hist) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [(*key, zone_name, how, h.count, codec.encode(h))
         for key, hours in periods.items() for how, h in sorted(hours.items()) if h.count])


def load(store, zone_name: str) -> dict[PeriodKey, dict[int, tuple[int, bytes]]]:
    """Each baseline period's weekly histograms of ``zone_name``: (samples, encoded) by hour
    of the week; none in a file of a schema before 10."""
    if not holds(store):
        return {}
    out: dict[PeriodKey, dict[int, tuple[int, bytes]]] = {}
    for t, o, a, b, how, samples, blob in store.conn.execute(
            "SELECT target, op, data_from, data_to, hour, samples, hist FROM weekly_histograms"
            " WHERE zone = ?", (zone_name,)):
        out.setdefault((t, o, a, b), {})[how] = (samples, blob)
    return out


def periods_held(store, zone_name: str) -> set[PeriodKey]:
    """The baseline periods that have weekly histograms of ``zone_name`` (none read)."""
    if not holds(store):
        return set()
    return set(store.conn.execute(
        "SELECT DISTINCT target, op, data_from, data_to FROM weekly_histograms WHERE zone = ?",
        (zone_name,)))


def merged(blobs: list[bytes]) -> Histogram:
    """The exact merge of encoded histograms, moments included."""
    h = codec.merge_blobs(blobs)
    moments = [m for m in (codec.moments_of(b) for b in blobs) if m is not None]
    h.sum = math.fsum(m[0] for m in moments)
    h.sumsq = math.fsum(m[1] for m in moments)
    h.min = min((m[2] for m in moments), default=math.inf)
    h.max = max((m[3] for m in moments), default=-math.inf)
    return h
