"""A consistent copy of a node's database in a shared directory, for cluster views.

``<dir>/<host>.db`` is always a whole database: the copy is made beside it in a temporary
file of our own (``.<host>.db.<pid>.publishing``) with SQLite's backup API (one step, one
read transaction of the live database: a snapshot, never a mix of two minutes), synced,
then renamed over the previous copy and the directory synced. A kill -9 at any moment
leaves the previous whole copy or the new whole one, and at most a temporary file, which
the next publish of this host removes (only ours: the host and a PID no longer running in
the name, our user's regular file).

The copy is a rollback-journal database, never WAL: WAL's shared memory and locks do not
cross machines, and readers on other nodes open the copy read-only and ``immutable``
(``store.open_files.read_only_uri``), which is right because a published file is never
changed in place, only replaced. It carries a ``published`` row in its ``state`` table
(host, source, when): a ``<host>.db`` without it was not made by slowdown and is never
replaced.

Failures (a directory read-only or full, a hung or failing volume) raise
:class:`PublishError` naming the path and the errno; the previous copy stays as it was. A
copy that would not fit (its size against the free space) is refused before a byte is
written, so a publish never fills the shared filesystem.

``python -m slowdown.probe.exporters.publish DATABASE DIR HOST`` publishes once and prints one JSON
line: the service runs each publish so, in a child process, which a hung shared volume can
hold without holding the service (``publish_job.py``).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import sqlite3
import stat
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from slowdown.analysis.store import schema
from slowdown.analysis.store.open_files import read_only_uri
from slowdown.probe.locks.lock_file import alive

PUBLISHED_KEY = "published"  # the row in the copy's state table that marks it as ours
TEMP_SUFFIX = ".publishing"
SPACE_MARGIN = 1 << 20  # bytes kept free beyond the copy's size
COPY_TRIES = 3  # a source that changed under an immutable read is copied again


class PublishError(Exception):
    """A publish that did not happen; the message names the path and, where known, errno."""


@dataclass(frozen=True)
class Published:
    path: Path
    bytes: int
    seconds: float


def copy_path(directory: Path, host: str) -> Path:
    """Where the copy of ``host``'s database is published."""
    return directory / f"{host}.db"


def temp_path(directory: Path, host: str, pid: int) -> Path:
    return directory / f".{host}.db.{pid}{TEMP_SUFFIX}"


def publish(database: Path, directory: Path, host: str, now: float | None = None,
            every: float | None = None) -> Published:
    """Copy ``database`` to ``<directory>/<host>.db`` (see the module docstring). ``every``,
    how often copies are made, goes into the mark: readers know how old a copy may get."""
    started = time.monotonic()
    target = copy_path(directory, host)
    refuse_foreign(target, host)
    clean_leftovers(directory, host)
    temp = temp_path(directory, host, os.getpid())
    _create(temp)  # from here on the temporary file is ours to remove
    try:
        _check_space(database, directory, temp)
        size = _copy(database, temp, host, time.time() if now is None else now, every)
        _fsync(temp)
        _os(os.rename, temp, target, what=f"cannot rename {temp} to {target}")
        _fsync_dir(directory)
    except BaseException:
        _remove_own(temp)
        raise
    return Published(target, size, time.monotonic() - started)


def published_by(path: Path) -> dict | None:
    """The ``published`` row of a copy (host, source, at), or None when the file has none
    (not a database, not ours, unreadable)."""
    uri = f"file:{quote(str(path.resolve()))}?mode=ro&immutable=1"
    try:
        conn = sqlite3.connect(uri, uri=True)
        try:
            row = conn.execute("SELECT value FROM state WHERE key = ?",
                               (PUBLISHED_KEY,)).fetchone()
        finally:
            conn.close()
        return json.loads(row[0]) if row else None
    except (sqlite3.Error, ValueError, OSError):
        return None


