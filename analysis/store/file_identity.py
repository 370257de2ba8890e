"""Whether the files a writer's connection has open are still the files at its path.

A writer keeps writing into the inodes it opened, whatever happens to their names: a database
deleted (``rm``), moved away (``mv``) or replaced by another file (``mv other.db``, a restored
backup) under a running writer goes on taking its commits, and no reader that opens the path
ever sees them. The same holds for the ``-wal`` and ``-shm`` files beside it: a client that
deletes them (``rm *-wal``, or an SQLite client that took itself for the last one and cleaned
up) leaves the writer committing into a WAL no reader opens.

SQLite does not notice any of this. So the writer notes the identity (device and inode) of the
three files right after it opened them (``FileIdentity.at``) and compares it, once a minute,
with what is at the paths now (``changed``): ``stat`` calls on names, never an ``open`` of the
database outside SQLite (closing a descriptor of the file would drop the writer's POSIX locks,
see ``open_files.read_only_uri``). A file opened in place and rewritten (``cp backup.db
slowdown.db`` over the live file) keeps its inode and is not seen here; SQLite then reports the
damage itself when it next reads a page.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

SUFFIXES = ("", "-wal", "-shm")  # the database, its write-ahead log, its shared-memory index
Identity = tuple[int, int]  # (st_dev, st_ino)


def _identity(path: str) -> Identity | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino


@dataclass(frozen=True)
class FileIdentity:
    """The database at ``path`` and its ``-wal`` and ``-shm`` files, as they were when noted."""

    path: str  # the database's real path (a link to it is followed once, when noted)
    ids: tuple[Identity | None, ...]  # per suffix; None when that file did not exist

    @classmethod
    def at(cls, database: str | os.PathLike) -> FileIdentity:
        """The files at ``database`` now (right after a writer opened them); OSError when
        they cannot be looked at."""
        real = os.path.realpath(database)
        return cls(real, tuple(_identity(real + suffix) for suffix in SUFFIXES))

    def changed(self) -> str | None:
        """None when every file noted is still at its path; else what happened to the first
        that is not, in words (``deleted or moved away``, ``replaced by another file``,
        ``its -wal file deleted``); OSError when a path cannot be looked at."""
        for suffix, noted in zip(SUFFIXES, self.ids):
            if noted is None:
                continue
            now = _identity(self.path + suffix)
            what = f"its {suffix} file" if suffix else "the file"
            if now is None:
                return f"{what} deleted or moved away"
            if now != noted:
                return f"{what} replaced by another file"
        return None

    def same_database(self) -> bool:
        """Whether the database at the path is still the file noted (its ``-wal`` or ``-shm``
        may not be): a writer that opens it again then shares what SQLite keeps per file in
        this process with every connection to it still open here."""
        return _identity(self.path) == self.ids[0]
