"""What a cluster view merged: how many files and hosts, which hosts had no record in the
window shown (a node that stopped reporting), and which files were left out as unreadable.

Every read command over several files says it (``slowdown``, ``-v``, ``--json``, ``check``
and the report), so that a cluster number is never taken for more hosts than it holds.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field

from slowdown.analysis.store.store import Selection, Store, StoreError, named, plain_globs

# Names listed in a line of text; the JSON lists them all.
LISTED = 12


@dataclass
class Merged:
    files: int  # database files read
    hosts: list[str]  # hosts named in them (as filtered), sorted
    silent: list[str]  # of those, the hosts without a record in the window
    window: tuple[int, int]  # [start, end) the records were looked for in
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (file, why)

    @property
    def reporting(self) -> int:
        return len(self.hosts) - len(self.silent)

    def json(self) -> dict:
        return {"files": self.files, "hosts": len(self.hosts), "reporting": self.reporting,
                "without_records": self.silent, "window": list(self.window),
                "skipped": [{"database": path, "error": why} for path, why in self.skipped]}

    def text(self, window: str) -> str:
        """One line: ``merged 510 of 512 hosts (512 files); no records in the last 1h from
        node017, node033; 1 file skipped: x.db: not a slowdown database``."""
        line = (f"merged {self.reporting} of {len(self.hosts)} hosts "
                f"({self.files} file{'s' if self.files != 1 else ''})")
        if self.silent:
            line += f"; no records in {window} from {_names(self.silent)}"
        if self.skipped:
            n = len(self.skipped)
            line += (f"; {n} file{'s' if n != 1 else ''} skipped: "
                     + "; ".join(why for _, why in self.skipped[:LISTED])
                     + (f"; and {n - LISTED} more" if n > LISTED else ""))
        return line


def _names(names: Sequence[str]) -> str:
    shown = ", ".join(names[:LISTED])
    return shown + (f" and {len(names) - LISTED} more" if len(names) > LISTED else "")


def hosts_with_records(store: Store, selection: Selection) -> set[str]:
    """The hosts of ``store`` with a minute or hour record starting in the selection."""
    seen = store.known.pop(("seen", int(selection.start or 0), int(selection.end or 0),
                            tuple(selection.hosts)), None)
    if seen is not None and selection.start is not None and selection.end is not None \
            and selection.pairs is None and plain_globs(selection):
        return {series[0] for series in seen if named(series, selection)}
    names, params = selection.series_where()
    times, time_params = selection.time_where("r")
    sql = (f"SELECT DISTINCT s.host FROM series s WHERE {names} AND ("
           f"EXISTS (SELECT 1 FROM minutes r WHERE r.series = s.id AND {times}) OR "
           f"EXISTS (SELECT 1 FROM hours r WHERE r.series = s.id AND {times}))")
    try:
        return {row[0] for row in store.conn.execute(sql, [*params, *time_params,
                                                            *time_params])}
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"{store.path}: {exc}") from None


def merged(stores: Sequence[Store], hosts: Sequence[str], selection: Selection,
           skipped: Sequence[tuple[str, str]] = ()) -> Merged:
    """What ``stores`` merge for ``selection``; ``hosts``: every host they name, as filtered."""
    seen: set[str] = set()
    for store in stores:
        seen |= hosts_with_records(store, selection)
    named = sorted(set(hosts))
    return Merged(len(stores), named, [h for h in named if h not in seen],
                  (int(selection.start or 0), int(selection.end or 0)), list(skipped))


__all__ = ["Merged", "hosts_with_records", "merged"]
