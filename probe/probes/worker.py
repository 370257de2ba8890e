"""The probe worker: a long-lived child process that does one target's filesystem calls.

Why a process of its own, started with ``subprocess``: a call stuck in a hung filesystem
cannot be interrupted. In a thread it keeps the whole service from exiting, in a
``multiprocessing`` child the parent hangs at exit waiting for it; a ``Popen`` child can be
abandoned and the service still exits at once.

Protocol, JSON lines. The service writes ``{"tick": N}`` (run the probes once) or
``{"save": true}`` (persist the md rotation position; with ``"finish": true`` first end the
round in progress, as a clean stop does) to stdin; the worker answers on
stdout, one line per finished op, in the order of the registered probes' ops
(``probes.probe_ops()``), and one at the end::

    {"tick": N, "op": "data-read", "lat": 0.00123, "at": 1763762400.5}
    {"tick": N, "op": "md-read", "err": "EIO", "msg": "...", "lat": 51.2, "at": 1763762400.6}
    {"tick": N, "end": true, "mode": "direct"}

A tick may carry ``"sent"``, the service's monotonic time when it sent it (the clock is the
machine's, one for every process). An op's line carries ``"shown"`` when the op was in flight,
as the service saw it on the shared page, longer than its timed call by more than
``HOLD_ANSWERS``: from the tick's sending (the first op: a worker stuck in taking the lock, in
opening its files or in statvfs before it) or the previous op's return, to its own. That wait
was shown as the op stuck; the service records the op with it (SPEC: its full latency).

Once a minute the end line also carries the workspace filesystem's free space and inodes
(``"space": {"bytes_free", "bytes", "files_free", "files"}``): a full filesystem fails every
user's write while the probe, which only overwrites blocks it has, would read healthy.

An op's line also names the server that served it (``"server"``: a GlusterFS brick, a Ceph
OSD, ``unknown`` where the filesystem cannot say; ``probes/where.py``), looked up after the
op returned: the lookup is neither in the op's latency nor in its ``shown`` wait.

``at`` is the wall time the op returned: the service files a result under that minute. A
failed op carries ``lat`` too when it was attempted (how long the call took to fail): an op
that hung and then failed (ENOTCONN after a server's ping-timeout) was that slow. A
run's lines are held and written together when it ends: one wake-up of the service's reader
thread per tick, not seven. A run that lasts longer than ``HOLD_ANSWERS`` seconds writes what
it holds and then each line as its op returns, so that after a hang the service learns of
the result when the op returns. Which op is in flight and since when, the worker keeps in a
page shared with the service (``probes/worker_position.py``), updated after every op.

After the last op a run may still call the filesystem (the md round's status file, closing
descriptors declared dead, looking for a workspace gone). A call hung there keeps the next
run from starting: the page says every op is done and the run not ended, the service shows
the next run's first op in flight since the last op returned (and abandons a worker stuck
there), and the end line carries ``"after"``, the seconds from the last op's line to the
end, when longer than ``HOLD_ANSWERS``. The page's count goes one past the ops when the run
has ended.

End of stdin ends the worker. SIGUSR1 says the service has abandoned this worker (it was
stuck and another took over): the op in flight is still reported when it returns, the rest
of the run is skipped (so two workers never rotate the same md pool at once) and the worker
exits. This module imports nothing heavy: it starts in a few milliseconds and stays small.

The worker also holds its workspace's lock (``locks/workspace_lock.py``: one service per
workspace), taken when it starts and before each run until held; it says what it found in a
line of its own, ``{"lock": "ok" | "wait" | "held" | "none", ...}``, and while another
service holds the workspace it runs no probe (every op of a run is skipped).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from slowdown.probe.layout.fs_counts import free_inodes
from slowdown.probe.layout.path_safety import check_workspace
from slowdown.probe.locks.workspace_lock import WorkspaceLock
from slowdown.probe.probes import Probe, Result, error_of, probe_ops, registered
from slowdown.probe.probes.where import Where
from slowdown.probe.probes.worker_position import Progress

Emit = Callable[[dict[str, Any]], None]
HOLD_ANSWERS = 0.25  # seconds a run's answers are held to go out in one write
SPACE_EVERY = 60.0  # seconds between two looks at the workspace filesystem's free space
# Errors that say an open descriptor is dead for good (the client evicted and remounted, a FUSE
# server gone, a stale NFS handle): the probe is let go and opened anew at the next tick.
DEAD_HANDLES = frozenset({"ENOTCONN", "ESHUTDOWN", "ESTALE", "EBADF", "ECONNABORTED"})


class Abandoned(Exception):
    """The service gave up on this worker; finish the op in flight, skip the rest."""


_abandoned = False


def _on_abandon(_signum: int, _frame: object) -> None:
    global _abandoned
    _abandoned = True


class Probes:
    """Every registered probe of one workspace, opened lazily so that a hung open counts as
    in flight."""

    def __init__(self, workspace: Path, sync: bool = False) -> None:
        self.workspace = workspace
        self.sync = sync
        self.kinds = registered()
        self.ops = probe_ops()
        self.opened: list[Probe | None] = [None] * len(self.kinds)
        self.claim = WorkspaceLock.from_environ(workspace)
        self.where = Where(workspace)  # which server served each op
        self._space_at = -SPACE_EVERY  # monotonic time of the last statvfs

    def space(self) -> dict[str, int | None] | None:
        """The workspace filesystem's free and total bytes and inodes, as an unprivileged
        user may use them (``statvfs``), at most once every ``SPACE_EVERY`` seconds, else
        None. Taken before the run's first op, outside the timed calls: a hang here shows as
        that op stuck. A count the filesystem does not know is None (ceph-fuse answers -1
        free inodes beside the count of files in use; some say 0 of 0: layout/fs_counts.py)."""
        now = time.monotonic()
        if now - self._space_at < SPACE_EVERY:
            return None
        self._space_at = now
        try:
            st = os.statvfs(self.workspace)
        except OSError:
            return None
        files_free = free_inodes(st)
        return {"bytes_free": st.f_bavail * st.f_frsize, "bytes": st.f_blocks * st.f_frsize,
                "files_free": files_free,
                "files": st.f_files if files_free is not None else None}

    def _open(self) -> None:
        """Open each probe not open yet, the last registered first: the md probe, which
        checks that preparation finished, before the data probe opens its files."""
        if None in self.opened:  # never through a symlink, nor another's
            check_workspace(self.workspace)
        for n in reversed(range(len(self.kinds))):
            if self.opened[n] is None:
                self.opened[n] = self.kinds[n].open(self.workspace, sync=self.sync)

    def __getattr__(self, name: str) -> Probe | None:
        """An open probe by its name (``probes.data``), None while it is not open."""
        kinds = self.__dict__.get("kinds", ())
        for kind, probe in zip(kinds, self.__dict__.get("opened", ())):
            if kind.name == name:
                return probe
        raise AttributeError(name)

    def _mode(self) -> str | None:
        """How the probes bypass the cache (the data probe's mode), None when none is open."""
        return next((p.mode for p in self.opened if p is not None and p.mode), None)

    def claim_workspace(self, emit: Emit) -> bool:
        """Take the workspace's lock if not held yet; False while another service holds it."""
        said = self.claim.claim()
        if said:
            emit(said)
        return not self.claim.refused

    def tick(self, tick: int, emit: Emit) -> None:
        if not self.claim_workspace(emit):  # another service probes this workspace
            for op in self.ops:
                emit({"tick": tick, "op": op, "skip": True})
            emit({"tick": tick, "end": True, "mode": None})
            return
        t0 = time.perf_counter()
        try:
            self._open()
        except Exception as exc:  # workspace missing, EIO on open, ...: every op failed
            err, msg = error_of(exc)
            waited = {"lat": time.perf_counter() - t0}  # the first op's: it showed in flight
            for n, op in enumerate(self.ops):
                emit({"tick": tick, "op": op, "err": err, "msg": msg,
                      **(waited if n == 0 else {})})
            emit({"tick": tick, "end": True, "mode": None})
            return
        space = self.space()
        reported: set[str] = set()
        missing = False
        dead = False

        def report(result: Result) -> None:
            nonlocal missing, dead
            message: dict[str, Any] = {"tick": tick, "op": result.op}
            if result.err is not None:
                message["err"] = result.err
                message["msg"] = result.msg
                missing = missing or result.missing
                dead = dead or result.err in DEAD_HANDLES
            if result.lat is not None:  # also with an error: how long it took to fail
                message["lat"] = result.lat
            elif result.err is None:  # not attempted: the object was missing
                message["skip"] = True
            if not message.get("skip"):  # after the op, outside its timing and its wait
                returned = time.monotonic()
                message["server"] = self.where.server(result.op, result.where)
                mark = getattr(emit, "returned", None)
                if mark is not None:
                    mark(returned)
            emit(message)
            reported.add(result.op)
            if _abandoned:
                raise Abandoned

        try:
            for n, probe in enumerate(self.opened):
                if probe is None:
                    continue
                dead = False
                try:
                    probe.step(report)
                except Abandoned:
                    raise
                except Exception as exc:  # a bug or a broken pool: report what was not
                    err, msg = error_of(exc)
                    dead = dead or err in DEAD_HANDLES
                    for op in probe.ops:
                        if op not in reported:
                            emit({"tick": tick, "op": op, "err": err, "msg": msg})
                if dead:
                    self._reopen_next(n)
            if missing:
                self._forget_if_gone()
        except Abandoned:
            for op in self.ops:
                if op not in reported:
                    emit({"tick": tick, "op": op, "skip": True})
        emit({"tick": tick, "end": True, "mode": self._mode(),
              **({"space": space} if space is not None else {})})

    def _reopen_next(self, n: int) -> None:
        """Let go of probe ``n``, whose open files the filesystem declared dead: the next
        tick opens them anew, as a user's next command would. A client evicted and remounted
        (CephFS), a FUSE server restarted or an NFS file handle gone stale answers every call
        on a descriptor of before with that error for good, while the files, opened again,
        answer; kept, the probe would report errors users do not see."""
        probe = self.opened[n]
        self.opened[n] = None
        if probe is not None:
            with contextlib.suppress(Exception):  # where it is (the md rotation), if it can
                probe.save()
            with contextlib.suppress(Exception):  # closing a dead descriptor may fail too
                probe.close()

    def _forget_if_gone(self) -> None:
        """After an op found no file: if the workspace itself is gone, let go of the open
        probes too (an unlinked data file would go on answering), so that every op fails
        until the workspace is back."""
        if os.path.isdir(self.workspace):
            return  # one object missing: the md probe heals it
        for probe in self.opened:
            if probe is not None:
                probe.close()
        self.opened = [None] * len(self.kinds)
        self.claim.release()

    def save(self, finish: bool = False) -> None:
        """Persist where each probe is (the md position); `finish`: first end the round in
        progress (a clean stop, so md-workbench continues from the exact round)."""
        for probe in self.opened:
            if probe is not None:
                probe.save(finish=finish and not self.claim.refused)


class Answers:
    """The worker's stdout: a run's lines in one write at its end, unless the run is slow;
    its position in the shared page after each op."""

    def __init__(self, out: TextIO, progress: Progress | None, born: float = 0.0) -> None:
        self._out = out
        self._born = born  # monotonic time this worker began its work (its imports done)
        self._progress = progress
        self._held: list[str] = []
        self._tick = 0
        self._done = 0
        self._started = 0.0
        self._since = 0.0  # when the op in flight began to be shown so
        self._returned: float | None = None  # when the op about to be said returned

    def start(self, tick: int, sent: object = None) -> None:
        """A run begins; `sent`: when the service sent its tick (monotonic), if it says: a
        tick read late (this worker was stuck before it, in the workspace's lock) was in flight
        since then, though not before this worker began (its interpreter's start is no wait on
        the filesystem)."""
        now = time.monotonic()
        ok = isinstance(sent, (int, float)) and not isinstance(sent, bool) and sent <= now
        self._tick, self._done = tick, 0
        self._started = self._since = max(float(sent), self._born) if ok else now  # type: ignore[arg-type]
        if self._progress is not None:
            self._progress.set(tick, 0, self._started)

    def returned(self, at: float) -> None:
        """The next op said returned at ``at`` (monotonic): what the worker did since (the
        lookup of its server) is no part of its wait."""
        self._returned = at

    def __call__(self, message: dict[str, Any]) -> None:
        now = time.monotonic()
        returned, self._returned = self._returned, None
        if "op" in message:
            message["at"] = time.time() - (now - returned if returned is not None else 0.0)
            if message.get("tick") == self._tick:
                shown = (returned if returned is not None else now) - self._since
                if not message.get("skip") and shown - message.get("lat", 0.0) > HOLD_ANSWERS:
                    message["shown"] = shown
                self._since = now
                self._done += 1
                if self._progress is not None:
                    self._progress.set(self._tick, self._done, now)
        elif message.get("end") and message.get("tick") == self._tick:
            if now - self._since > HOLD_ANSWERS:
                message["after"] = now - self._since  # hung after the last op
            if self._progress is not None:  # one more than the ops: the run has ended
                self._progress.set(self._tick, self._done + 1, now)
        self._held.append(json.dumps(message, separators=(",", ":")))
        if "op" not in message or now - self._started > HOLD_ANSWERS or _abandoned:
            self.send()

    def send(self) -> None:
        """Write the lines held, in one write."""
        if self._held:
            self._out.write("\n".join(self._held) + "\n")
            self._out.flush()
            self._held.clear()


def main() -> int:
    workspace = Path(sys.argv[1])
    progress = None
    if len(sys.argv) > 3 and sys.argv[2] == "--progress-fd":
        progress = Progress.attach(int(sys.argv[3]))
    born = time.monotonic()
    probes = Probes(workspace, sync="--sync" in sys.argv[2:])
    emit = Answers(sys.stdout, progress, born)

    signal.signal(signal.SIGUSR1, _on_abandon)
    probes.claim_workspace(emit)
    for line in sys.stdin:
        if _abandoned:
            break
        try:
            command = json.loads(line)
        except ValueError:
            continue
        if "tick" in command:
            emit.start(int(command["tick"]), command.get("sent"))
            probes.tick(int(command["tick"]), emit)
            if _abandoned:
                break
        elif command.get("save"):
            try:
                probes.save(finish=bool(command.get("finish")))
                emit({"saved": True})
            except Exception as exc:
                err, msg = error_of(exc)
                emit({"saved": False, "err": err, "msg": msg})
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (BrokenPipeError, KeyboardInterrupt):
        os._exit(0)
