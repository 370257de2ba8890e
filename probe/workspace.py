"""Workspace preparation and cleanup: `<target>/.slowdown/<host>/` with data.bin, md/, MANIFEST.

prepare is resumable and idempotent. It writes the MANIFEST (complete=false) before it creates
anything inside the workspace, so an interrupted run leaves a workspace that is recognisably
ours; a second run continues from what exists: data.bin from its verified length (the last
whole block that carries prepare's stamp), the pool from the objects present. A run after
completion changes nothing. Before creating anything it checks the path (no symlink in it, not
`/`, a system directory or a home directory itself, a workspace that belongs to us) and the
free space and inodes (statvfs) against what remains to be written plus a margin.

The pool follows MD-Workbench's layout (see md_probe.py); a `.slowdown/<host>` that holds
exactly a pool precreated by `md-workbench -1 -o <workspace>/md -D=<dirs> -P=<files per dir>
-S=<object size>` (and optionally its status file `md-workbench.status`) is adopted: listed in
the MANIFEST as adopted, its position honoured. Anything else without our MANIFEST is refused.
pool_files must be a multiple of pool_dirs (md-workbench's -P counts objects per data set).

cleanup removes only what the MANIFEST lists, walking the tree through directory file
descriptors opened with O_NOFOLLOW and unlinking relative to them, so a symlink is never
followed. Anything else found is left in place, with the directories holding it, and reported;
the MANIFEST then stays too, so cleanup can be run again once the strays are gone.
"""

from __future__ import annotations

import errno
import os
import pwd
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from slowdown.analysis.config import PSEUDO_FS, SYSTEM_DIRS
from slowdown.analysis.units import format_size
from slowdown.probe.manifest import (
    BLOCK_SIZE,
    DATA_NAME,
    MANIFEST_NAME,
    POOL_NAME,
    STATE_FILES,
    STATUS_NAME,
    Manifest,
    ManifestError,
    PoolEntry,
    parse_status,
    read_manifest,
    write_manifest,
    write_status,
)
from slowdown.probe.md_probe import PoolLayout, object_index

if TYPE_CHECKING:
    from rich.console import Console

    from slowdown.analysis.config import Target

SLOWDOWN_DIR = ".slowdown"
STAMP_MAGIC = int.from_bytes(b"slowdown", "little")
STAMP_UNIT = 4096  # every 4 KiB of data.bin starts with (magic, page number): no two pages equal
WRITE_CHUNK = 8 * BLOCK_SIZE
SYNC_EVERY = 256 * BLOCK_SIZE
MARGIN_BYTES = 16 * BLOCK_SIZE
MARGIN_INODES = 16

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class WorkspaceError(Exception):
    """prepare or cleanup cannot go on; the message is one line for the user."""


class UnsafePathError(WorkspaceError):
    """The target path or workspace is not a place slowdown may write to."""


class NoSpaceError(WorkspaceError):
    """Not enough free space or inodes for what remains to be written."""


class ForeignWorkspaceError(WorkspaceError):
    """A `.slowdown/<host>` directory that is not ours (no MANIFEST, not an md-workbench
    pool)."""


@dataclass(frozen=True)
class Workspace:
    """The paths of one target's workspace on one host."""

    dir: Path

    @classmethod
    def of(cls, target: Target, host: str) -> Workspace:
        check_host(host)
        return cls(Path(target.path) / SLOWDOWN_DIR / host)

    @property
    def data(self) -> Path:
        return self.dir / DATA_NAME

    @property
    def pool(self) -> Path:
        return self.dir / POOL_NAME

    @property
    def manifest(self) -> Path:
        return self.dir / MANIFEST_NAME

    @property
    def status(self) -> Path:
        return self.dir / STATUS_NAME


@dataclass
class PrepareReport:
    workspace: Path
    action: str  # "created", "resumed", "adopted", "extended" or "unchanged"
    data_size: int
    data_written: int = 0
    objects_created: int = 0
    position: int = 0
    notes: list[str] = field(default_factory=list)


@dataclass
class CleanupReport:
    workspace: Path
    removed_files: int = 0
    removed_dirs: int = 0
    strays: list[str] = field(default_factory=list)
    manifest_kept: bool = False
    existed: bool = True


