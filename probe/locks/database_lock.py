"""What the service checks and takes before it writes its database: a local filesystem, a
directory it may write, and the writer's lock. One writer per database.

- A database on a network or cluster filesystem (``store.filesystem``) is refused: SQLite's
  WAL keeps readers and writer in step through shared memory and locks that do not cross
  machines. ``allow_network_database = true`` lets it start there (a warning says so).
- The built-in default moved off a shared home (``config.defaults``) says where it went, and
  its directory (``/var/tmp/slowdown-<uid>``) must be this user's own, 0700 when created.
- The lock is ``<database>.lock`` beside the database (its real path: two names of one file
  share one lock), taken with ``flock`` in the service's main process, which touches the
  database's filesystem anyway (a local one, refused otherwise). It is held as long as the
  service runs; a crash or kill -9 releases it. A second service finds it held and exits 2
  naming the holder (PID, machine, since when); a lock file whose lock is free is stale and
  is taken over (the text it still holds, written by a service that did not stop cleanly, is
  said in an info line). At a clean stop the text is cleared. The lock goes with the
  database connection: when the volume fails, the service closes both (nothing of it stays
  open there, so the volume can be unmounted and repaired) and takes the lock again before
  it opens the database again; found held by another service then, it stops (exit 2).

Refusals are :class:`Refused` with a one-line message and the exit status: 2 for what only
a person can fix (another writer, a shared filesystem, a directory it may not write), 1 for
a fault that may pass (a read-only or failing volume: systemd starts the service again).
Readers take no lock and create nothing here.
"""

from __future__ import annotations

import errno
import logging
import os
import sqlite3
import stat
from collections.abc import Mapping
from pathlib import Path

from slowdown.analysis.config import Config
from slowdown.analysis.config.defaults import (
    DefaultDatabase,
    default_database_place,
    earlier_default_database,
)
from slowdown.analysis.store import schema
from slowdown.analysis.store.filesystem import filesystem_of
from slowdown.probe.locks.lock_file import UNSUPPORTED, LockFile, LockHolder

log = logging.getLogger(__name__)

EXIT_REFUSED = 2  # a person must act: restarting would not help
EXIT_FAULT = 1  # the volume may come back


class Refused(Exception):
    """The service must not start on this database; the message is one line."""

    def __init__(self, message: str, code: int = EXIT_REFUSED) -> None:
        super().__init__(message)
        self.code = code


class Held(Refused):
    """Another service holds the database's lock."""


def lock_path(database: Path) -> Path:
    """``<database>.lock``, beside the file the name leads to."""
    real = Path(os.path.realpath(database))
    return real.with_name(real.name + ".lock")


def claim_database(config: Config, since: float,
                   environ: Mapping[str, str] = os.environ) -> LockFile:
    """Check the database's place and take its lock (held until ``release``); Refused."""
    database = Path(config.database)
    place = default_database_place(environ, config.host)
    moved = database == place.path and place.moved_from is not None
    if moved:
        log.info("database %s: %s", database, place.note())
        _private_dir(database.parent)
    _check_filesystem(database, config.allow_network_database)
    try:
        database.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _cannot("create the database directory", database.parent, exc) from None
    lock = lock_database(database, config.host, since)
    _earlier_default(database, place, environ)
    return lock


def release(lock: LockFile | None) -> None:
    """At a clean stop: clear the holder's text (a text found later means a crash), unlock."""
    if lock is None:
        return
    if lock.locked and lock.writable:
        try:
            os.ftruncate(lock.fd, 0)
        except OSError as exc:
            log.debug("clearing the database lock file: %s", exc)
    lock.close()


def _check_filesystem(database: Path, allowed: bool) -> None:
    filesystem = filesystem_of(database)
    if filesystem is None or not filesystem.shared:
        return
    if not allowed:
        raise Refused(f"database {database} is on {filesystem.describe()}: SQLite's WAL needs "
                      "a local filesystem; set `database` to a local path such as "
                      "/var/lib/slowdown/slowdown.db, or `allow_network_database = true` if "
                      "only this node ever writes it")
    log.warning("database %s is on %s; allowed by allow_network_database = true: only this "
                "node may ever write it", database, filesystem.describe())


