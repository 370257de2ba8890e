"""Which records each of a cluster's nested windows takes, and the statement that reads them.

Each window ending at one moment takes the whole ten-minute records inside it from a file
that keeps them (``ten_minute_records.py``) and minute records elsewhere; the windows share
what they both take. The records are read in stretches of one table that the same windows
take, each row labelled with its kind (the set of windows that take it):
``cluster_windows.py`` adds the rows per kind, and each window is the sum of the kinds it
takes. The query is a job of its own (what to read); ``cluster_windows.py`` reads and adds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

from slowdown.analysis.store import ten_minute_records
from slowdown.analysis.store.records import MINUTE
from slowdown.analysis.store.schema import stuck_end_of
from slowdown.analysis.store.selection import Selection
from slowdown.analysis.store.store import TABLES


class WindowsQuery(NamedTuple):
    """What a cluster's window read asks of each file (``windows_query``)."""

    statement: Callable[[int], str]  # of the file's schema version
    params: Callable[[int], list]
    start: int  # the longest window's
    end: int
    width: int  # kinds of rows: each row's label is its series' code * width + its kind
    members: list[list[int]]  # of each window (shortest first), the kinds of rows it takes


def windows_query(names: Selection, end: int, spans: Sequence[int]) -> WindowsQuery:
    """The records of the windows, in one statement. Each window takes the whole tens inside
    it from a file that keeps them (``ten_minute_records.py``), its minutes elsewhere (every
    minute from an older file); the windows share what they both take (the minutes of the last ten
    minutes, the tens of the hour). The records are read in stretches of one table whose
    records the same windows take, each stretch its own range of the primary key (only the
    records read are visited) and its rows labelled with its kind: the set of windows. The
    statement is kept short, as every file prepares it anew. No hour record: a file holding
    one in the window is not read this way (``cluster_windows._hours_within``)."""
    where, params = names.series_where()
    end = int(end)
    # (minute records start on a minute: ``Store.write``; tens on a ten)
    plain = [[(end - int(s), end)] for s in spans]
    minutes, ten_ranges = [], []
    for s in spans:
        inner = ten_minute_records.inner(end - int(s), end)
        minutes.append(_outside(end - int(s), end, [inner] if inner else []))
        ten_ranges.append([inner] if inner else [])
    layouts = {  # whether the file keeps tens: (table, from, to, windows) of its stretches
        False: [(TABLES[MINUTE], *piece) for piece in _stretches(plain)],
        True: [(TABLES[MINUTE], *piece) for piece in _stretches(minutes)]
        + [(ten_minute_records.TABLE, *piece) for piece in _stretches(ten_ranges)]}
    kinds = sorted({mask for layout in layouts.values() for *_, mask in layout})
    kind = {mask: k for k, mask in enumerate(kinds)}

    scans = {keeps: _scans(layout, kind) for keeps, layout in layouts.items()}

    def statement(version: int) -> str:
        return " UNION ALL ".join(
            f"SELECT s.id, {label}, r.start, r.errors, r.skipped, r.sum, r.sumsq, "
            f"coalesce(r.min, {_NO_MIN}), coalesce(r.max, {_NO_MAX}), r.stuck, "
            f"{stuck_end_of(version)}, r.hist FROM series s CROSS JOIN {table} r "
            f"ON r.series = s.id WHERE {where} AND r.start >= {a} AND r.start < {b}"
            for table, a, b, label in scans[ten_minute_records.holds(version)])

    def params_of(version: int) -> list:
        return params * len(scans[ten_minute_records.holds(version)])
    members = [[k for k, mask in enumerate(kinds) if mask >> w & 1] for w in range(len(spans))]
    return WindowsQuery(statement, params_of, end - int(spans[-1]), end, len(kinds), members)


def _scans(stretches: list[tuple[str, int, int, int]], kind: dict[int, int]
           ) -> list[tuple[str, int, int, str]]:
    """``(table, from, to, kind)`` of the stretches, neighbours of one table read in one
    range (each subquery costs its preparation, in every file): the kind a constant, or an
    SQL expression of the record's start."""
    scans: list[tuple[str, int, int, list[tuple[int, int]]]] = []
    for table, a, b, mask in stretches:
        if scans and scans[-1][0] == table and scans[-1][2] == a:
            scans[-1] = (table, scans[-1][1], b, [*scans[-1][3], (a, kind[mask])])
        else:
            scans.append((table, a, b, [(a, kind[mask])]))
    return [(table, a, b, str(parts[0][1]) if len(parts) == 1 else
             "CASE " + " ".join(f"WHEN r.start >= {at} THEN {k}" for at, k in parts[:0:-1])
             + f" ELSE {parts[0][1]} END")
            for table, a, b, parts in scans]


# A record's extremes where it holds no value (NULL): what they are where there is none.
_NO_MIN, _NO_MAX = "9e999", "-9e999"  # +inf and -inf in SQLite


def _outside(first: int, end: int, inner: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The runs of ``[first, end)`` outside the ``inner`` ranges (sorted, disjoint, within
    it)."""
    out, at = [], first
    for a, b in inner:
        if at < a:
            out.append((at, a))
        at = b
    if at < end:
        out.append((at, end))
    return out


def _stretches(ranges: Sequence[Sequence[tuple[int, int]]]) -> list[tuple[int, int, int]]:
    """``(from, to, windows)``: the stretches of time that some of the windows' ``ranges``
    (per window) cover, each with the bit mask of the windows that cover it, in time order;
    neighbours with the same windows joined."""
    cuts = sorted({x for window in ranges for r in window for x in r})
    out: list[tuple[int, int, int]] = []
    for a, b in zip(cuts, cuts[1:]):
        mask = sum(1 << w for w, window in enumerate(ranges)
                   if any(lo <= a and b <= hi for lo, hi in window))
        if not mask:
            continue
        if out and out[-1][1] == a and out[-1][2] == mask:
            out[-1] = (out[-1][0], b, mask)
        else:
            out.append((a, b, mask))
    return out


__all__ = ["WindowsQuery", "windows_query"]
