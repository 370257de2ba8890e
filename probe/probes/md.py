"""The metadata probe: MD-Workbench's object rotation, one object per tick.

Layout (layout/md_pool_layout.py, as MD-Workbench lays out its objects): data set `d` is
`<pool>/0_<d>`, object `i` in it `<pool>/0_<d>/file-<i>`. Precreate makes file-0 .. file-(P-1) in
every data set, object index outer, data set inner (run_precreate).

Rotation (run_benchmark with one rank): round `f` visits data sets 0..D-1 and, in data set `d`,
stats, reads and deletes the oldest object file-<f> and creates file-<f+P>. The probe does one
object per tick, so its position is a step `k`: data set `k % D`, object `k // D`, and the new
object `k // D + P`. After `k` steps each data set holds exactly P objects (a window of P
consecutive indices), and every data set is visited once per D ticks.

The timed system calls are md-workbench's (IOR's POSIX backend): stat; open(O_RDONLY), lseek,
read, close; unlink; open(O_RDWR|O_CREAT), lseek, write, close, with md-workbench's object
content (layout/md_content.py). What differs, and what it costs, is in docs/PROBES.md (O_NOFOLLOW
and O_CLOEXEC on both opens; a missing object's successor is still created, so the pool
heals).

Position: the status file (the workspace's `md-workbench.status`, md-workbench's run-info
format, see manifest.py) always names a round md-workbench can continue from without an error:
it is written once per round, after the timed ops of the round's last step (probes/md_resume.py says
why that round is the next one). A clean stop finishes the round (`finish_round`) and writes the
exact one. After a crash the next start moves on to the first object that still exists and
repairs what the crashed step left (probes/md_resume.py), so no object is skipped, none is visited
twice, and md-workbench finds every object it reads.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Callable
from pathlib import Path
from time import perf_counter_ns
from typing import NamedTuple, Optional

from slowdown.analysis.words import MD_OPS
from slowdown.probe.layout.manifest import ManifestError, read_manifest
from slowdown.probe.layout.md_content import object_content
from slowdown.probe.layout.md_pool_layout import OBJECT_RE, PoolLayout, object_index
from slowdown.probe.layout.md_status import read_status_full, write_status
from slowdown.probe.layout.names import STATUS_NAME, tmp_name
from slowdown.probe.probes import MD_POOL, Place, Probe, Report, Result, md_resume

__all__ = ["OBJECT_RE", "PROBE", "MdPoolProbe", "MdProbe", "MdStep", "PoolLayout", "object_index"]

MD_STAT, MD_READ, MD_DELETE, MD_WRITE = MD_OPS

_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
_CREATE_FLAGS = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
_NS = 1e-9
MAX_STALE = 1024


OnOp = Callable[[str, Optional[float], int], None]
"""Called after each op of a step: (op name, seconds, errno or 0); (op, None, 0) for an op
not attempted."""


class MdStep(NamedTuple):
    """One step's outcome: seconds per attempted op, errno per op that did not succeed, ops
    not attempted.

    A failed op still has its latency (the time until it failed). `skipped` ops (md-read and
    md-delete after md-stat found the object missing) have neither: as in md-workbench, a
    missing object is one failed op.
    """

    step: int
    latencies: dict
    errors: dict
    skipped: tuple


class MdProbe:
    """The rotation over one pool; `step()` does one object, timing each op separately.

    Not thread-safe; meant to live in the per-target worker process. `status_path` is where
    the position is written (None: positions are not persisted); `saved_pos` is the round
    the status file names now.
    """

    def __init__(self, layout: PoolLayout, *, position: int = 0,
                 status_path: Path | None = None, payload: bytes | None = None,
                 saved_pos: int | None = None) -> None:
        if position < 0:
            raise ValueError("position must be >= 0")
        self.layout = layout
        self.status_path = status_path
        self.saved_pos = saved_pos
        self._pos = position
        self._status_failed_round = -1
        size = layout.object_size
        self._payload = payload if payload is not None else object_content(size)
        if len(self._payload) != size:
            raise ValueError("payload length must equal the object size")
        self._stale: list[str] = []

    @classmethod
    def from_workspace(cls, workspace: Path, *, recover: bool = True,
                       max_scan: int = 4096) -> MdProbe:
        """The probe over a prepared workspace, at its saved position, with what a crash
        left behind repaired (probes/md_resume.py)."""
        workspace = Path(workspace)
        manifest = read_manifest(workspace)
        if manifest is None:
            raise ManifestError(f"{workspace}: no MANIFEST; run 'slowdown-probe prepare'",
                                errno.ENOENT)
        if not manifest.complete:
            raise ManifestError(f"{workspace}: preparation did not finish; run "
                                "'slowdown-probe prepare' again")
        layout = PoolLayout.from_entry(workspace, manifest.pool)
        path = workspace / STATUS_NAME
        status = read_status_full(path, layout.dirs)
        start = manifest.pool.position if status is None else status.step
        probe = cls(layout, position=start, status_path=path,
                    saved_pos=None if status is None else status.pos)
        if recover:
            probe.resume(max_scan, md_workbench_moved=status is not None and not status.ours,
                         first_index=manifest.pool.first_index)
        return probe

    @property
    def position(self) -> int:
        """The next step: its oldest object is `layout.oldest(position)`."""
        return self._pos

    @position.setter
    def position(self, value: int) -> None:
        if value < 0:
            raise ValueError("position must be >= 0")
        self._pos = value

    @property
    def stale(self) -> int:
        """Objects the rotation has passed whose delete failed, still to be removed."""
        return len(self._stale)

    def save_position(self, *, fsync: bool = True) -> None:
        """Persist the position (atomic replace): the step, and the round md-workbench can
        continue from (this round mid-round; exact between rounds)."""
        if self.status_path is None:
            raise ValueError("this probe has no status file")
        pos = -(-self._pos // self.layout.dirs)
        write_status(self.status_path, self._pos, self.layout.dirs, pos=pos, fsync=fsync)
        self.saved_pos = pos

    def finish_round(self) -> int:
        """Run the steps left in the round in progress (not reported), then save the exact
        round: what a clean stop does, so md-workbench continues with nothing left over.
        Returns the steps run."""
        done = 0
        while self._pos % self.layout.dirs:
            self.step()
            done += 1
        self.save_position()
        return done

    def resume(self, max_scan: int = 4096, *, md_workbench_moved: bool = False,
               first_index: int = 0) -> int:
        """Move to the first existing object at or after the position and repair what a
        crash left; return the steps skipped."""
        layout = self.layout
        start = self._pos
        self._pos = md_resume.recover(layout, start, max_scan)
        if self._pos > start:  # the last step passed may have been cut short by the crash
            k = self._pos - 1
            md_resume.rewrite_if_broken(layout, k % layout.dirs, k // layout.dirs
                                        + layout.per_dir, self._payload)
        if md_workbench_moved:
            md_resume.clear_leftovers(layout, self._pos, first_index, self._payload)
        return self._pos - start

    def recover(self, max_scan: int = 4096) -> int:
        """Advance to the first existing object at or after the position; return the steps
        skipped."""
        return self.resume(max_scan)

    def _keep_status(self, k: int) -> None:
        """Before step `k`: make the status file name a round md-workbench can continue
        from through this step. Untimed, once per round: at the end of a round's last step
        (so no timed op follows the write in the same tick), and at a start."""
        if self.status_path is None or md_resume.status_valid(self.layout, k, self.saved_pos):
            return
        i = k // self.layout.dirs
        if i == self._status_failed_round:
            return  # tried this round already (a read-only filesystem, ...)
        pos = md_resume.status_ahead(self.layout, k)
        try:
            # No fsync: a killed process loses nothing without it, and on ext4 a small fsync
            # waits for the whole journal commit, every other writer's data included.
            write_status(self.status_path, k, self.layout.dirs, pos=pos, fsync=False)
        except OSError:
            self._status_failed_round = i
            return
        self.saved_pos = pos

    def step(self, on_op: OnOp | None = None) -> MdStep:
        """stat, read, delete the oldest object, then create and write its successor.

        Each op is timed on its own (perf_counter_ns around its system calls only); `on_op`
        hears of each op as soon as it is done, so a caller can tell which one is in flight.
        An op that fails records its errno and the step goes on: a missing object (md-stat
        ENOENT) skips md-read and md-delete but still creates the successor, so the pool
        heals. An object whose delete failed is deleted again later, one per step, after the
        timed ops. The position advances whatever happened.
        """
        layout = self.layout
        k = self._pos
        self._keep_status(k)  # only at the first step after a start: the last step wrote it
        d, i = layout.oldest(k)
        base = layout.dir_paths[d]
        old = f"{base}file-{i}"
        new = f"{base}file-{i + layout.per_dir}"
        lat: dict[str, float] = {}
        err: dict[str, int] = {}
        skipped: tuple = ()

        def timed(op: str, call: Callable[..., int], *args: object) -> int:
            t0 = perf_counter_ns()
            e = call(*args)
            lat[op] = t = (perf_counter_ns() - t0) * _NS
            if e:
                err[op] = e
            if on_op is not None:
                on_op(op, t, e)
            return e

        if timed(MD_STAT, _stat, old) == errno.ENOENT:
            skipped = (MD_READ, MD_DELETE)
            if on_op is not None:
                for op in skipped:
                    on_op(op, None, 0)
        else:
            timed(MD_READ, _with_file, old, _READ_FLAGS, _read_all, layout.object_size)
            e = timed(MD_DELETE, _unlink, old)
            if e and e != errno.ENOENT and len(self._stale) < MAX_STALE:
                self._stale.append(old)
        e = timed(MD_WRITE, _with_file, new, _CREATE_FLAGS, _write_all, self._payload)
        self._pos = k + 1
        if e:
            # A short or failed write leaves a truncated object behind: remove it, so the
            # rotation recreates it whole when it gets there (the pool heals).
            with contextlib.suppress(OSError):
                os.unlink(new)
        if self._stale:
            self._retry_stale()
        self._keep_status(k + 1)  # at a round's end: the next round's, after the timed ops
        return MdStep(k, lat, err, skipped)

    def _retry_stale(self) -> None:
        """Delete one object whose timed delete failed (untimed, after the step's ops):
        the rotation never comes back to it, and the pool would grow by one each time."""
        try:
            os.unlink(self._stale[-1])
        except FileNotFoundError:
            pass
        except OSError:
            return
        self._stale.pop()


def _errno(exc: OSError) -> int:
    return exc.errno or errno.EIO


def _stat(path: str) -> int:
    """stat, as md-workbench (a symlink is followed: stat reads, never writes)."""
    try:
        os.stat(path)
    except OSError as exc:
        return _errno(exc)
    return 0


def _unlink(path: str) -> int:
    try:
        os.unlink(path)
    except OSError as exc:
        return _errno(exc)
    return 0


def _with_file(path: str, flags: int, transfer: Callable[[int, object], int],
               arg: object) -> int:
    """open, lseek to 0, `transfer`, close (IOR's POSIX open/create, xfer, close); 0 or the
    first errno."""
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as exc:
        return _errno(exc)
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        e = transfer(fd, arg)
    except OSError as exc:
        e = _errno(exc)
    try:
        os.close(fd)
    except OSError as exc:
        e = e or _errno(exc)
    return e


def _read_all(fd: int, size: object) -> int:
    """read until `size` bytes came (EIO for a short object)."""
    left = int(size)  # type: ignore[call-overload]
    while left > 0:
        n = len(os.read(fd, left))
        if n == 0:
            return errno.EIO
        left -= n
    return 0


def _write_all(fd: int, content: object) -> int:
    view = memoryview(content)  # type: ignore[arg-type]
    while view:
        n = os.write(fd, view)
        if n == 0:
            return errno.EIO
        view = view[n:]
    return 0


class MdPoolProbe(Probe):
    """The md probe as the worker runs it: one rotation step, four ops, each reported with
    the object it went to (the oldest object, or for md-write its successor)."""

    name = "md"
    ops = MD_OPS
    needs = (MD_POOL,)
    state_files = (STATUS_NAME, tmp_name(STATUS_NAME))

    def __init__(self, md: MdProbe) -> None:
        self.md = md

    @classmethod
    def open(cls, workspace: Path, *, sync: bool = False) -> MdPoolProbe:
        return cls(MdProbe.from_workspace(workspace))

    def step(self, report: Report) -> None:
        md = self.md
        layout = md.layout
        d, i = layout.oldest(md.position)  # the objects of this step, named before it
        base = layout.dir_paths[d]
        old = Place(f"{base}file-{i}")
        new = Place(f"{base}file-{i + layout.per_dir}")

        def on_op(op: str, latency: float | None, code: int) -> None:
            where = new if op == MD_WRITE else old
            if code:
                report(Result(op, latency, errno.errorcode.get(code, str(code)),
                              os.strerror(code), where, code in (errno.ENOENT, errno.ESTALE)))
            else:
                report(Result(op, latency, where=where))

        md.step(on_op=on_op)

    def save(self, finish: bool = False) -> None:
        if finish:
            self.md.finish_round()
        else:
            self.md.save_position()


PROBE = MdPoolProbe
