"""The fleet's published copies, read for the verdict, and what a failure to read them says.

Everything here that touches the copies' filesystem runs in a child process
(``fleet_sources.database_readings`` through ``store.bounded``): a hung mount holds the
child, never the command or the service. A failure is named with its errno: a glob whose
directory cannot be read (``Transport endpoint is not connected (ENOTCONN)``) is not a glob
that names no file, and a copy that SQLite cannot read says the errno of its first read
where the system gave one (``disk I/O error: Input/output error (EIO)``).

Which of this node's targets the copies lie beside (the same filesystem) is decided from the
configuration's paths and ``/proc/self/mountinfo`` only, without a call on the copies'
filesystem: when that filesystem fails, the copies that cannot be read are evidence of its
failure, not silence (``verdict.decide``).
"""

from __future__ import annotations

import errno
import glob
import os
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from slowdown.analysis.stats.baseline import BaselineBook
from slowdown.analysis.stats.slowdown import target_slowdowns
from slowdown.analysis.stats.verdict import Peer, Reading
from slowdown.analysis.store import Selection, Store, StoreError
from slowdown.analysis.store.bounded import Note, inherited_paths
from slowdown.analysis.store.filesystem import MOUNTINFO, parse_mountinfo
from slowdown.analysis.store.records import MINUTE

# Errnos of a path that is wrong rather than of a filesystem that fails: a missing
# directory, one not allowed to this user. They are named, but are no evidence of an outage.
CONFIGURATION_ERRNOS = frozenset({errno.ENOENT, errno.ENOTDIR, errno.EACCES, errno.EPERM})
_MAGIC = frozenset("*?[")


class CopiesUnread(Exception):
    """The copies could not be listed: the one-line reason, and its errno's name (``cause``)
    when the filesystem failed (None for a path that names no file)."""

    def __init__(self, message: str, cause: str | None = None) -> None:
        super().__init__(message)
        self.cause = cause


def errno_text(exc: OSError) -> str:
    """``Transport endpoint is not connected (ENOTCONN)``"""
    name = errno.errorcode.get(exc.errno or 0, str(exc.errno))
    return f"{exc.strerror or os.strerror(exc.errno or 0)} ({name})"


def outage_cause(exc: OSError) -> str | None:
    """The errno's name when it tells of a failing filesystem (not of a wrong path)."""
    if exc.errno is None or exc.errno in CONFIGURATION_ERRNOS:
        return None
    return errno.errorcode.get(exc.errno, str(exc.errno))


def literal_directory(pattern: str) -> str:
    """The directory a glob lists: its longest leading part without glob syntax (of a
    plain path, its parent)."""
    parts = Path(os.path.abspath(os.path.expanduser(pattern))).parts
    literal = []
    for part in parts[:-1]:
        if _MAGIC & set(part):
            break
        literal.append(part)
    return str(Path(*literal)) if literal else os.sep


def copy_paths(patterns: Sequence[str], note: Note) -> list[Path]:
    """The files the globs name, in order, each once (as ``store.expand_paths``);
    ``CopiesUnread`` when a glob names none: its directory has no such file, or it cannot
    be read (with the errno)."""
    paths: dict[Path, None] = {}
    for pattern in patterns:
        expanded = os.path.expanduser(pattern)
        directory = literal_directory(pattern)
        note(f"listing {directory}")
        matches = [expanded] if os.path.isfile(expanded) else sorted(glob.glob(expanded))
        if not matches:
            try:
                with os.scandir(directory):
                    pass
            except OSError as exc:
                raise CopiesUnread(f"{pattern}: cannot read {directory}: {errno_text(exc)}",
                                   outage_cause(exc)) from None
            raise CopiesUnread(f"{pattern}: no file matches in {directory}")
        paths.update((Path(m), None) for m in matches)
    return list(paths)


@dataclass
class Gathered:
    """What the files said: each target's peers, the files left out (with their errno's
    name when the filesystem failed), how many files were read or tried, and those open in
    the parent process, left for it to read (``bounded.inherited_paths``)."""

    peers: dict[str, list[Peer]]
    unreadable: list[str] = field(default_factory=list)
    causes: list[str | None] = field(default_factory=list)
    files: int = 0
    left: list[Path] = field(default_factory=list)
    error: str | None = None  # the globs could not be listed
    cause: str | None = None

    def readings(self, source: str) -> dict[str, Reading]:
        """Each target's reading; when no file at all could be read, that is its error
        (with the errno of the first, where the system gave one)."""
        error, cause = self.error, self.cause
        if error is None and self.files and len(self.unreadable) == self.files:
            first = self.unreadable[0]
            error = (f"none of {self.files} files could be read: {first}" if self.files > 1
                     else f"the one file could not be read: {first}")
            cause = self.causes[0]
        return {t: Reading(source, tuple(p), error=error, cause=cause,
                           unreadable=tuple(self.unreadable)) for t, p in self.peers.items()}


