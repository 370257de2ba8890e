"""Weekly baselines made and kept (``[baseline] expected = "weekly"``): the histograms of each
hour of the week of every new baseline's period, and of the baselines in force that lack
them, and a baseline made from less than a week replaced once a week of data exists.

The provisional rule extends by a week: the initial baseline after a day (or a rebaseline
from a day) is flat for the readers (each hour of the week needs values of its own); once
``WEEK`` of data exists since its period began, the service makes another from all of it,
with its reason, as it replaces a provisional one after a day. A baseline made while the
setting was off gets its weekly histograms from its period's records, as they still are.
"""

from __future__ import annotations

import datetime as dt
import sqlite3
from collections.abc import Mapping, Sequence

from slowdown.analysis.store import weekly_histograms as wh
from slowdown.analysis.store.period_histograms import data_extent
from slowdown.analysis.store.records import minute_of

WEEK = 7 * 86400


def save_periods(store, keys, zone_name: str, zone: dt.tzinfo | None) -> None:
    """The weekly histograms of the periods ``keys`` ((target, op, data_from, data_to)),
    from the file's records, in one transaction."""
    if not wh.holds(store):
        return
    periods = {key: wh.compute(store.conn, *key, zone) for key in keys}
    conn: sqlite3.Connection = store.conn
    conn.execute("BEGIN IMMEDIATE")
    try:
        wh.save(conn, periods, zone_name)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def upkeep(store, now: float, zone_name: str, zone: dt.tzinfo | None,
           statistics: Sequence[str], made: list, histograms: Mapping) -> list:
    """After ``maintain``: weekly histograms for the periods just made and for the baselines
    in force without them; a new baseline where the one in force holds less than a week
    and a week of data exists since it began. Returns the baselines it made."""
    from slowdown.analysis.stats.baseline import _made, load, save

    if not wh.holds(store):
        return []
    stored = wh.periods_held(store, zone_name)
    keys = set(histograms)
    grown: list = []
    grown_histograms: dict = {}
    to = minute_of(now)
    current: dict[tuple[str, str], object] = {}
    for b in load(store):
        if b.valid_to is None and b.valid_from <= to:
            current[(b.target, b.op)] = b
    for (target, op), b in sorted(current.items()):
        key = (target, op, b.data_from, b.data_to)
        if b.provisional:
            continue  # maintain's own rule replaces it after a day
        if b.data_to - b.data_from >= WEEK:
            if key not in stored:
                keys.add(key)
            continue
        found = data_extent(store, target, op, b.data_from, to)
        if found is not None and found[1] - found[0] >= WEEK:
            _made(store, target, op, statistics, found[0], to, to, b.reason or "initial",
                  grown, grown_histograms)
    if grown:
        save(store, grown, now, grown_histograms)
        keys |= set(grown_histograms)
    keys -= stored
    if keys:
        save_periods(store, sorted(keys), zone_name, zone)
    return grown
