"""The merged histogram of a (target, op) over a data period, read straight from a file's
records: what a baseline keeps (``baseline_histograms``, schema 6) so that baselines merge
across hosts exactly, and how migration 6 fills it for the baselines made before it."""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Callable

from slowdown.analysis.histogram import Histogram, codec
from slowdown.analysis.store.records import MINUTE


def fill_baseline_histograms(conn: sqlite3.Connection, table: str,
                              report: Callable[[int], None]) -> None:
    """Migration 6: the histogram of every stored baseline's data period, merged from the
    minute and hour records of that period, kept only where they hold exactly the samples
    the baseline counted (records pruned or written since: left without, and said by its
    absence). Progress counts baseline rows."""
    periods = conn.execute(
        f"SELECT target, op, data_from, data_to, max(samples), count(*) FROM {table} "
        "GROUP BY target, op, data_from, data_to ORDER BY target, op, data_from, data_to"
    ).fetchall()
    for target, op, data_from, data_to, samples, rows in periods:
        h = records_histogram(conn, target, op, data_from, data_to)
        if h.count and h.count == samples:
            conn.execute(
                "INSERT OR REPLACE INTO baseline_histograms (target, op, data_from, data_to,"
                " samples, hist) VALUES (?, ?, ?, ?, ?, ?)",
                (target, op, data_from, data_to, h.count, codec.encode(h)))
        report(rows)


def records_histogram(conn: sqlite3.Connection, target: str, op: str, data_from: int,
                      data_to: int) -> Histogram:
    """The merged histogram (with its moments) of one (target, op)'s minute and hour records
    starting in ``[data_from, data_to)``, over every host of the file."""
    blobs, total, total_sq, lo, hi = [], 0.0, 0.0, math.inf, -math.inf
    for table in ("minutes", "hours"):
        for count, s, ss, mn, mx, blob in conn.execute(
                f"SELECT r.count, r.sum, r.sumsq, r.min, r.max, r.hist FROM series s "
                f"CROSS JOIN {table} r ON r.series = s.id WHERE s.target = ? AND s.op = ? "
                "AND r.start >= ? AND r.start < ?", (target, op, data_from, data_to)):
            blobs.append(blob)
            if count:
                total, total_sq = total + s, total_sq + ss
                lo, hi = min(lo, mn), max(hi, mx)
    h = codec.merge_blobs(blobs)
    h.sum, h.sumsq, h.min, h.max = total, total_sq, lo, hi
    return h


def data_extent(store, target: str, op: str, start: int, end: int
                ) -> tuple[int, int] | None:
    """(start of the first record, end of the last) of a pair within ``[start, end)``: how
    long its data really is (None: no record)."""
    found = []
    for table, span in (("minutes", MINUTE), ("hours", 3600)):
        row = store.conn.execute(
            f"SELECT min(r.start), max(r.start) FROM {table} r JOIN series s ON s.id = r.series"
            " WHERE s.target = ? AND s.op = ? AND r.start >= ? AND r.start < ?",
            (target, op, start, end)).fetchone()
        if row[0] is not None:
            found.append((row[0], min(end, row[1] + span)))
    if not found:
        return None
    return min(f[0] for f in found), max(f[1] for f in found)


def data_lengths(store, made: list) -> list[int]:
    """How long the data of each new baseline's pair really is (not the period asked for:
    three minutes of records in a day's period are three minutes of data)."""
    found = {(b.target, b.op): data_extent(store, b.target, b.op, b.data_from, b.data_to)
             for b in made}
    return [end - start for start, end in (f for f in found.values() if f is not None)]
