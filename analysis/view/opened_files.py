"""Opening the files of a cluster view, split between processes where there are many.

Each file is opened read-only, its schema checked, and what a cluster view asks of every file
first (its series; its baselines, their histograms and how far records were removed) read in
the same visit. From ``SPLIT_FROM`` files on, forked processes (one per free CPU) open their
share of the files while this one opens its own, and send back what they read; this process
keeps a closed store for each of their files, which connects when first used (without a
second schema check: as a store released by the bound on open files, ``open_files.py``).
The files' order, the errors named and the numbers are those of one process opening them all.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Optional

from slowdown.analysis.stats.baseline import load, load_histograms
from slowdown.analysis.store import Store, StoreError, forking
from slowdown.analysis.store.retention import kept_from

# Files from which the opening is split between processes (below, a fork costs more than it
# saves), and the fewest files a process opens.
SPLIT_FROM = 64
SHARE_FROM = 32

# One file's outcome: (store or None, its series, what a cluster view reads early or None,
# the one-line error where it could not be read).
Opened = tuple[Optional[Store], list, Optional[tuple], Optional[str]]


def open_all(paths: Sequence[Path], early: bool, at: float | None,
             split: int | None = None, visit: Callable[[], Any] | None = None,
             visited: list | None = None, statistics: Sequence[str] | None = None
             ) -> list[Opened]:
    """Each of ``paths`` opened, in order (``early``: with its baselines and retention read;
    ``at``: only the baselines in force then; ``statistics``: only of those; ``split``:
    processes, this one among them, instead of one per free CPU from ``SPLIT_FROM`` files
    on). A process that fails (said on stderr) leaves its share to be opened here.
    ``visit``: makes, in each process, an object whose ``add`` is given every store it opens
    (in the same visit) and whose ``done`` ends its share; each share's ``done``, in order,
    is appended to ``visited``."""
    n = split or (min(forking.processes(), len(paths) // SHARE_FROM)
                  if len(paths) >= SPLIT_FROM else 1)
    bounds = [len(paths) * i // n for i in range(n + 1)]
    # (share, sent): this process opens the first share itself and keeps its files open
    tasks = [(paths[bounds[i]:bounds[i + 1]], i > 0) for i in range(max(n, 1))]

    def here(task: tuple) -> tuple[list[Opened], Any]:
        seeing = visit() if visit is not None else None
        got = [_open(path, early, at, seeing, statistics) for path in task[0]]
        return got, seeing.done() if seeing is not None else None

    def run(task: tuple) -> tuple[list, Any]:
        return _sent(task[0], early, at, visit, statistics) if task[1] else here(task)

    opened: list[Opened] = []
    with forking.collector_paused():
        done = forking.run_all(tasks, run, here) if n > 1 else [here(tasks[0])]
    for (share, _), (got, seen) in zip(tasks, done):
        opened += [_received(path, one) for path, one in zip(share, got)]
        if visited is not None:
            visited.append(seen)
    return opened


def _sent(paths: Sequence[Path], early: bool, at: float | None,
          visit: Callable[[], Any] | None, statistics: Sequence[str] | None
          ) -> tuple[list, Any]:
    """Each file opened and closed again, what was read kept (sent from a forked process:
    the store's state, not its connection), and what the visit saw."""
    seeing = visit() if visit is not None else None
    got = []
    for path in paths:
        store, series, read, error = _open(path, early, at, seeing, statistics)
        got.append((store.elsewhere_state() if store else None, series, read, error))
        if store is not None:
            store.close()
    return got, seeing.done() if seeing is not None else None


def _received(path: Path, got: tuple) -> Opened:
    """A file opened by ``_sent`` in another process, or by ``_open`` here."""
    state, series, read, error = got
    if isinstance(state, Store) or state is None:
        return state, series, read, error
    return Store.opened_elsewhere(path, state), series, read, error


def _open(path: Path, early: bool, at: float | None, seeing: Any = None,
          statistics: Sequence[str] | None = None) -> Opened:
    try:
        store = Store(path, readonly=True)
    except StoreError as exc:
        return None, [], None, str(exc)
    try:
        series = store.series()
    except sqlite3.DatabaseError as exc:
        store.close()
        return None, [], None, str(StoreError(f"{path}: {exc}"))
    read = _early(store, at, statistics) if early else None
    if seeing is not None:
        seeing.add(store)
    return store, series, read, None


def _early(store: Store, at: float | None, statistics: Sequence[str] | None) -> tuple | None:
    """(how far records were removed, the baselines, their histograms); None where the file
    fails to give them: then they are read when asked for, and a damaged table named then."""
    try:
        return dict(kept_from([store])), load(store, at, statistics), load_histograms(store, at)
    except (sqlite3.DatabaseError, StoreError):
        return None
