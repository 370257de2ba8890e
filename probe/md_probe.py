"""The metadata probe: MD-Workbench's object rotation, one object per tick.

Layout (as MD-Workbench lays out its objects; IOR's src/md-workbench.c, def_dset_name and
def_obj_name): data set `d` of rank `r` is the directory `<pool>/<r>_<d>`, object `i` in it is
`<pool>/<r>_<d>/file-<i>`. The pool is always rank 0. Precreate makes file-0 .. file-(P-1) in
every data set, object index outer, data set inner (run_precreate).

Rotation (run_benchmark with one rank): round `f` visits data sets 0..D-1 and, in data set `d`,
stats, reads and deletes the oldest object file-<f> and creates file-<f+P>. The probe does one
object per tick, so its position is a step `k`: data set `k % D`, object `k // D`, and the new
object `k // D + P`. After `k` steps each data set holds exactly P objects (a window of P
consecutive indices), and every data set is visited once per D ticks.

Position: the probe keeps `k` in memory and writes it only when asked (`save_position`, which
the service calls about once a minute): a write per tick on the probed filesystem would add
metadata load to what is being measured. The file is the workspace's `md-workbench.status`
(md-workbench's run-info format, see manifest.py). After a crash the saved step lags by up to
one save interval, and the objects of the lost steps are already gone: `recover` moves forward
to the first object that still exists (a bounded run of lstat calls, then one listing of the
data sets), so no object is skipped and none is visited twice.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
from collections.abc import Callable
from pathlib import Path
from time import perf_counter_ns
from typing import NamedTuple, Optional

from slowdown.analysis.words import MD_OPS
from slowdown.probe.manifest import (
    STATUS_NAME,
    ManifestError,
    PoolEntry,
    read_manifest,
    read_status,
    write_status,
)

MD_STAT, MD_READ, MD_DELETE, MD_WRITE = MD_OPS

OBJECT_RE = re.compile(r"file-(0|[1-9][0-9]*)")
"""An object name as md-workbench writes it (`file-%d`, no leading zeros)."""

_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_NS = 1e-9
MAX_STALE = 1024


def object_index(name: str) -> int | None:
    """The index of an object name, None for any other name."""
    match = OBJECT_RE.fullmatch(name)
    return int(match.group(1)) if match else None


class PoolLayout:
    """Names and rotation arithmetic of an MD-Workbench pool (one rank)."""

    __slots__ = ("dir_paths", "dirs", "object_size", "per_dir", "rank", "root")

    def __init__(self, root: Path, dirs: int, per_dir: int, object_size: int,
                 rank: int = 0) -> None:
        if dirs < 1 or per_dir < 1 or object_size < 0:
            raise ValueError("a pool needs dirs >= 1, per_dir >= 1, object_size >= 0")
        self.root = Path(root)
        self.dirs = dirs
        self.per_dir = per_dir
        self.object_size = object_size
        self.rank = rank
        self.dir_paths = tuple(f"{self.root}/{self.dir_name(d)}/" for d in range(dirs))

    @classmethod
    def from_entry(cls, workspace: Path, entry: PoolEntry) -> PoolLayout:
        return cls(Path(workspace) / entry.dir, entry.dirs, entry.files_per_dir,
                   entry.object_size, entry.rank)

    @property
    def files(self) -> int:
        return self.dirs * self.per_dir

    def dir_name(self, d: int) -> str:
        return f"{self.rank}_{d}"

    def object_path(self, d: int, i: int) -> str:
        return f"{self.dir_paths[d]}file-{i}"

    def oldest(self, step: int) -> tuple[int, int]:
        """(data set, object index) that step `step` stats, reads and deletes."""
        return step % self.dirs, step // self.dirs

    def window(self, step: int, d: int) -> range:
        """The object indices data set `d` holds before step `step` runs."""
        first = step // self.dirs + (1 if d < step % self.dirs else 0)
        return range(first, first + self.per_dir)


OnOp = Callable[[str, Optional[float], int], None]
"""Called after each op of a step: (op name, seconds or None when not attempted, errno or 0)."""


class MdStep(NamedTuple):
    """One step's outcome: seconds per attempted op, errno per op that did not succeed, ops
    not attempted.

    A failed op still has its latency (the time until it failed). `skipped` ops (md-read and
    md-delete after md-stat found the object missing) have no latency and count as failed
    with ENOENT in `errors`.
    """

    step: int
    latencies: dict
    errors: dict
    skipped: tuple


class MdProbe:
    """The rotation over one pool; `step()` does one object, timing each op separately.

    Not thread-safe; meant to live in the per-target worker process. `status_path` is where
    `save_position` writes (None: positions are not persisted).
    """

    def __init__(self, layout: PoolLayout, *, position: int = 0,
                 status_path: Path | None = None, payload: bytes | None = None) -> None:
        if position < 0:
            raise ValueError("position must be >= 0")
        self.layout = layout
        self.status_path = status_path
        self._pos = position
        size = layout.object_size
        self._payload = payload if payload is not None else _payload(size)
        if len(self._payload) != size:
            raise ValueError("payload length must equal the object size")
        self._rbuf = bytearray(max(size, 1))
        self._rview = memoryview(self._rbuf)[:size]
        self._stale: list[str] = []

    @classmethod
    def from_workspace(cls, workspace: Path, *, recover: bool = True,
                       max_scan: int = 4096) -> MdProbe:
        """The probe over a prepared workspace, at its saved (and recovered) position."""
        workspace = Path(workspace)
        manifest = read_manifest(workspace)
        if manifest is None:
            raise ManifestError(f"{workspace}: no MANIFEST; run 'slowdown-probe prepare'")
        if not manifest.complete:
            raise ManifestError(f"{workspace}: preparation did not finish; run "
                                "'slowdown-probe prepare' again")
        layout = PoolLayout.from_entry(workspace, manifest.pool)
        status = workspace / STATUS_NAME
        saved = read_status(status, layout.dirs)
        probe = cls(layout, position=manifest.pool.position if saved is None else saved,
                    status_path=status)
        if recover:
            probe.recover(max_scan)
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
        """Persist the position (atomic replace); call rarely, not per tick."""
        if self.status_path is None:
            raise ValueError("this probe has no status file")
        write_status(self.status_path, self._pos, self.layout.dirs, fsync=fsync)

    def recover(self, max_scan: int = 4096) -> int:
        """Advance to the first existing object at or after the position; return the steps
        skipped.

        lstat the next objects one by one, at most `max_scan`; past that, list the data sets
        once (D readdirs) for the lowest index still present. An empty pool keeps the position
        (the steps recreate the objects). Only a missing object (ENOENT) is skipped over; any
        other error stops the search, so a sick filesystem is measured, not walked around.
        """
        layout = self.layout
        start = self._pos
        for k in range(start, start + max_scan):
            d, i = layout.oldest(k)
            try:
                os.lstat(layout.object_path(d, i))
            except FileNotFoundError:
                continue
            except OSError:
                pass
            self._pos = k
            return k - start
        best: int | None = None
        low = start // layout.dirs
        for d in range(layout.dirs):
            try:
                with os.scandir(layout.dir_paths[d]) as it:
                    indices = [i for i in (object_index(e.name) for e in it)
                               if i is not None and i >= low]
            except OSError:
                continue
            for i in sorted(indices):
                k = i * layout.dirs + d
                if k >= start:
                    best = k if best is None else min(best, k)
                    break
        if best is not None:
            self._pos = best
        return self._pos - start

    def step(self, on_op: OnOp | None = None) -> MdStep:
        """stat, read, delete the oldest object, then create and write its successor.

        Each op is timed on its own (perf_counter_ns around the system calls only); `on_op`
        hears of each op as soon as it is done, so a caller can tell which one is in flight.
        An op that fails records its errno and the step goes on: a missing object (md-stat
        ENOENT) skips md-read and md-delete but still creates the successor, so the pool
        heals. An object whose delete failed is deleted again later, one per step, after the
        timed ops. The position advances whatever happened.
        """
        layout = self.layout
        k = self._pos
        dirs = layout.dirs
        d = k % dirs
        i = k // dirs
        base = layout.dir_paths[d]
        old = f"{base}file-{i}"
        new = f"{base}file-{i + layout.per_dir}"
        lat: dict[str, float] = {}
        err: dict[str, int] = {}
        skipped: tuple = ()
        clock = perf_counter_ns

        t0 = clock()
        try:
            os.lstat(old)
            e = 0
        except OSError as exc:
            e = exc.errno or errno.EIO
        lat[MD_STAT] = t = (clock() - t0) * _NS
        if e:
            err[MD_STAT] = e
        if on_op is not None:
            on_op(MD_STAT, t, e)

        if e == errno.ENOENT:
            skipped = (MD_READ, MD_DELETE)
            for op in skipped:
                err[op] = errno.ENOENT
                if on_op is not None:
                    on_op(op, None, errno.ENOENT)
        else:
            t0 = clock()
            e = _read_whole(old, self._rview, layout.object_size)
            lat[MD_READ] = t = (clock() - t0) * _NS
            if e:
                err[MD_READ] = e
            if on_op is not None:
                on_op(MD_READ, t, e)

            t0 = clock()
            try:
                os.unlink(old)
                e = 0
            except OSError as exc:
                e = exc.errno or errno.EIO
            lat[MD_DELETE] = t = (clock() - t0) * _NS
            if e:
                err[MD_DELETE] = e
                if e != errno.ENOENT and len(self._stale) < MAX_STALE:
                    self._stale.append(old)
            if on_op is not None:
                on_op(MD_DELETE, t, e)

        t0 = clock()
        e = _create_whole(new, self._payload)
        lat[MD_WRITE] = t = (clock() - t0) * _NS
        self._pos = k + 1
        if e:
            err[MD_WRITE] = e
            if e != errno.EEXIST:
                # A short or failed write leaves a truncated object behind: remove it, so the
                # rotation recreates it whole when it gets there (the pool heals).
                with contextlib.suppress(OSError):
                    os.unlink(new)
        if on_op is not None:
            on_op(MD_WRITE, t, e)
        if self._stale:
            self._retry_stale()
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


def _read_whole(path: str, view: memoryview, size: int) -> int:
    """open, read `size` bytes, close; 0 or the errno (EIO for a short object)."""
    try:
        fd = os.open(path, _READ_FLAGS)
    except OSError as exc:
        return exc.errno or errno.EIO
    e = 0
    try:
        got = os.readv(fd, [view]) if size else 0
        while got < size:
            n = os.readv(fd, [view[got:]])
            if n == 0:
                e = errno.EIO
                break
            got += n
    except OSError as exc:
        e = exc.errno or errno.EIO
    try:
        os.close(fd)
    except OSError as exc:
        e = e or exc.errno or errno.EIO
    return e


def _create_whole(path: str, payload: bytes) -> int:
    """open(O_CREAT|O_EXCL), write the payload, close; 0 or the errno."""
    try:
        fd = os.open(path, _CREATE_FLAGS, 0o644)
    except OSError as exc:
        return exc.errno or errno.EIO
    e = 0
    try:
        done = os.write(fd, payload) if payload else 0
        while done < len(payload):
            n = os.write(fd, memoryview(payload)[done:])
            if n == 0:
                e = errno.EIO
                break
            done += n
    except OSError as exc:
        e = exc.errno or errno.EIO
    try:
        os.close(fd)
    except OSError as exc:
        e = e or exc.errno or errno.EIO
    return e


def _payload(size: int) -> bytes:
    """Object content: incompressible, the same for every object (like md-workbench's
    pattern buffer, which is also reused)."""
    return os.urandom(size)