def refuse_foreign(target: Path, host: str) -> None:
    """A ``<host>.db`` already there must be a copy this host published, else it is left
    alone and the publish refused."""
    try:
        info = os.lstat(target)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise PublishError(f"cannot look at {target}: {_describe(exc)}") from None
    if not stat.S_ISREG(info.st_mode):
        raise PublishError(f"{target} exists and is not a regular file; not replaced (move it "
                           "away or choose another [publish] dir)")
    mark = published_by(target)
    if mark is None or mark.get("host") != host:
        whose = "" if mark is None else f" (it is a copy of host {mark.get('host')!r})"
        raise PublishError(f"{target} exists and was not published by this host{whose}; not "
                           "replaced (move it away or choose another [publish] dir)")


_LEFTOVER = re.compile(r"\.(?P<host>.+)\.db\.(?P<pid>\d+)" + re.escape(TEMP_SUFFIX)
                       + r"(-journal|-wal|-shm)?")


def clean_leftovers(directory: Path, host: str) -> list[Path]:
    """Remove this host's temporary files left by a publish that was killed: ours by name,
    by owner, and by a PID that no longer runs here. Returns what was removed."""
    removed = []
    try:
        names = os.listdir(directory)
    except OSError as exc:
        raise PublishError(f"cannot list {directory}: {_describe(exc)}") from None
    for name in names:
        match = _LEFTOVER.fullmatch(name)
        if match is None or match.group("host") != host or _running(int(match.group("pid"))):
            continue
        path = directory / name
        try:
            info = os.lstat(path)
            if stat.S_ISREG(info.st_mode) and info.st_uid == os.getuid():
                os.unlink(path)
                removed.append(path)
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise PublishError(f"cannot remove the leftover {path}: {_describe(exc)}") from None
    return removed


def _running(pid: int) -> bool:
    """Whether the publisher that named a temporary file may still write it (our own
    earlier attempt has ended)."""
    return pid != os.getpid() and alive(pid)


def _create(temp: Path) -> None:
    """The temporary file, made by us (never an existing one), so that a read-only or
    missing directory fails here with its errno."""
    fd = _os(os.open, temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
             0o644, what=f"cannot create {temp}")
    os.close(fd)


def _source_size(database: Path) -> int:
    size = 0
    for path in (database, Path(f"{database}-wal")):
        try:
            size += os.stat(path).st_size
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise PublishError(f"cannot read {path}: {_describe(exc)}") from None
    return size


def _check_space(database: Path, directory: Path, temp: Path) -> None:
    """Refuse before writing when the copy (at most the database and its WAL) cannot fit."""
    need = _source_size(database) + SPACE_MARGIN
    try:
        fs = os.statvfs(directory)
    except OSError as exc:
        raise PublishError(f"cannot look at {directory}: {_describe(exc)}") from None
    free = fs.f_bavail * fs.f_frsize
    if free < need:
        raise PublishError(f"cannot write {temp}: {os.strerror(errno.ENOSPC)} (ENOSPC): the "
                           f"copy needs about {need >> 20} MiB, {free >> 20} MiB free")


def _stamp(database: Path) -> tuple:
    """What changes when a writer touches the database: its file and whether a WAL exists."""
    info = os.stat(database)
    return (info.st_ino, info.st_size, info.st_mtime_ns, os.path.exists(f"{database}-wal"))


