"""One service per workspace: ``<workspace>/service.lock``, held by the target's probe worker.

Two services probing one workspace (another database on the same host and target path, or
another node with the same host name) would rotate one md pool and write one data file
together. The lock says which service probes it: ``flock`` on ``service.lock`` in the
workspace (``locks/lock_file.py``), naming the service (PID, host, machine, since, database) and the
worker that holds it.

Who takes it, where: the target's worker process, never the service. Opening a file in the
workspace may hang for as long as the target's filesystem does; in the worker that counts
as a probe in flight (the service abandons a worker stuck too long and starts another),
while in the service it would stop the ticks of every target, the watchdog and the exit.
The worker tries when it starts (the service waits a few seconds for the answers before it
reports ready: a second service exits 2 before it writes anything) and again before each
run of the probes until it holds the lock; a workspace not prepared yet (no MANIFEST) is not
locked, nor created. The worker tells the service what it found, one line on its pipe, once
per change: ``{"lock": "ok" | "wait" | "held" | "none", "msg": ..., "holder": {...}}``.

- ``held``: another service (or ``slowdown-probe cleanup``) holds it: the worker runs no
  probe, and the service exits 2 naming the holder.
- ``wait``: the holder is one of this service's own workers, abandoned while stuck in the
  filesystem (it holds the lock until its call returns; the service starts the replacement
  with ``successor`` set), or a worker left stuck by a service that has since ended (its
  PID runs no more, on this machine and boot). The workspace is not probed by another
  service: the new worker probes, and takes the lock when the stuck one lets go.
- ``none``: not locked and nothing to wait for: not prepared yet, or the filesystem has no
  ``flock`` (Lustre without ``-o flock``: said once, probing goes on unlocked).

A stuck worker in D state keeps the lock beyond its service's end; a service started again
meanwhile sees ``wait`` (the service named in the file has ended) and probes on.

Cleanup takes the same lock for as long as it removes files (``hold_for_cleanup``), so a
service starting meanwhile is refused, and a running service makes cleanup refuse. The lock
file is listed in the MANIFEST's ``state_files`` and removed with them, while held.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from slowdown.probe.layout.names import LOCK_NAME, MANIFEST_NAME
from slowdown.probe.locks.lock_file import UNSUPPORTED, LockFile, LockHolder, alive

OWNER_ENV = "SLOWDOWN_WORKSPACE_OWNER"  # the service, for its workers: JSON


def owner_environ(host: str, since: float, database: str, *, successor: bool) -> dict[str, str]:
    """What the service hands a worker so that it can name the service in the lock."""
    owner = {"pid": os.getpid(), "host": host, "since": since, "database": database,
             "successor": successor}
    return {OWNER_ENV: json.dumps(owner)}


def holder_text(holder: LockHolder | None) -> str:
    """Who, in words, with the database of a service."""
    if holder is None:
        return "a process that does not say who it is"
    database = holder.extra.get("database")
    return holder.describe() + (f" (database {database})" if database else "")


class WorkspaceLock:
    """The worker's hold on its workspace's lock (nothing at all without an owner)."""

    def __init__(self, workspace: Path, owner: Mapping[str, Any] | None) -> None:
        self.workspace = Path(workspace)
        self.owner = dict(owner) if owner else None
        self.lock: LockFile | None = None
        self.owned = False
        self.refused = False  # another service probes this workspace
        self._said: tuple | None = None

    @classmethod
    def from_environ(cls, workspace: Path,
                     environ: Mapping[str, str] = os.environ) -> WorkspaceLock:
        try:
            owner = json.loads(environ.get(OWNER_ENV, ""))
        except ValueError:
            owner = None
        return cls(workspace, owner if isinstance(owner, dict) else None)

    def claim(self) -> dict[str, Any] | None:
        """Try to hold the lock (again); what to tell the service when that changed."""
        if self.owner is None or self.owned:
            return None
        try:
            state, holder, note = self._try()
        except Exception as exc:  # EIO, a symlinked workspace, ...: the probes will say it
            self._drop()
            state, holder, note = "none", None, f"cannot lock the workspace: {exc}"
        self.refused = state == "held"
        key = (state, holder.pid if holder else None, holder.since if holder else None)
        if key == self._said:
            return None
        self._said = key
        message: dict[str, Any] = {"lock": state, "msg": note}
        if holder is not None:
            message["holder"] = holder.to_dict()
        return message

    def _try(self) -> tuple[str, LockHolder | None, str]:
        owner = self.owner or {}
        for _ in range(3):
            if self.lock is None:
                if not self._prepared():
                    return "none", None, "not prepared yet: not locked"
                self.lock = LockFile.open(self.workspace / LOCK_NAME, hold_read_only=True)
            try:
                taken = self.lock.try_lock()
            except OSError as exc:
                if exc.errno not in UNSUPPORTED:
                    raise
                self.owned = True  # nothing more to try
                return "none", None, (f"cannot lock {self.workspace / LOCK_NAME} "
                                      f"({os.strerror(exc.errno or 0)}): a second service on "
                                      "this workspace would not be noticed")
            if taken:
                previous = self.lock.holder()
                self.owned = True
                if self.lock.writable:
                    me = LockHolder.me("service", str(owner.get("host", "")),
                                   float(owner.get("since", 0.0)), pid=int(owner.get("pid", 0)),
                                   worker=os.getpid(), database=owner.get("database"))
                    with contextlib.suppress(OSError):  # the lock holds all the same
                        self.lock.write(me)
                return "ok", previous, "locked"
            if not self.lock.replaced:
                break
            self._drop()
        else:
            return "none", None, "the lock file is being replaced; trying again"
        holder = self.lock.holder() if self.lock is not None else None
        if holder is None:
            if owner.get("successor"):
                return "wait", None, "held, presumably by a stuck worker of this service"
            return "held", None, "held by " + holder_text(None)
        worker = holder.extra.get("worker")
        if holder.here and holder.pid == os.getppid() and holder.since == owner.get("since"):
            return "wait", holder, (f"held by worker PID {worker} of this service, stuck; "
                                    "taken when it lets go")
        if holder.here and not alive(holder.pid):
            return "wait", holder, (f"held by worker PID {worker}, left stuck in the filesystem "
                                    f"by the service PID {holder.pid}, which has ended; taken "
                                    "when it lets go")
        return "held", holder, "held by " + holder_text(holder)

    def _prepared(self) -> bool:
        """A workspace of ours with a MANIFEST: only then is a lock file made in it."""
        from slowdown.probe.layout.path_safety import check_workspace

        check_workspace(self.workspace)
        try:
            st = os.lstat(self.workspace / MANIFEST_NAME)
        except FileNotFoundError:
            return False
        return (st.st_mode & 0o170000) == 0o100000  # a regular file

    def _drop(self) -> None:
        if self.lock is not None:
            self.lock.close()
        self.lock = None
        self.owned = False

    def release(self) -> None:
        """Let go (the workspace went away): claimed again before the next probes."""
        self._drop()
        self._said = None


def hold_for_cleanup(ws_fd: int, workspace: Path, host: str) -> LockFile | None:
    """The workspace's lock, for cleanup to hold while it removes files: None when the
    filesystem has no flock; WorkspaceInUseError when a service (or its stuck worker) holds
    it."""
    from slowdown.probe.layout.errors import WorkspaceInUseError

    for _ in range(3):
        lock = LockFile.open(LOCK_NAME, dir_fd=ws_fd)
        try:
            taken = lock.try_lock()
        except OSError as exc:
            lock.close()
            if exc.errno in UNSUPPORTED:
                return None
            raise
        if taken:
            if lock.writable:
                with contextlib.suppress(OSError):
                    lock.write(LockHolder.me("cleanup", host))
            return lock
        holder = None if lock.replaced else lock.holder()
        lock.close()
        if not lock.replaced:
            raise WorkspaceInUseError(f"{workspace} is in use by {_in_use(holder)}; stop "
                                      "that first, then run cleanup again")
    raise WorkspaceInUseError(f"{workspace}: its lock file is being replaced; try again")


def in_use(workspace: Path) -> LockHolder | str | None:
    """Who holds the workspace's lock (a LockHolder, or words when its file names nobody); None
    when nobody does. Creates nothing."""
    try:
        lock = LockFile.open(workspace / LOCK_NAME, create=False)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return None
        raise
    try:
        try:
            if lock.try_lock():
                return None
        except OSError as exc:
            if exc.errno in UNSUPPORTED:
                return None
            raise
        return lock.holder() or holder_text(None)
    finally:
        lock.close()


def _in_use(holder: LockHolder | None) -> str:
    if holder is not None and holder.what == "service" and holder.here and not alive(holder.pid):
        return (f"worker PID {holder.extra.get('worker')}, left stuck in the filesystem by the "
                f"service PID {holder.pid}, which has ended")
    return holder_text(holder)


def refusal(workspace: Path, holder: LockHolder | str) -> str:
    """The cleanup refusal for what ``in_use`` found."""
    who = holder if isinstance(holder, str) else _in_use(holder)
    return f"{workspace} is in use by {who}; stop that first, then run cleanup again"