# --- checks ------------------------------------------------------------------------------


def check_host(host: str) -> None:
    """A host name must be one path component."""
    if not host or "/" in host or "\0" in host or host in (".", "..") or host.startswith("."):
        raise WorkspaceError(f"host name {host!r} cannot name a workspace directory")


def check_target_path(path: Path | str) -> None:
    """Refuse paths prepare must never write into (UnsafePathError)."""
    text = str(path)
    if not os.path.isabs(text):
        raise UnsafePathError(f"target path {text!r} is not absolute")
    if ".." in Path(text).parts or os.path.normpath(text) != text:
        raise UnsafePathError(f"target path {text!r} is not in normal form (no '..', '.', '//')")
    if text in SYSTEM_DIRS or text.startswith(PSEUDO_FS):
        raise UnsafePathError(f"target path {text} is a system directory")
    _refuse_symlinks(Path(text))
    _refuse_home(Path(text))


def check_workspace(workspace: Path | str) -> None:
    """What the service's worker checks before it probes a workspace (the checks touch the
    target, so they run in the worker, where a hung filesystem cannot stop the service): the
    target path is not a system directory and has no symlink on the way, and the workspace
    directories are real directories of this user. UnsafePathError otherwise; a workspace
    not prepared passes (the probes then say it is not prepared)."""
    workspace = Path(workspace)
    target = workspace.parent.parent
    text = str(target)
    if not os.path.isabs(text) or os.path.normpath(text) != text:
        raise UnsafePathError(f"target path {text!r} is not absolute and in normal form")
    if text in SYSTEM_DIRS or text.startswith(PSEUDO_FS):
        raise UnsafePathError(f"target path {text} is a system directory")
    _refuse_symlinks(target)
    for path in (workspace.parent, workspace):
        st = _lstat(path)
        if st is None:
            return
        _require_dir(path, st)
        _require_ours(path, st)


def _refuse_symlinks(path: Path) -> None:
    """Every existing component must be a real directory; only the last may be missing."""
    current = Path("/")
    parts = path.parts[1:]
    for n, part in enumerate(parts):
        current = current / part
        try:
            st = os.lstat(current)
        except FileNotFoundError:
            if n != len(parts) - 1:
                raise WorkspaceError(f"target path {path}: {current} does not exist (prepare "
                                     "creates only the target directory itself)") from None
            return
        except OSError as exc:
            raise UnsafePathError(f"target path {path}: {current}: {exc.strerror}") from exc
        if stat.S_ISLNK(st.st_mode):
            raise UnsafePathError(f"target path {path}: {current} is a symlink; give the real "
                                  "path")
        if not stat.S_ISDIR(st.st_mode):
            raise UnsafePathError(f"target path {path}: {current} is not a directory")


def _refuse_home(path: Path) -> None:
    text = str(path)
    homes = {os.path.normpath(h) for h in (os.environ.get("HOME"), os.path.expanduser("~"))
             if h and os.path.isabs(h)}
    with suppress(OSError):
        homes.update(os.path.normpath(pw.pw_dir) for pw in pwd.getpwall()
                     if pw.pw_dir and os.path.isabs(pw.pw_dir) and pw.pw_dir != "/")
    if text in homes:
        raise UnsafePathError(f"target path {text} is a home directory; use a subdirectory")
    # The same directory under another name (bind mount, automounter): compare inodes with
    # our own home and with the home of the directory's owner, never stat every home.
    try:
        st = os.stat(text)
    except OSError:
        return
    candidates = {h for h in (os.environ.get("HOME"), os.path.expanduser("~")) if h}
    with suppress(KeyError):
        candidates.add(pwd.getpwuid(st.st_uid).pw_dir)
    for home in candidates:
        try:
            hst = os.stat(home)
        except OSError:
            continue
        if (hst.st_dev, hst.st_ino) == (st.st_dev, st.st_ino) and home != "/":
            raise UnsafePathError(f"target path {text} is the home directory {home}; use a "
                                  "subdirectory")


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None


def _require_dir(path: Path, st: os.stat_result) -> None:
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePathError(f"{path} is a symlink")
    if not stat.S_ISDIR(st.st_mode):
        raise WorkspaceError(f"{path} is not a directory")


