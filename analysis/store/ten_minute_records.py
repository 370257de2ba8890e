"""Ten-minute records: each series' minutes merged per ten minutes, kept beside them.

A cluster view reads many files, and what it costs is the rows it reads: ``history --since
7d --every 10m`` read ten minute records of every host per cell, ``slowdown``'s hour window
sixty per series. The ``tens`` table (schema 8) holds, for every (series, ten minutes) with a
minute record, the merge of those minutes, written in the transaction that writes them
(``Store.write``), removed in the one that rolls them up into hours (``Store.rollup``): it
holds exactly the minutes of the ``minutes`` table, grouped. A reader may take a ten in place
of its minutes wherever the ten lies wholly in one cell or window part (``inner``); its
counts, extremes, stuck ages and histogram are those of its minutes exactly (integers and
maxima add in any order), its sums differ from adding its minutes one by one at most by the
rounding of the additions (about 1e-16 of the sum).

``last`` is the start of the latest minute merged in, so that ``stuck_end`` stays that of the
latest minute, as a window takes it (``window.stuck_at_end``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable

from slowdown.analysis.histogram import codec
from slowdown.analysis.store.records import MERGED

TEN = 600
VERSION = 8  # the schema from which files hold ``tens``
TABLE = "tens"

CREATE = f"""
    CREATE TABLE {TABLE} (
        series    INTEGER NOT NULL REFERENCES series(id),
        start     INTEGER NOT NULL,           -- unix seconds, UTC, a multiple of 600
        count     INTEGER NOT NULL,
        errors    INTEGER NOT NULL DEFAULT 0,
        skipped   INTEGER NOT NULL DEFAULT 0,
        sum       REAL NOT NULL DEFAULT 0,
        sumsq     REAL NOT NULL DEFAULT 0,
        min       REAL,
        max       REAL,
        stuck     REAL NOT NULL DEFAULT 0,
        stuck_end REAL NOT NULL DEFAULT 0,    -- that of its latest minute
        last      INTEGER NOT NULL,           -- start of its latest minute
        hist      BLOB NOT NULL,
        PRIMARY KEY (series, start)
    ) WITHOUT ROWID
"""

_COLUMNS = "count, errors, skipped, sum, sumsq, min, max, stuck, stuck_end, last, hist"

UPSERT = f"""
    INSERT INTO {TABLE} (series, start, {_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
    ON CONFLICT (series, start) DO UPDATE SET
        stuck_end = CASE WHEN excluded.last > last THEN excluded.stuck_end
                         WHEN excluded.last < last THEN stuck_end
                         ELSE max(stuck_end, excluded.stuck_end) END,
        last = max(last, excluded.last),{MERGED}
"""


def rows_of(minutes: Iterable[tuple]) -> list[tuple]:
    """The ten-minute rows of minute rows ``(series, start, count, errors, skipped, sum,
    sumsq, min, max, stuck, stuck_end, histogram)``, merged in their order, as ``UPSERT``
    merges them (a minute written twice merges into itself the same way)."""
    tens: dict[tuple[int, int], list] = {}
    for sid, start, count, errors, skipped, s, ss, lo, hi, stuck, end, h in minutes:
        key = (sid, start - start % TEN)
        ten = tens.get(key)
        if ten is None:
            tens[key] = [count, errors, skipped, s, ss, lo, hi, stuck, end, start, h.copy()]
            continue
        ten[0] += count
        ten[1] += errors
        ten[2] += skipped
        ten[3] += s
        ten[4] += ss
        ten[5] = lo if ten[5] is None else ten[5] if lo is None else min(ten[5], lo)
        ten[6] = hi if ten[6] is None else ten[6] if hi is None else max(ten[6], hi)
        ten[7] = max(ten[7], stuck)
        ten[8] = end if start > ten[9] else ten[8] if start < ten[9] else max(ten[8], end)
        ten[9] = max(ten[9], start)
        ten[10].merge(h)
    return [(sid, start, *ten[:10], codec.encode(ten[10], moments=False))
            for (sid, start), ten in tens.items()]


def fill(conn: sqlite3.Connection, table: str, report: Callable[[int], None]) -> None:
    """Migration 8: the tens of every minute record written before, a series at a time
    (progress in minute records). Counts add as the upsert adds them: ``total`` (SQL's
    ``sum`` refuses an overflow; ``+``, as ``total``, goes on in floating point, exact below
    2**53)."""
    for (sid,) in conn.execute("SELECT id FROM series ORDER BY id").fetchall():
        moved = conn.execute(
            f"""INSERT INTO {TABLE} (series, start, {_COLUMNS})
                SELECT series, start - start % {TEN}, total(count), total(errors), total(skipped),
                       sum(sum), sum(sumsq), min(min), max(max), max(stuck),
                       latest(start, stuck_end), max(start), hist_sum(hist)
                FROM {table} WHERE series = ? GROUP BY series, start - start % {TEN}""",
            (sid,)).rowcount
        if moved:
            report(conn.execute(f"SELECT count(*) FROM {table} WHERE series = ?",
                                (sid,)).fetchone()[0])


def inner(lo: int, hi: int) -> tuple[int, int] | None:
    """The whole tens within ``[lo, hi)``, as ``[a, b)``; None if there is none."""
    a, b = -(-lo // TEN) * TEN, hi // TEN * TEN
    return (a, b) if a < b else None


def holds(version: int) -> bool:
    """Whether a file of schema ``version`` keeps tens."""
    return version >= VERSION


__all__ = ["TABLE", "TEN", "fill", "holds", "inner", "rows_of"]
