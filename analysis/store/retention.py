"""Retention of the tables that grow: what the service removes once an hour, and what a reader
is told when it asks for a moment whose records are gone.

Minute records are merged into hours (``Store.rollup``), never just removed. The other tables
that grow with time lose their old rows here, in one transaction: node context (per minute),
the alert log, the outbox messages already delivered or given up (an open one is never
removed, however old), and hourly records where a site asked for it. What was removed is
kept in the ``state`` table (``KEPT_FROM``), so that a reader can say "nothing is kept before
..." instead of answering from no data.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from slowdown.analysis.store.store import Store, StoreError

KEPT_FROM = "kept_from"  # state key: {table: the oldest moment whose rows are all kept}

# table -> (the column compared with the cutoff, an extra condition)
_PRUNED = {
    "node": ("start", ""),
    "alert_log": ("at", ""),
    "alert_outbox": ("done_at", " AND done_at IS NOT NULL"),
    "hours": ("start", ""),
}


@dataclass(frozen=True)
class Kept:
    """How long each table keeps its rows (seconds; None: for good)."""

    node: float | None
    alert_log: float | None
    alert_outbox: float | None  # delivered or given-up messages
    hours: float | None


def prune(store: Store, now: float, kept: Kept) -> dict[str, int]:
    """Remove the rows older than their table's retention; returns how many per table."""
    cutoffs = {table: int(now - seconds) for table, seconds in (
        ("node", kept.node), ("alert_log", kept.alert_log),
        ("alert_outbox", kept.alert_outbox), ("hours", kept.hours)) if seconds is not None}
    if "hours" in cutoffs:
        cutoffs["hours"] -= cutoffs["hours"] % 3600  # whole hours only
    removed: dict[str, int] = {}
    conn = store.conn
    conn.execute("BEGIN IMMEDIATE")
    try:
        for table, cutoff in cutoffs.items():
            column, extra = _PRUNED[table]
            removed[table] = conn.execute(
                f"DELETE FROM {table} WHERE {column} < ?{extra}", (cutoff,)).rowcount
        known = _kept_from(conn)
        known.update({t: max(c, known.get(t, c)) for t, c in cutoffs.items() if removed[t]})
        conn.execute("INSERT OR REPLACE INTO state (key, value, at) VALUES (?, ?, ?)",
                     (KEPT_FROM, json.dumps(known), int(time.time())))
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return removed


def _kept_from(conn: sqlite3.Connection) -> dict[str, int]:
    row = conn.execute("SELECT value FROM state WHERE key = ?", (KEPT_FROM,)).fetchone()
    return dict(json.loads(row[0])) if row else {}


def kept_from(stores: list[Store], known: Sequence[Mapping[str, int]] | None = None
              ) -> Mapping[str, int]:
    """The latest moment before which some file removed records (hours) or node context;
    ``known``: each store's, read already."""
    out: dict[str, int] = {}
    for i, store in enumerate(stores):
        try:
            for table, cutoff in (known[i] if known is not None
                                  else _kept_from(store.conn)).items():
                out[table] = max(cutoff, out.get(table, cutoff))
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{store.path}: {exc}") from None
    return out