def _require_ours(path: Path, st: os.stat_result) -> None:
    uid = os.geteuid()
    if st.st_uid != uid:
        raise UnsafePathError(f"{path} belongs to uid {st.st_uid}, not to this user (uid {uid})")


def _pool_shape(target: Target) -> tuple[int, int, int]:
    dirs, files, size = int(target.pool_dirs), int(target.pool_files), int(target.object_size)
    if dirs < 1 or files < 1 or size < 0:
        raise WorkspaceError(f"target {target.name}: pool_dirs and pool_files must be >= 1, "
                             "object_size >= 0")
    if files % dirs:
        raise WorkspaceError(f"target {target.name}: pool_files ({files}) must be a multiple of "
                             f"pool_dirs ({dirs}): md-workbench keeps the same number of "
                             "objects in every directory")
    return dirs, files // dirs, size


def _data_size(target: Target, ram_bytes: int | None) -> int:
    ds = target.data_size
    size = ds.resolve(ram_bytes) if ram_bytes is not None else ds.resolve()
    if size < BLOCK_SIZE or size % BLOCK_SIZE:
        raise WorkspaceError(f"target {target.name}: data size {size} is not a positive "
                             "multiple of 1 MiB")
    return int(size)


def check_space(where: Path, need_bytes: int, need_inodes: int) -> None:
    """Refuse (NoSpaceError) unless statvfs shows room for the rest plus a margin."""
    st = os.statvfs(where)
    free = st.f_bavail * st.f_frsize
    margin = MARGIN_BYTES + need_bytes // 50
    if need_bytes and free < need_bytes + margin:
        raise NoSpaceError(f"{where}: not enough free space: {format_size(need_bytes)} to write "
                           f"+ {format_size(margin)} margin, {format_size(free)} free")
    if st.f_files > 0 and need_inodes:
        inode_margin = MARGIN_INODES + need_inodes // 100
        if st.f_favail < need_inodes + inode_margin:
            raise NoSpaceError(f"{where}: not enough free inodes: {need_inodes} files + "
                               f"{inode_margin} margin, {st.f_favail} free")


