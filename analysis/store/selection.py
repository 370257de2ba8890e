"""Which records a read asks for: names (shell globs) and a time range, as SQL and, where a
visit answered already, as Python matching the same names."""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase

from slowdown.analysis.store.records import MINUTE


@dataclass(frozen=True)
class Selection:
    """Which records to read. Name filters are shell globs (``md-*``); empty means all.

    ``start`` is inclusive and ``end`` exclusive, both unix seconds: a record is selected
    when its span overlaps ``[start, end)`` (an hour record cut by an edge included; how much
    of it counts is ``records.overlap_units``).
    """

    hosts: tuple[str, ...] = ()
    targets: tuple[str, ...] = ()
    ops: tuple[str, ...] = ()
    start: int | None = None
    end: int | None = None
    pairs: tuple[tuple[str, str], ...] | None = None  # exact (target, op) names, if limited

    def where(self, alias: str = "r", span: int = MINUTE) -> tuple[str, list]:
        """The SQL condition on series ``s`` and records ``alias`` of ``span`` seconds, and its
        parameters."""
        names, name_params = self.series_where()
        times, time_params = self.time_where(alias, span)
        return f"{names} AND {times}", name_params + time_params

    def series_where(self) -> tuple[str, list]:
        """The condition on the names of series ``s``."""
        clauses: list[str] = []
        params: list = []
        for column, patterns in (("host", self.hosts), ("target", self.targets), ("op", self.ops)):
            if patterns:
                clauses.append("(" + " OR ".join(f"s.{column} GLOB ?" for _ in patterns) + ")")
                params.extend(patterns)
        if self.pairs is not None:
            clauses.append("(" + (" OR ".join("(s.target = ? AND s.op = ?)" for _ in self.pairs)
                                  or "0") + ")")
            params.extend(name for pair in self.pairs for name in pair)
        return " AND ".join(clauses) or "1", params

    def time_where(self, alias: str = "r", span: int = MINUTE) -> tuple[str, list]:
        """The condition on records ``alias`` of ``span`` seconds: those that overlap the
        range (on the start column, so the primary key finds them)."""
        clauses: list[str] = []
        params: list = []
        if self.start is not None:
            clauses.append(f"{alias}.start > ?")
            params.append(int(self.start) - span)
        if self.end is not None:
            clauses.append(f"{alias}.start < ?")
            params.append(int(self.end))
        return " AND ".join(clauses) or "1", params


def plain_globs(selection: Selection) -> bool:
    """Whether the selection's name patterns match the same names in SQLite's ``GLOB`` and
    Python's ``fnmatchcase``: ``*`` and ``?`` do, brackets do not (``[^a]``)."""
    return not any("[" in p for p in (*selection.hosts, *selection.targets, *selection.ops))


def named(series: tuple[str, str, str], selection: Selection) -> bool:
    """Whether (host, target, op) matches the selection's name patterns (``plain_globs``)."""
    return all(not patterns or any(fnmatchcase(name, p) for p in patterns) for name, patterns
               in zip(series, (selection.hosts, selection.targets, selection.ops)))


__all__ = ["Selection", "named", "plain_globs"]
