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

import os
import pickle
import sqlite3
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path

from slowdown.analysis.stats.baseline import load, load_histograms
from slowdown.analysis.store import Store, StoreError
from slowdown.analysis.store.open_files import READERS, processes
from slowdown.analysis.store.retention import kept_from

# Files from which the opening is split between processes (below, a fork costs more than it
# saves), and the fewest files a process opens.
SPLIT_FROM = 64
SHARE_FROM = 32

# One file's outcome: (store or None, its series, what a cluster view reads early or None,
# the one-line error where it could not be read).
Opened = tuple[Store | None, list, tuple | None, str | None]


def open_all(paths: Sequence[Path], early: bool, at: float | None,
             split: int | None = None) -> list[Opened]:
    """Each of ``paths`` opened, in order (``early``: with its baselines and retention
    read; ``at``: only the baselines in force then; ``split``: processes, this one among
    them, instead of one per free CPU from ``SPLIT_FROM`` files on)."""
    n = split or (min(processes(), len(paths) // SHARE_FROM) if len(paths) >= SPLIT_FROM
                  else 1)
    if n <= 1:
        return [_open(path, early, at) for path in paths]
    bounds = [len(paths) * i // n for i in range(n + 1)]
    READERS.release_all()  # the children inherit no connection (nor its descriptors)
    sys.stdout.flush()
    sys.stderr.flush()
    children = []
    for i in range(1, n):
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: it never returns
            os.close(read_end)
            _child(paths[bounds[i]:bounds[i + 1]], early, at, write_end)
        os.close(write_end)
        children.append((pid, read_end))
    try:
        opened = [_open(path, early, at) for path in paths[:bounds[1]]]
    finally:
        theirs = []
        for pid, read_end in children:
            with os.fdopen(read_end, "rb") as pipe:
                data = pipe.read()
            os.waitpid(pid, 0)
            theirs.append(pickle.loads(data) if data else None)
    for i, got in enumerate(theirs, start=1):
        share = paths[bounds[i]:bounds[i + 1]]
        if got is None:  # the process failed (said on stderr): its share opened here
            opened += [_open(path, early, at) for path in share]
            continue
        for path, (state, series, read, error) in zip(share, got):
            opened.append((Store.opened_elsewhere(path, state) if state else None, series,
                           read, error))
    return opened


def _open(path: Path, early: bool, at: float | None) -> Opened:
    try:
        store = Store(path, readonly=True)
    except StoreError as exc:
        return None, [], None, str(exc)
    try:
        series = store.series()
    except sqlite3.DatabaseError as exc:
        store.close()
        return None, [], None, str(StoreError(f"{path}: {exc}"))
    return store, series, _early(store, at) if early else None, None


def _early(store: Store, at: float | None) -> tuple | None:
    """(how far records were removed, the baselines, their histograms); None where the file
    fails to give them: then they are read when asked for, and a damaged table named then."""
    try:
        return dict(kept_from([store])), load(store, at), load_histograms(store)
    except (sqlite3.DatabaseError, StoreError):
        return None


def _child(paths: Sequence[Path], early: bool, at: float | None, write_end: int) -> None:
    status = 1
    try:
        got: list | None
        try:
            got = []
            for path in paths:
                store, series, read, error = _open(path, early, at)
                got.append((store.elsewhere_state() if store else None, series, read, error))
                if store is not None:
                    store.close()
        except Exception:  # a bug: the whole story on stderr; the parent opens them itself
            traceback.print_exc()
            sys.stderr.flush()
            got = None
        data = pickle.dumps(got, protocol=pickle.HIGHEST_PROTOCOL) if got is not None else b""
        with os.fdopen(write_end, "wb") as pipe:
            pipe.write(data)
        status = 0
    finally:
        os._exit(status)