def _private_dir(directory: Path) -> None:
    """The moved default's directory: made 0700, and refused unless this user's own (a
    world-writable parent such as /var/tmp lets anyone make it first)."""
    try:
        os.mkdir(directory, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        raise _cannot("create the database directory", directory, exc) from None
    st = os.lstat(directory)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise Refused(f"{directory} is not a directory of this user's own (owner uid "
                      f"{st.st_uid}, mode {stat.filemode(st.st_mode)}); not writing the "
                      "database there: set `database` in the configuration")


def lock_database(database: Path, host: str, since: float) -> LockFile:
    """The writer's lock alone: at start, and again when the service opens the database after
    its volume failed (the lock goes with the connection: a failed volume keeps nothing of the
    service open, so it can be unmounted and repaired under it). Held when another service
    has it; Refused otherwise."""
    path = lock_path(database)
    for _ in range(3):  # again when the file was replaced between open and flock
        try:
            lock = LockFile.open(path)
        except OSError as exc:
            raise _cannot("create the lock file", path, exc) from None
        try:
            taken = lock.try_lock()
        except OSError as exc:
            if exc.errno not in UNSUPPORTED:
                lock.close()
                raise _cannot("lock", path, exc) from None
            log.warning("database %s: cannot lock %s (%s): a second service writing it would "
                        "not be noticed", database, path, os.strerror(exc.errno or 0))
            return lock
        if taken:
            break
        holder = None if lock.replaced else lock.holder()
        lock.close()
        if not lock.replaced:
            who = holder.describe() if holder is not None else "another process"
            raise Held(f"database {database} is written by {who} (it holds {path}); "
                       "stop that service first, or give this one another `database`")
    else:
        raise Refused(f"cannot lock {path}: it is being replaced; try again", EXIT_FAULT)
    previous = lock.holder()
    if previous is not None and not (previous.pid == os.getpid() and previous.here):
        log.info("database %s: lock taken over from %s, which ended without releasing it",
                 database, previous.describe())
    if lock.writable:
        try:
            lock.write(LockHolder.me("service", host, since, database=str(database)))
        except OSError as exc:  # a full volume: the lock holds all the same
            log.debug("cannot write %s: %s", path, exc)
    return lock


def _cannot(what: str, path: Path, exc: OSError) -> Refused:
    """One line for a directory or file the service cannot make: a person's mistake (2) or a
    volume's fault (1)."""
    reason = exc.strerror or str(exc)
    mistake = exc.errno in (errno.EACCES, errno.EPERM, errno.ENOTDIR, errno.ELOOP)
    hint = ("; the service writes its database, WAL, lock and live state there: give it a "
            "directory it may write (`database`)" if mistake else
            "; not starting (started again, it retries)")
    return Refused(f"cannot {what} {path}: {reason}{hint}",
                   EXIT_REFUSED if mistake else EXIT_FAULT)


def _earlier_default(database: Path, place: DefaultDatabase,
                     environ: Mapping[str, str]) -> None:
    """The default became one file per host: say where an earlier default's history is."""
    earlier = earlier_default_database(environ)
    if (database != place.path or earlier is None or earlier == database
            or database.exists() or not earlier.exists()):
        return
    log.warning("an earlier slowdown kept its database at %s; the default is now one file per "
                "host, %s: to keep that history, stop the service and move the file there "
                "(with its -wal file, if any), if this node alone wrote it", earlier, database)


def damaged(exc: BaseException) -> bool:
    """True when opening the database failed because of the file itself (damaged, foreign,
    from a newer slowdown), not because of its volume (full, read-only, I/O errors: SQLite
    reports those as OperationalError, and the service buffers until they pass)."""
    cause = exc.__cause__ or exc.__context__
    if isinstance(cause, schema.SchemaError):
        return True
    return isinstance(cause, sqlite3.DatabaseError) and not isinstance(
        cause, sqlite3.OperationalError)
