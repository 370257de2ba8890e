"""The slow servers of each target, in the words a verdict uses: ``h2:/b3 12x, the others
1.1x`` (``server_table.slow_note``), from the per-server records of the files a view reads.

Read only where it is asked for (``slowdown -v``, or a verdict that says ``filesystem``): the
plain ``slowdown`` line pays nothing for it. Over the last ten minutes by default, the
tens that overlap them read whole, as ``slowdown servers`` reads them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from slowdown.analysis.stats import server_rule, server_table
from slowdown.analysis.store import server_reads
from slowdown.analysis.store.selection import Selection
from slowdown.analysis.store.store import Store
from slowdown.analysis.words import OPS

SPAN = 600.0  # seconds before the moment looked at


@dataclass(frozen=True)
class Named:
    """A target's slow servers: the verdict's words for them, and each one's figures."""

    note: str  # "h2:/b3 12x, the others 1.1x"
    servers: tuple[dict[str, Any], ...]  # as ``slowdown servers --json`` shows each


def slow_servers(stores: Sequence[Store], book, targets: Sequence[str], hosts: Sequence[str],
                 now: float, span: float = SPAN) -> dict[str, str]:
    """Per target, the note naming its slow servers; targets without one are left out (no
    per-server record, too few probes, or no server slow by the rule)."""
    named = named_servers(stores, book, targets, hosts, now, span)
    return {target: found.note for target, found in named.items()}


def named_servers(stores: Sequence[Store], book, targets: Sequence[str], hosts: Sequence[str],
                  now: float, span: float = SPAN) -> dict[str, Named]:
    """``slow_servers`` with each slow server's figures (an alert's message carries both)."""
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
        mine = [r for r in rows if r.target == target]
        note = server_table.slow_note(mine)
        if note is not None:
            slow = tuple(r.summary(_clean) for r in mine
                         if r.word == server_rule.SLOW and r.server != "unknown")
            notes[target] = Named(note, slow)
    return notes


def _clean(value: float) -> float | None:
    return None if math.isnan(value) else round(value, 3)


__all__ = ["SPAN", "Named", "named_servers", "slow_servers"]
