"""The slow servers of each target, in the words a verdict uses: ``h2:/b3 12x, the others
1.1x`` (``server_table.slow_note``), from the per-server records of the files a view reads.

Read only where it is asked for (``slowdown -v``, or a verdict that says ``filesystem``): the
plain ``slowdown`` line pays nothing for it. Over the last ten minutes by default, the
tens that overlap them read whole, as ``slowdown servers`` reads them.
"""

from __future__ import annotations

from collections.abc import Sequence

from slowdown.analysis.stats import server_table
from slowdown.analysis.store import server_reads
from slowdown.analysis.store.selection import Selection
from slowdown.analysis.store.store import Store
from slowdown.analysis.words import OPS

SPAN = 600.0  # seconds before the moment looked at


def slow_servers(stores: Sequence[Store], book, targets: Sequence[str], hosts: Sequence[str],
                 now: float, span: float = SPAN) -> dict[str, str]:
    """Per target, the note naming its slow servers; targets without one are left out (no
    per-server record, too few probes, or no server slow by the rule)."""
    if not targets or not stores:
        return {}
    read = server_reads.read(stores, Selection(tuple(hosts), tuple(targets), (),
                                               int(now - span), int(now) + 1))
    if not read.latencies:
        return {}

    def expected(target: str, op: str) -> float | None:
        found = book.expected(target, op, "median", now)
        return found.value if found is not None else None

    rows = server_table.rows(read.latencies, expected, OPS)
    notes = {}
    for target in targets:
        note = server_table.slow_note([r for r in rows if r.target == target])
        if note is not None:
            notes[target] = note
    return notes


__all__ = ["SPAN", "slow_servers"]
