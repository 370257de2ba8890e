"""Lock files a crash releases, and who holds them.

A lock is ``flock(LOCK_EX | LOCK_NB)`` on a small file that says who holds it, as JSON::

    {"what": "service", "pid": 4242, "host": "node17", "node": "node17.cluster",
     "boot": "2f18e808-...", "since": 1763762400.5, ...}

``host`` is the configuration's host name (what names workspaces and records), ``node`` the
machine's own name and ``boot`` its boot id: with them a holder on another machine is told
apart from one here, where its PID means something. The kernel releases the lock when the
holder's last descriptor closes, at exit or kill -9 alike; the file stays, and a file whose
lock is free is stale: it is taken over, and what it said is handed back for the log. The
file is never unlinked by its holder (an unlink races with a process about to lock the old
file); cleanup removes a workspace's while holding it. A locker checks after ``flock`` that
the name still leads to the file it locked, so it never holds a lock on a removed file.

The text is written in one ``pwrite``, padded to a size that does not change, so a reader
sees it whole or reads again. This module imports nothing heavy: the probe worker uses it.
"""

from __future__ import annotations

import datetime as dt
import errno
import fcntl
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slowdown.analysis.machine import boot_id

TEXT_SIZE = 1024  # the holder's JSON is padded with spaces to at least this size
_FLAGS = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
# flock refused by the filesystem itself (Lustre mounted without -o flock, some FUSE servers)
UNSUPPORTED = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL)


def _same(a: int, b: int) -> bool:
    sa, sb = os.fstat(a), os.fstat(b)
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def utc(wall: float) -> str:
    return dt.datetime.fromtimestamp(wall, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


@dataclass(frozen=True)
class LockHolder:
    """Who holds (or held) a lock."""

    what: str  # "service", "cleanup"
    pid: int
    host: str
    node: str
    boot: str
    since: float
    extra: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)

    @classmethod
    def me(cls, what: str, host: str, since: float | None = None, *, pid: int | None = None,
           **extra: Any) -> LockHolder:
        return cls(what, os.getpid() if pid is None else pid, host, os.uname().nodename,
                   boot_id(), time.time() if since is None else since, extra)

    @classmethod
    def from_dict(cls, data: object) -> LockHolder | None:
        if not isinstance(data, dict):
            return None
        try:
            known = {"what": str(data["what"]), "pid": int(data["pid"]),
                     "host": str(data["host"]), "node": str(data.get("node", data["host"])),
                     "boot": str(data.get("boot", "")), "since": float(data["since"])}
        except (KeyError, TypeError, ValueError):
            return None
        extra = {k: v for k, v in data.items() if k not in known}
        return cls(**known, extra=extra)

    def to_dict(self) -> dict[str, Any]:
        return {"what": self.what, "pid": self.pid, "host": self.host, "node": self.node,
                "boot": self.boot, "since": self.since, **self.extra}

    @property
    def here(self) -> bool:
        """On this machine, this boot: its PID can be looked up."""
        return bool(self.boot) and self.boot == boot_id()

    def describe(self) -> str:
        """``the service PID 4242 on node17 since 2025-11-24 05:54:12 UTC``."""
        where = self.node if self.host == self.node else f"{self.node} (host {self.host})"
        name = "slowdown-probe cleanup" if self.what == "cleanup" else f"the {self.what}"
        return f"{name} PID {self.pid} on {where} since {utc(self.since)}"