def _estimate(where: Path, data_bytes: int, objects: int, object_size: int,
              new_dirs: int) -> tuple[int, int]:
    unit = max(os.statvfs(where).f_frsize, 1)
    per_object = -(-object_size // unit) * unit
    return data_bytes + objects * per_object + new_dirs * unit, objects + new_dirs + 3


# --- data.bin ----------------------------------------------------------------------------


def _stamped(block: memoryview | bytearray) -> bool:
    import numpy as np  # here: the service's workers import this module for check_workspace

    words = np.frombuffer(block, dtype=np.uint64)
    return bool(np.all(words[:: STAMP_UNIT // 8] == STAMP_MAGIC))


def verified_length(path: Path) -> int:
    """Length of data.bin up to its last whole block that prepare's writes reached.

    A kill leaves the file as long as the bytes written; a crash can leave a tail of blocks
    that were never written (holes or zeros) — those carry no stamp and are not counted. The
    data probe only ever writes back data read from the file, so stamps survive probing.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return 0
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise WorkspaceError(f"{path} is not a regular file")
        n = st.st_size // BLOCK_SIZE
        buf = bytearray(BLOCK_SIZE)
        while n > 0:
            got = os.preadv(fd, [buf], (n - 1) * BLOCK_SIZE)
            if got == BLOCK_SIZE and _stamped(buf):
                break
            n -= 1
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        return n * BLOCK_SIZE
    finally:
        os.close(fd)


def _write_data(path: Path, start: int, end: int, progress: Any) -> int:
    """Write real, stamped data from `start` to `end`; return bytes written."""
    import numpy as np

    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise WorkspaceError(f"{path} is not a regular file")
        if st.st_size > start:
            os.ftruncate(fd, start)  # drop an unverified tail (this file is ours)
        buf = bytearray(os.urandom(WRITE_CHUNK))
        words = np.frombuffer(buf, dtype=np.uint64)
        step = STAMP_UNIT // 8
        words[::step] = STAMP_MAGIC
        pages = WRITE_CHUNK // STAMP_UNIT
        view = memoryview(buf)
        task = progress.add_task(f"{path.name}", total=end, completed=start)
        off = synced = start
        while off < end:
            n = min(WRITE_CHUNK, end - off)
            first = off // STAMP_UNIT
            words[1::step] = np.arange(first, first + pages, dtype=np.uint64)
            chunk = view[:n]
            done = 0
            while done < n:
                done += os.pwrite(fd, chunk[done:], off + done)
            off += n
            if off - synced >= SYNC_EVERY or off == end:
                os.fdatasync(fd)
                # Written and durable: keep 4x RAM of it from pushing everyone's cache out.
                os.posix_fadvise(fd, synced, off - synced, os.POSIX_FADV_DONTNEED)
                synced = off
            progress.update(task, completed=off)
        return end - start
    except OSError as exc:
        raise WorkspaceError(f"{path}: {exc.strerror} while writing; free space and run "
                             "prepare again, it continues where it stopped") from exc
    finally:
        os.close(fd)


# --- the pool ----------------------------------------------------------------------------


def _scan_pool(layout: PoolLayout, window: range) -> tuple[list[set[int]], list[str]]:
    """Which objects of the window exist whole in each data set; unlink truncated ones
    (a kill between create and write); names outside the window are reported."""
    have: list[set[int]] = []
    strays: list[str] = []
    for d in range(layout.dirs):
        present: set[int] = set()
        dpath = layout.root / layout.dir_name(d)
        st = _lstat(dpath)
        if st is None:
            have.append(present)
            continue
        _require_dir(dpath, st)
        with os.scandir(dpath) as it:
            for entry in it:
                i = object_index(entry.name)
                if i is None or i not in window:
                    strays.append(f"{POOL_NAME}/{layout.dir_name(d)}/{entry.name}")
                    continue
                if not entry.is_file(follow_symlinks=False):
                    raise WorkspaceError(f"{dpath / entry.name} is not a regular file")
                if entry.stat(follow_symlinks=False).st_size == layout.object_size:
                    present.add(i)
                else:
                    os.unlink(dpath / entry.name)
        have.append(present)
    return have, strays


def _build_pool(layout: PoolLayout, window: range, have: list[set[int]],
                progress: Any) -> int:
    """Create the missing objects of the window in md-workbench's precreate order (object
    index outer, data set inner); return how many were created."""
    for path in [layout.root] + [layout.root / layout.dir_name(d) for d in range(layout.dirs)]:
        st = _lstat(path)
        if st is None:
            os.mkdir(path, 0o755)
        else:
            _require_dir(path, st)
    total = layout.dirs * len(window)
    done = sum(len(s) for s in have)
    task = progress.add_task(f"{POOL_NAME}/", total=total, completed=done)
    payload = os.urandom(layout.object_size)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    created = 0
    path = ""
    try:
        for i in window:
            for d in range(layout.dirs):
                if i in have[d]:
                    continue
                path = layout.object_path(d, i)
                fd = os.open(path, flags, 0o644)
                try:
                    view = memoryview(payload)
                    while view:
                        view = view[os.write(fd, view):]
                finally:
                    os.close(fd)
                created += 1
                if created % 256 == 0:
                    progress.update(task, completed=done + created)
        for d in range(layout.dirs):
            dfd = os.open(layout.dir_paths[d], os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
    except OSError as exc:
        raise WorkspaceError(f"{path or layout.root}: {exc.strerror} while creating the pool; "
                             "run prepare again, it continues where it stopped") from exc
    progress.update(task, completed=done + created)
    return created


def _recognise_md_workbench(ws: Path, dirs: int, per_dir: int, object_size: int,
                            status_file: Path | None) -> tuple[int, int]:
    """(rotation step, lowest object index) of an md-workbench pool in `ws`, or
    ForeignWorkspaceError.

    The layout must be exact: md/ holds 0_0 .. 0_<dirs-1> and nothing else, each holds
    file-<i> for exactly `per_dir` consecutive i, regular files of `object_size` bytes, with
    the windows of a rotation paused between two objects (md-workbench's benchmark moves
    data set by data set, so the first data sets may be one object ahead). A status file,
    when there is one, must name the same round.
    """
    def foreign(why: str) -> ForeignWorkspaceError:
        return ForeignWorkspaceError(f"{ws} has no slowdown MANIFEST and is not an "
                                     f"md-workbench pool of {dirs}x{per_dir} objects of "
                                     f"{object_size} bytes: {why}; not touching it")

    md = ws / POOL_NAME
    st = _lstat(md)
    if st is None or not stat.S_ISDIR(st.st_mode):
        raise foreign(f"{POOL_NAME}/ is missing or not a directory")
    expected = {f"0_{d}" for d in range(dirs)}
    names = set(os.listdir(md))
    if names != expected:
        raise foreign(f"{POOL_NAME}/ holds {sorted(names - expected)[:3] or 'fewer'} entries")
    starts: list[int] = []
    for d in range(dirs):
        dpath = md / f"0_{d}"
        dst = os.lstat(dpath)
        if not stat.S_ISDIR(dst.st_mode):
            raise foreign(f"{dpath} is not a directory")
        indices: list[int] = []
        with os.scandir(dpath) as it:
            for entry in it:
                i = object_index(entry.name)
                if i is None or not entry.is_file(follow_symlinks=False):
                    raise foreign(f"unexpected entry {dpath / entry.name}")
                if entry.stat(follow_symlinks=False).st_size != object_size:
                    raise foreign(f"{dpath / entry.name} is not {object_size} bytes")
                indices.append(i)
        if len(indices) != per_dir or max(indices) - min(indices) + 1 != per_dir:
            raise foreign(f"{dpath} does not hold {per_dir} consecutive objects")
        starts.append(min(indices))
    if any(a < b for a, b in zip(starts, starts[1:])) or starts[0] - starts[-1] > 1:
        raise foreign("the data sets are not at one rotation position")
    step = min(s * dirs + d for d, s in enumerate(starts))
    if status_file is not None:
        try:
            fd = os.open(status_file, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            fd = -1
        except OSError as exc:
            raise foreign(f"{status_file}: {exc.strerror}") from exc
        if fd >= 0:
            try:
                data = os.read(fd, 4096)
            finally:
                os.close(fd)
            try:
                saved = parse_status(data, dirs, str(status_file))
            except ManifestError as exc:
                raise foreign(str(exc)) from exc
            if saved // dirs != step // dirs:
                raise foreign(f"{status_file} says pos {saved // dirs}, the objects say "
                              f"{step // dirs}")
    return step, min(starts)


# --- progress ----------------------------------------------------------------------------


class _NoProgress:
    def add_task(self, *args: Any, **kwargs: Any) -> int:
        return 0

    def update(self, *args: Any, **kwargs: Any) -> None:
        pass


@contextmanager
def _progress(kind: str, enabled: bool, console: Console | None) -> Iterator[Any]:
    if not enabled:
        yield _NoProgress()
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    console = console or Console(stderr=True)
    if not console.is_terminal:
        yield _NoProgress()
        return
    if kind == "bytes":
        columns: tuple = (TextColumn("{task.description}"), BarColumn(),
                          DownloadColumn(binary_units=True), TransferSpeedColumn(),
                          TextColumn("ETA"), TimeRemainingColumn())
    else:
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TextColumn("ETA"), TimeRemainingColumn())
    with Progress(*columns, console=console) as progress:
        yield progress


# --- prepare -----------------------------------------------------------------------------


def prepare(target: Target, host: str, *, ram_bytes: int | None = None,
            progress: bool = True, console: Console | None = None,
            md_workbench_status: Path | None = None) -> PrepareReport:
    """Create (or finish, or adopt) the workspace of `target` on `host`.

    `md_workbench_status`: md-workbench's --run-info-file when adopting a pool and the file
    is not `md-workbench.status` inside the workspace.
    """
    check_host(host)
    dirs, per_dir, object_size = _pool_shape(target)
    need = _data_size(target, ram_bytes)
    root = Path(target.path)
    check_target_path(root)
    sd = root / SLOWDOWN_DIR
    ws = sd / host
    layout = PoolLayout(ws / POOL_NAME, dirs, per_dir, object_size)
    uid = os.geteuid()

    root_st = _lstat(root)
    sd_st = _lstat(sd) if root_st is not None else None
    if sd_st is not None:
        _require_dir(sd, sd_st)
    ws_st = _lstat(ws) if sd_st is not None else None
    manifest: Manifest | None = None
    adopt: tuple[int, int] | None = None
    if ws_st is not None:
        _require_dir(ws, ws_st)
        _require_ours(ws, ws_st)
        try:
            manifest = read_manifest(ws)
        except ManifestError as exc:
            raise ForeignWorkspaceError(f"{exc}; not touching {ws}") from exc
        if manifest is None:
            entries = set(os.listdir(ws))
            if entries and not entries <= {POOL_NAME, STATUS_NAME}:
                raise ForeignWorkspaceError(f"{ws} exists without a slowdown MANIFEST (it holds "
                                            f"{sorted(entries)[:3]}); not touching it")
            if entries:
                status = md_workbench_status or ws / STATUS_NAME
                adopt = _recognise_md_workbench(ws, dirs, per_dir, object_size, status)

    if manifest is not None:
        return _resume(target, ws, layout, manifest, need, progress, console, host)

    # Nothing of ours yet: check the space for everything, then create.
    where = ws if ws_st is not None else sd if sd_st is not None else (
        root if root_st is not None else root.parent)
    objects = 0 if adopt is not None else layout.files
    new_dirs = (0 if adopt is not None else dirs + 1) + (ws_st is None) + (sd_st is None) + (
        root_st is None)
    need_bytes, need_inodes = _estimate(where, need, objects, object_size, new_dirs)
    check_space(where, need_bytes, need_inodes)

    parents: list[str] = []
    if root_st is None:
        os.mkdir(root, 0o755)
        parents.append(".")
    if sd_st is None:
        os.mkdir(sd, 0o755)
        parents.append(SLOWDOWN_DIR)
    if ws_st is None:
        os.mkdir(ws, 0o755)
    # The MANIFEST comes first: from here on an interrupted prepare leaves a workspace that
    # prepare continues and cleanup removes.
    position, first = adopt if adopt is not None else (0, 0)
    manifest = Manifest(
        host=host, target=target.name, uid=uid, created=time.time(), data_size=need,
        pool=PoolEntry(dirs=dirs, files_per_dir=per_dir, object_size=object_size,
                       first_index=first, position=position, adopted=adopt is not None),
        parents=parents, workspace_adopted=adopt is not None and ws_st is not None,
    )
    write_manifest(ws, manifest)
    write_status(ws / STATUS_NAME, position, dirs)
    report = _finish(ws, layout, manifest, need, 0, progress, console, adopt is None)
    report.action = "adopted" if adopt is not None else "created"
    return report


def _resume(target: Target, ws: Path, layout: PoolLayout, manifest: Manifest, need: int,
            progress: bool, console: Console | None, host: str) -> PrepareReport:
    pool = manifest.pool
    if manifest.host != host:
        raise ForeignWorkspaceError(f"{ws / MANIFEST_NAME} belongs to host {manifest.host!r}")
    if (pool.dirs, pool.files_per_dir, pool.object_size) != (
            layout.dirs, layout.per_dir, layout.object_size):
        raise WorkspaceError(
            f"{ws} was prepared with pool_dirs={pool.dirs}, pool_files="
            f"{pool.dirs * pool.files_per_dir}, object_size={pool.object_size}; the "
            f"configuration of target {target.name} differs: run cleanup first")
    data = ws / DATA_NAME
    st = _lstat(data)
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise UnsafePathError(f"{data} is not a regular file")
    size = st.st_size if st is not None else 0
    if manifest.complete:
        # The pool has been rotating since: never touch it again; only data.bin may grow
        # (a larger data_size in the configuration).
        for path in [layout.root] + [layout.root / layout.dir_name(d)
                                     for d in range(layout.dirs)]:
            pst = _lstat(path)
            if pst is None:
                raise WorkspaceError(f"{path} is missing from a prepared workspace; run "
                                     "cleanup, then prepare")
            _require_dir(path, pst)
        if size >= need:
            return PrepareReport(ws, "unchanged", size, position=pool.position)
    have_data = verified_length(data)
    build_pool = not manifest.complete and not pool.adopted
    window = range(pool.first_index, pool.first_index + pool.files_per_dir)
    objects = 0
    have: list[set[int]] = [set() for _ in range(layout.dirs)]
    strays: list[str] = []
    new_dirs = 0
    if build_pool:
        have, strays = _scan_pool(layout, window)
        objects = layout.files - sum(len(s) for s in have)
        new_dirs = sum(_lstat(p) is None for p in [layout.root] + [
            layout.root / layout.dir_name(d) for d in range(layout.dirs)])
    need_bytes, need_inodes = _estimate(ws, max(need - have_data, 0), objects,
                                        layout.object_size, new_dirs)
    check_space(ws, need_bytes, need_inodes)
    action = "extended" if manifest.complete else "resumed"
    report = _finish(ws, layout, manifest, need, have_data, progress, console, build_pool, have)
    report.action = action
    report.notes.extend(f"left in place: {s}" for s in strays)
    return report


def _finish(ws: Path, layout: PoolLayout, manifest: Manifest, need: int, have_data: int,
            progress: bool, console: Console | None, build_pool: bool,
            have: list[set[int]] | None = None) -> PrepareReport:
    """Write the rest of data.bin, then the rest of the pool, then mark the MANIFEST
    complete."""
    report = PrepareReport(ws, "", max(need, have_data), position=manifest.pool.position)
    if have_data < need:
        with _progress("bytes", progress, console) as bar:
            report.data_written = _write_data(ws / DATA_NAME, have_data, need, bar)
    if build_pool:
        first = manifest.pool.first_index
        window = range(first, first + layout.per_dir)
        with _progress("objects", progress, console) as bar:
            report.objects_created = _build_pool(
                layout, window, have or [set() for _ in range(layout.dirs)], bar)
    manifest.data_size = max(need, have_data)
    manifest.complete = True
    manifest.completed = time.time()
    write_manifest(ws, manifest)
    return report


def open_workspace(target: Target, host: str) -> tuple[Workspace, Manifest]:
    """The prepared workspace of a target, for the probes; WorkspaceError unless complete."""
    ws = Workspace.of(target, host)
    st = _lstat(ws.dir)
    if st is None:
        raise WorkspaceError(f"{ws.dir} does not exist; run 'slowdown-probe prepare'")
    _require_dir(ws.dir, st)
    try:
        manifest = read_manifest(ws.dir)
    except ManifestError as exc:
        raise WorkspaceError(str(exc)) from exc
    if manifest is None or not manifest.complete:
        raise WorkspaceError(f"{ws.dir} is not prepared (completely); run "
                             "'slowdown-probe prepare'")
    return ws, manifest


# --- cleanup -----------------------------------------------------------------------------


def _open_dir_path(path: Path) -> int:
    """A directory fd for `path`, opened component by component without following any
    symlink (ELOOP/ENOTDIR become UnsafePathError; FileNotFoundError passes through)."""
    fd = os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    current = Path("/")
    try:
        for part in path.parts[1:]:
            current = current / part
            nfd = _open_dir_at(fd, part, current)
            os.close(fd)
            fd = nfd
    except BaseException:
        os.close(fd)
        raise
    return fd


def _open_dir_at(dir_fd: int, name: str, shown: Path | str) -> int:
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise UnsafePathError(f"{shown} is a symlink or not a directory") from exc
        raise


def _unlink_regular(dir_fd: int, name: str) -> str:
    """'removed', 'absent' or 'stray' (not a regular file: left alone)."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return "absent"
    if not stat.S_ISREG(st.st_mode):
        return "stray"
    os.unlink(name, dir_fd=dir_fd)
    return "removed"


def _rmdir_at(dir_fd: int, name: str) -> bool:
    try:
        os.rmdir(name, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOENT, errno.EBUSY):
            return False
        raise
    return True


def describe(target: Target, host: str) -> Manifest | None:
    """The MANIFEST of a target's workspace (None when there is no workspace), for a
    confirmation prompt; ForeignWorkspaceError when the directory is not ours."""
    ws = Workspace.of(target, host)
    st = _lstat(ws.dir)
    if st is None:
        return None
    _require_dir(ws.dir, st)
    manifest = read_manifest(ws.dir)
    if manifest is None:
        raise ForeignWorkspaceError(f"{ws.dir} has no slowdown MANIFEST; not touching it")
    return manifest


def cleanup(target: Target, host: str) -> CleanupReport:
    """Remove what the MANIFEST of the workspace lists, and nothing else."""
    check_host(host)
    root = Path(target.path)
    text = str(root)
    if not os.path.isabs(text) or os.path.normpath(text) != text or ".." in root.parts:
        raise UnsafePathError(f"target path {text!r} is not absolute and in normal form")
    ws = root / SLOWDOWN_DIR / host
    report = CleanupReport(ws)
    fds: list[int] = []
    try:
        try:
            root_fd = _open_dir_path(root)
            fds.append(root_fd)
            sd_fd = _open_dir_at(root_fd, SLOWDOWN_DIR, root / SLOWDOWN_DIR)
            fds.append(sd_fd)
            ws_fd = _open_dir_at(sd_fd, host, ws)
            fds.append(ws_fd)
        except FileNotFoundError:
            report.existed = False
            return report
        _require_ours(ws, os.fstat(ws_fd))
        try:
            manifest = read_manifest(ws, dir_fd=ws_fd)
        except ManifestError as exc:
            raise ForeignWorkspaceError(f"{exc}; not touching {ws}") from exc
        if manifest is None:
            raise ForeignWorkspaceError(f"{ws} has no slowdown MANIFEST; not touching it")
        if manifest.host != host:
            raise ForeignWorkspaceError(f"{ws / MANIFEST_NAME} belongs to host "
                                        f"{manifest.host!r}; not touching it")
        _cleanup_pool(ws_fd, manifest.pool, report)
        for name in (DATA_NAME, *STATE_FILES):
            outcome = _unlink_regular(ws_fd, name)
            if outcome == "removed":
                report.removed_files += 1
            elif outcome == "stray":
                report.strays.append(name)
        with os.scandir(ws_fd) as it:
            remaining = sorted(e.name for e in it if e.name != MANIFEST_NAME)
        for name in remaining:
            if not any(s == name or s.startswith(name + "/") for s in report.strays):
                report.strays.append(name)
        report.strays = sorted(set(report.strays))
        if report.strays:
            report.manifest_kept = True
            return report
        os.unlink(MANIFEST_NAME, dir_fd=ws_fd)
        report.removed_files += 1
        os.close(fds.pop())
        if _rmdir_at(sd_fd, host):
            report.removed_dirs += 1
        for parent in reversed(manifest.parents):
            if parent == SLOWDOWN_DIR:
                report.removed_dirs += _rmdir_at(root_fd, SLOWDOWN_DIR)
            elif parent == "." and root.parent != root:
                pfd = _open_dir_path(root.parent)
                try:
                    report.removed_dirs += _rmdir_at(pfd, root.name)
                finally:
                    os.close(pfd)
        return report
    finally:
        for fd in fds:
            os.close(fd)


def _cleanup_pool(ws_fd: int, pool: PoolEntry, report: CleanupReport) -> None:
    try:
        md_fd = _open_dir_at(ws_fd, pool.dir, pool.dir)
    except FileNotFoundError:
        return
    except UnsafePathError:
        report.strays.append(pool.dir)
        return
    try:
        listed = pool.dir_names()
        for name in listed:
            try:
                dfd = _open_dir_at(md_fd, name, name)
            except FileNotFoundError:
                continue
            except UnsafePathError:
                report.strays.append(f"{pool.dir}/{name}")
                continue
            try:
                with os.scandir(dfd) as it:
                    entries = list(it)
                for entry in entries:
                    i = object_index(entry.name)
                    if (i is not None and i >= pool.first_index
                            and entry.is_file(follow_symlinks=False)):
                        try:
                            os.unlink(entry.name, dir_fd=dfd)
                            report.removed_files += 1
                        except FileNotFoundError:
                            pass
                    else:
                        report.strays.append(f"{pool.dir}/{name}/{entry.name}")
            finally:
                os.close(dfd)
            if _rmdir_at(md_fd, name):
                report.removed_dirs += 1
        with os.scandir(md_fd) as it:
            report.strays.extend(f"{pool.dir}/{e.name}" for e in it if e.name not in listed)
    finally:
        os.close(md_fd)
    if _rmdir_at(ws_fd, pool.dir):
        report.removed_dirs += 1
