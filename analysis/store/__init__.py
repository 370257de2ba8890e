"""The SQLite store: one file per node, minute and hour records, read back merged.

``records`` defines what is kept per (host, target, op, minute); ``schema`` the tables and
their forward migrations; ``store`` writes a minute in one transaction, rolls old minutes up
into hours and reads any selection of hosts, targets, ops and files as one merged aggregate;
``window`` is the one definition of a window's aggregate (records counted by their overlap).
Depends only on ``histogram``.
"""

from __future__ import annotations

from slowdown.analysis.store.store import (
    Selection,
    Store,
    StoreError,
    aggregate,
    aggregate_rows,
    derived,
    expand_paths,
)

__all__ = [
    "Selection",
    "Store",
    "StoreError",
    "aggregate",
    "aggregate_rows",
    "derived",
    "expand_paths",
]
