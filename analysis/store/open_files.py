"""A bound on the database files a reading process holds open, whatever the number it reads.

A cluster view reads hundreds or thousands of host files; each open SQLite connection holds a
descriptor for the file (and two more, for ``-wal`` and ``-shm``, while a writer runs), so
with ``ulimit -n 1024`` a few hundred files would fail with "unable to open database file".
Reader connections register here as they are used; past ``LIMIT`` the least recently used is
closed, and opens again, unseen by its user, when next used (from the URI of its first
open while no writer has started: ``read_only_uri``, which creates nothing beside the file).
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Protocol
from urllib.parse import quote

# Reader connections open at once: at most 3 descriptors each.
LIMIT = 4


class Releasable(Protocol):
    def release(self) -> None: ...


class OpenFiles:
    """The reader connections open in this process, least recently used first, per thread.

    Each thread has its own bound: a connection may be closed only by the thread that made it
    (SQLite's rule in Python), and the service reads from several (its metrics, its alerts).
    """

    def __init__(self, limit: int = LIMIT) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._threads: dict[int, OrderedDict[int, Releasable]] = {}
        self._pid = os.getpid()

    def _mine(self) -> OrderedDict[int, Releasable]:
        """This thread's readers (none in a forked child: its parent's are not its own)."""
        with self._lock:
            if self._pid != os.getpid():
                self._threads.clear()
                self._pid = os.getpid()
            me = threading.get_ident()
            if me not in self._threads:  # a new thread: those that ended are forgotten
                alive = {t.ident for t in threading.enumerate()}
                for gone in [t for t in self._threads if t not in alive]:
                    del self._threads[gone]
                self._threads[me] = OrderedDict()
            return self._threads[me]

    def using(self, reader: Releasable) -> None:
        """``reader`` is in use (open): this thread's oldest others are closed beyond the limit."""
        mine = self._mine()
        key = id(reader)
        if key in mine:
            mine.move_to_end(key)
            return
        mine[key] = reader
        while len(mine) > self.limit:
            _, oldest = mine.popitem(last=False)
            oldest.release()

    def release_all(self) -> None:
        """Close this thread's readers' connections (each opens again when next used): before
        a fork, so that no SQLite connection, nor its descriptors, is carried into the child."""
        mine = self._mine()
        while mine:
            _, oldest = mine.popitem(last=False)
            oldest.release()

    def forget(self, reader: Releasable) -> None:
        """``reader`` closed (by whichever thread): out of every thread's list."""
        with self._lock:
            for readers in self._threads.values():
                readers.pop(id(reader), None)

    def __len__(self) -> int:
        return len(self._mine())


READERS = OpenFiles()


def read_only_uri(path: Path) -> str:
    """The URI of a reader's connection: read-only, and creating nothing beside the file.

    A WAL database whose writer has gone has no ``-wal`` file; a read-only connection would
    create ``-wal`` and ``-shm`` files beside it (and leave them there), or fail where it may
    not write. Without a ``-wal`` file every committed page is in the file itself, so such a
    database is opened ``immutable``. The path is quoted: ``#`` and ``?`` are URI syntax.

    A rollback-journal database is a copy published to a shared directory
    (``probe/exporters/publish.py``: slowdown's own writer always uses WAL), which is never
    changed in place, only replaced by a rename: it is opened ``immutable`` too, unless a hot
    journal beside it says a writer of some other kind was interrupted. That takes no lock, so it
    reads on a network filesystem whose locks do not work (Lustre without ``flock``), and a
    reader that has it open keeps reading the whole file it opened while a newer copy
    replaces it.

    Only the names beside the file are looked at, never the file itself: this runs in the
    service too (its metrics, alerts and verdict read its own database), and a process that
    opens and closes a descriptor of the database outside SQLite drops every POSIX lock it
    holds on it, the writer's among them. The next client to close would then take itself
    for the last, checkpoint and delete the ``-wal`` and ``-shm`` files under the writer
    (SQLite's "How To Corrupt An SQLite Database File", 2.2). docs/DEVELOPERS.md states the
    rule; tests/kit/scenes/writer_locks.py holds the service to it.
    """
    resolved = path.resolve()
    uri = f"file:{quote(str(resolved))}?mode=ro"
    # The file that would hold what is not in the file itself yet (a WAL, or a hot journal):
    # none of either, nothing is missing.
    if not any(Path(f"{resolved}{pending}").exists() for pending in ("-wal", "-journal")):
        uri += "&immutable=1"
    return uri