def read_copies(patterns: Sequence[str], targets: Sequence[str],
                ops: Mapping[str, Sequence[str]], window: float, statistic: str, at: float,
                expected: str, host: str | None, note: Note, zone: tuple | None = None
                ) -> Gathered:
    """The peers in the files the globs name (``fleet_sources.database_readings`` runs this
    in a child); a file the parent has open is left to it (``Gathered.left``)."""
    found = Gathered({t: [] for t in targets})
    try:
        paths = copy_paths(patterns, note)
    except CopiesUnread as exc:
        found.error, found.cause = str(exc), exc.cause
        return found
    parents = inherited_paths()
    mine = [p for p in paths if not parents or os.path.realpath(p) not in parents]
    chosen = set(mine)
    found.left = [p for p in paths if p not in chosen]
    return gather(found, mine, targets, ops, window, statistic, at, expected, host, note,
                  zone)


def gather(found: Gathered, paths: Sequence[Path], targets: Sequence[str],
           ops: Mapping[str, Sequence[str]], window: float, statistic: str, at: float,
           expected: str, host: str | None, note: Note, zone: tuple | None = None
           ) -> Gathered:
    """Each file's peers added to ``found``; a file that cannot be read is named there."""
    for path in paths:
        note(f"reading {path}")
        found.files += 1
        try:
            for target, peer in _file_peers(path, targets, ops, window, statistic, at,
                                            expected, host, zone):
                found.peers[target].append(peer)
        except (StoreError, sqlite3.Error) as exc:
            failure = _os_failure(path)
            text = f"{path}: {exc}" if isinstance(exc, sqlite3.Error) else str(exc)
            found.unreadable.append(text + (f": {errno_text(failure)}" if failure else ""))
            found.causes.append(None if failure is None else outage_cause(failure))
    return found


def _os_failure(path: Path) -> OSError | None:
    """The system's error for a read of the file's first page, if it fails (SQLite says
    only "disk I/O error"). Run in the reading child: a descriptor opened and closed here
    drops no lock of the parent's."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        return exc
    try:
        os.pread(fd, 4096, 0)
    except OSError as exc:
        return exc
    finally:
        os.close(fd)
    return None


def _file_peers(path: Path, targets: Sequence[str], ops: Mapping[str, Sequence[str]],
                window: float, statistic: str, at: float, expected: str, me: str | None,
                zone: tuple | None = None) -> list[tuple[str, Peer]]:
    found: list[tuple[str, Peer]] = []
    with Store(path, readonly=True) as store:
        series = store.series()
        hosts = sorted({h for h, t, _ in series if t in targets and h != me})
        if not hosts:
            return found
        book = BaselineBook([store], expected, zone=zone)  # zone: the weekly one's
        for host in hosts:
            for target in targets:
                here = [o for h, t, o in series if h == host and t == target]
                if not here:
                    continue
                newest = store.latest_start(Selection(hosts=(host,), targets=(target,),
                                                      end=int(at)))
                if newest is None:
                    found.append((target, Peer(host, None, None)))
                    continue
                end = float(min(newest + MINUTE, at))
                wanted = [o for o in ops.get(target, here) if o in here] or here
                result = target_slowdowns([store], book, [target], {target: wanted}, [window],
                                          statistic, end, hosts=(host,))
                found.append((target, Peer(host, result[target][0].value, end)))
    return found


# -- where the copies lie ----------------------------------------------------------------------

def copies_beside(patterns: Iterable[str], probed: Iterable[tuple[str, str]],
                  mountinfo: Path = MOUNTINFO) -> dict[str, str]:
    """The targets (name: path) whose filesystem holds the copies' directory: the directory
    lies under the target's path, or both lie on one mount. Decided from the paths as
    written (made absolute and normal, symbolic links not followed: following them would
    touch the filesystem) and the mount table."""
    directories = [os.path.normpath(literal_directory(p)) for p in patterns]
    try:
        with open(mountinfo, encoding="utf-8", errors="surrogateescape") as f:
            mounts = [m.mount_point for m in parse_mountinfo(f)]
    except OSError:
        mounts = []
    found = {}
    for name, path in probed:
        target = os.path.normpath(os.path.abspath(os.path.expanduser(path)))
        mount = _mount_of(target, mounts)
        if any(under(d, target) or (mount is not None and mount == _mount_of(d, mounts))
               for d in directories):
            found[name] = target
    return found


def under(path: str, root: str) -> bool:
    """``path`` is ``root`` or lies under it (both absolute and normal)."""
    return root == os.sep or path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _mount_of(path: str, mounts: Sequence[str]) -> str | None:
    """The mount point ``path`` lies on: the longest one above it (the last of equals)."""
    best = None
    for point in mounts:
        if under(path, point) and (best is None or len(point) >= len(best)):
            best = point
    return best


__all__ = ["CONFIGURATION_ERRNOS", "CopiesUnread", "Gathered", "copies_beside", "copy_paths",
           "errno_text", "gather", "literal_directory", "outage_cause", "read_copies", "under"]