def alive(pid: int) -> bool:
    """Whether a process of this machine with that PID still runs slowdown (a PID taken
    again by another program counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's: it exists
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"slowdown" in f.read()
    except OSError:
        return True  # cannot tell (hidepid): count it as running


class LockFile:
    """An open lock file. ``try_lock`` takes the lock when free; closing releases it."""

    def __init__(self, fd: int, name: str, dir_fd: int | None = None) -> None:
        self.fd = fd
        self.name = name
        self.dir_fd = dir_fd
        self.writable = True
        self.locked = False
        self.replaced = False  # try_lock found the name leading to another file
        self.held_read_only = False  # written through a descriptor of its own (``open``)

    @classmethod
    def open(cls, path: Path | str, *, dir_fd: int | None = None,
             create: bool = True, hold_read_only: bool = False) -> LockFile:
        """Open (create, 0644) the lock file; never through a symlink. A lock file that exists
        but cannot be written (a read-only volume) is opened for reading: flock works on it,
        only the holder's text cannot be written. OSError otherwise.

        ``hold_read_only``: the descriptor that holds the lock is opened for reading only, and
        the holder's text written through another, closed at once (a flock belongs to its
        own open file, so that close leaves it held): a file kept open for writing on a probed
        filesystem would make its admin's ``mount -o remount,ro`` fail ("busy"). Where
        ``flock`` refuses a read-only descriptor (NFS emulates it with POSIX locks: EBADF),
        ``try_lock`` opens it for writing after all."""
        name = os.fspath(path)
        flags = _FLAGS if create else _FLAGS & ~os.O_CREAT
        if hold_read_only:
            flags = flags & ~os.O_RDWR | os.O_RDONLY
        try:
            fd = os.open(name, flags, 0o644, dir_fd=dir_fd)
            lock = cls(fd, name, dir_fd)
            lock.held_read_only = hold_read_only
        except OSError as exc:
            if exc.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
                raise
            try:
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
            except FileNotFoundError:
                raise exc from None  # could not be made: say why
            lock = cls(fd, name, dir_fd)
            lock.writable = False
        return lock

    def try_lock(self) -> bool:
        """Take the lock if it is free; False when another holds it. OSError (errno in
        ``UNSUPPORTED``) when the filesystem has no flock. After taking it, False too when
        the name no longer leads to this file (removed meanwhile: open it again)."""
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                return False
            if exc.errno != errno.EBADF or not self.held_read_only:
                raise
            self._reopen_for_writing()  # a flock emulated by POSIX locks (NFS)
            return self.try_lock()
        if not self.still_here():
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            self.replaced = True
            return False
        self.locked = True
        return True

    def still_here(self) -> bool:
        """Whether the name still leads to the file this holds open (not removed, not
        replaced by another)."""
        mine = os.fstat(self.fd)
        try:
            st = os.stat(self.name, dir_fd=self.dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return False
        return (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)

    def holder(self, tries: int = 5) -> LockHolder | None:
        """Who the file says holds it (None when it says nothing readable)."""
        for attempt in range(tries):
            try:
                data = os.pread(self.fd, 1 << 16, 0)
            except OSError:
                return None
            if not data.strip():
                return None
            try:
                return LockHolder.from_dict(json.loads(data))
            except ValueError:
                if attempt + 1 < tries:
                    time.sleep(0.01)  # met a write half done
        return None

    def write(self, holder: LockHolder) -> None:
        """Say who holds the lock (one write of the whole padded text)."""
        text = json.dumps(holder.to_dict(), separators=(",", ":")).encode().ljust(TEXT_SIZE)
        fd = self.fd
        if self.held_read_only:
            fd = os.open(self.name, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC,
                         dir_fd=self.dir_fd)
        try:
            if fd != self.fd and not _same(fd, self.fd):
                return  # replaced meanwhile: not the file held
            os.pwrite(fd, text, 0)
            if os.fstat(fd).st_size > len(text):  # after a longer text (a long path)
                os.ftruncate(fd, len(text))
        finally:
            if fd != self.fd:
                os.close(fd)

    def _reopen_for_writing(self) -> None:
        fd = os.open(self.name, _FLAGS & ~os.O_CREAT, dir_fd=self.dir_fd)
        os.close(self.fd)
        self.fd, self.held_read_only = fd, False

    def close(self) -> None:
        """Release the lock (and the file)."""
        fd, self.fd = self.fd, -1
        self.locked = False
        if fd >= 0:
            os.close(fd)