def _copy(database: Path, temp: Path, host: str, now: float, every: float | None) -> int:
    """Back the database up into ``temp`` as a rollback-journal database with its mark."""
    if not database.exists():
        raise PublishError(f"{database}: no such database")
    for _ in range(COPY_TRIES):
        before = _stamp(database)
        uri = read_only_uri(database)
        try:
            source = sqlite3.connect(uri, uri=True, timeout=30)
        except sqlite3.Error as exc:
            raise PublishError(f"cannot open {database}: {exc}") from None
        try:
            try:
                schema.check(source, str(database))
            except schema.SchemaError as exc:
                raise PublishError(str(exc)) from None
            copy = sqlite3.connect(temp, isolation_level=None)
            try:
                copy.execute("PRAGMA journal_mode = OFF")  # a temporary file: nothing to undo
                copy.execute("PRAGMA synchronous = OFF")  # synced whole before the rename
                source.backup(copy)  # one step: one read transaction, a consistent snapshot
            finally:
                copy.close()
            _rollback_journal_header(temp)
            copy = sqlite3.connect(temp, isolation_level=None)
            try:
                copy.execute("PRAGMA journal_mode = OFF")
                mark = {"host": host, "database": str(database), "at": now}
                if every is not None:
                    mark["every"] = every
                copy.execute("INSERT OR REPLACE INTO state (key, value, at) VALUES (?, ?, ?)",
                             (PUBLISHED_KEY, json.dumps(mark), int(now)))
            finally:
                copy.close()
        except sqlite3.Error as exc:
            raise PublishError(f"cannot write {temp}: {_sqlite_describe(exc)}") from None
        finally:
            source.close()
        # An immutable read (no writer when it began) is right only if none began meanwhile.
        if "immutable=1" not in uri or _stamp(database) == before:
            return os.path.getsize(temp)
        os.truncate(temp, 0)
    raise PublishError(f"{database} changed during {COPY_TRIES} copies; not published")


def _rollback_journal_header(temp: Path) -> None:
    """The backup copied the source's header, which says WAL (bytes 18 and 19, the file
    format's read and write versions, 2): set them to 1, a rollback-journal database, as
    ``PRAGMA journal_mode = DELETE`` would, but without opening the copy in WAL mode first
    (which would make ``-wal`` and ``-shm`` files in the shared directory). The backup wrote
    every page into the file itself (no journal, no WAL), so nothing else changes."""
    fd = _os(os.open, temp, os.O_RDWR | os.O_CLOEXEC, what=f"cannot open {temp}")
    try:
        header = os.pread(fd, 20, 0)
        if header[:16] != b"SQLite format 3\x00" or header[18:20] not in (b"\x01\x01",
                                                                          b"\x02\x02"):
            raise PublishError(f"{temp}: not an SQLite database after the backup")
        if header[18:20] == b"\x02\x02":
            _os(os.pwrite, fd, b"\x01\x01", 18, what=f"cannot write {temp}")
    finally:
        os.close(fd)


def _fsync(path: Path) -> None:
    fd = _os(os.open, path, os.O_RDONLY | os.O_CLOEXEC, what=f"cannot open {path}")
    try:
        _os(os.fsync, fd, what=f"cannot sync {path}")
    finally:
        os.close(fd)


def _fsync_dir(directory: Path) -> None:
    """The rename made durable; a filesystem that cannot sync a directory is no error."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _remove_own(temp: Path) -> None:
    for path in (temp, *(Path(f"{temp}{end}") for end in ("-journal", "-wal", "-shm"))):
        with contextlib.suppress(OSError):
            os.unlink(path)


def _os(call, *args, what: str):
    try:
        return call(*args)
    except OSError as exc:
        raise PublishError(f"{what}: {_describe(exc)}") from None


def _describe(exc: OSError) -> str:
    name = errno.errorcode.get(exc.errno or 0)
    return f"{exc.strerror or exc} ({name})" if name else str(exc)


def _sqlite_describe(exc: sqlite3.Error) -> str:
    """SQLite's words, with the errno they stand for where one does."""
    text = str(exc)
    if "disk is full" in text:
        return f"{text}: {os.strerror(errno.ENOSPC)} (ENOSPC)"
    if "readonly" in text or "read-only" in text:
        return f"{text}: {os.strerror(errno.EROFS)} (EROFS)"
    return text


def main(argv: list[str]) -> int:
    """One publish, its outcome as one JSON line (for the service's child process):
    ``DATABASE DIRECTORY HOST [EVERY]``."""
    database, directory, host, *every = argv
    try:
        done = publish(Path(database), Path(directory), host,
                       every=float(every[0]) if every else None)
    except PublishError as exc:
        print(json.dumps({"ok": False, "error": str(exc)}), flush=True)
        return 1
    print(json.dumps({"ok": True, "path": str(done.path), "bytes": done.bytes,
                      "seconds": done.seconds}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
