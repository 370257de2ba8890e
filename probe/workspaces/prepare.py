"""Workspace preparation: `<target>/.slowdown/<host>/` with data.bin, md/, MANIFEST.

prepare is resumable and idempotent. It writes the MANIFEST (complete=false) before it creates
anything inside the workspace, so an interrupted run leaves a workspace that is recognisably
ours; a second run continues from what exists: data.bin from its verified length (the last
whole block that carries prepare's stamp), the pool from the objects present. A run after
completion changes nothing. Before creating anything it checks the path (no symlink in it, not
`/`, a system directory or a home directory itself, a workspace that belongs to us) and the
free space and inodes (statvfs) against what remains to be written plus a margin (what the
filesystem does not tell, CephFS's free inodes, is not checked and said in the report's notes).

The pool follows MD-Workbench's layout (see probes/md.py); a `.slowdown/<host>` that holds
exactly a pool precreated by `md-workbench -1 -o <workspace>/md -D=<dirs> -P=<files per dir>
-S=<object size>` (and optionally its status file `md-workbench.status`) is adopted: listed in
the MANIFEST as adopted, its position honoured. Anything else without our MANIFEST is refused.
pool_files must be a multiple of pool_dirs (md-workbench's -P counts objects per data set).

With data_file = "shared" the workspace holds write.bin (write_size) instead of data.bin, and
prepare first makes sure of the target's shared data file (workspaces/shared_data.py): created by
the first node, taken as it is by the others, or "busy" while another node writes it (then this
node's workspace is prepared all the same, and `wait` seconds are given to the other node). A
workspace keeps the layout it was prepared with: one with its own data.bin (prepared before
shared data files, or with data_file = "own") goes on being probed as it is, and prepare says
how to move it. Where the filesystem refuses O_DIRECT, prepare says so when the data file is
not larger than this node's RAM: the fallback (posix_fadvise) needs that.

This module orchestrates; the jobs are done by layout/path_safety (the path checks), space
(free space and inodes), data_file (data.bin), md_pool (creating the pool), md_workbench_pool
(recognising a pool to adopt), shared_data (the shared data file) and progress_bar (the bars).
cleanup.py removes a workspace again, shared_cleanup.py the shared data file.
"""

from __future__ import annotations

import os
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from slowdown.analysis.units import format_size
from slowdown.probe.layout.errors import (
    ForeignWorkspaceError,
    UnsafePathError,
    WorkspaceError,
)
from slowdown.probe.layout.manifest import (
    Manifest,
    ManifestError,
    PoolEntry,
    read_manifest,
    read_ours,
    write_manifest,
)
from slowdown.probe.layout.md_pool_layout import PoolLayout
from slowdown.probe.layout.md_status import write_status
from slowdown.probe.layout.names import (
    BLOCK_SIZE,
    DATA_NAME,
    MANIFEST_NAME,
    POOL_NAME,
    SHARED_DIR,
    STATUS_NAME,
    WRITE_NAME,
)
from slowdown.probe.layout.path_safety import (
    check_host,
    check_target_path,
    lstat_or_none,
    require_dir,
    require_ours,
)
from slowdown.probe.probes import DATA_FILE, MD_POOL, registered
from slowdown.probe.probes.data import FADVISE, DataProbe
from slowdown.probe.workspaces.data_file import verified_length, write_data
from slowdown.probe.workspaces.md_pool import fill_pool, scan_pool
from slowdown.probe.workspaces.md_workbench_pool import recognise_md_workbench
from slowdown.probe.workspaces.progress_bar import progress_bar
from slowdown.probe.workspaces.shared_data import (
    SharedReport,
    inspect_shared,
    shared_paths,
    wait_shared,
)
from slowdown.probe.workspaces.space import check_space, estimate

if TYPE_CHECKING:
    from rich.console import Console

    from slowdown.analysis.config import Target

SLOWDOWN_DIR = ".slowdown"


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
    def write(self) -> Path:
        """The node's write file beside a shared data file."""
        return self.dir / WRITE_NAME

    @property
    def shared_data(self) -> Path:
        """The target's shared data file: `<target>/.slowdown/shared/data.bin`."""
        return self.dir.parent / SHARED_DIR / DATA_NAME

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
    shared: SharedReport | None = None  # the shared data file, with data_file = "shared"
    mode: str | None = None  # the data probe's mode here: "direct" or "fadvise"
    parents: list[str] = field(default_factory=list)  # directories this run made above it


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


def _write_size(target: Target) -> int:
    size = int(target.write_size)
    if size < BLOCK_SIZE or size % BLOCK_SIZE:
        raise WorkspaceError(f"target {target.name}: write size {size} is not a positive "
                             "multiple of 1 MiB")
    return size


def _mkdir_new(path: Path) -> bool:
    """mkdir that another node may beat to it: True when this call made the directory."""
    try:
        os.mkdir(path, 0o755)
    except FileExistsError:
        require_dir(path, os.lstat(path))
        return False
    return True


def _data_size(target: Target, ram_bytes: int | None) -> int:
    ds = target.data_size
    size = ds.resolve(ram_bytes) if ram_bytes is not None else ds.resolve()
    if size < BLOCK_SIZE or size % BLOCK_SIZE:
        raise WorkspaceError(f"target {target.name}: data size {size} is not a positive "
                             "multiple of 1 MiB")
    return int(size)


MAKES = (DATA_FILE, MD_POOL)  # the parts of a workspace prepare makes, for every probe


def _check_needs() -> None:
    """Refuse before anything is made when a registered probe needs a part prepare does not
    make: its worker would fail every tick."""
    for probe in registered():
        missing = [need for need in probe.needs if need not in MAKES]
        if missing:
            raise WorkspaceError(f"probe {probe.name!r} needs {', '.join(missing)}, which "
                                 "prepare does not make")


def prepare(target: Target, host: str, *, ram_bytes: int | None = None,
            progress: bool = True, console: Console | None = None,
            md_workbench_status: Path | None = None, wait: float = 0.0) -> PrepareReport:
    """Create (or finish, or adopt) the workspace of `target` on `host`, and with
    data_file = "shared" the target's shared data file unless another node is writing it.

    `md_workbench_status`: md-workbench's --run-info-file when adopting a pool and the file
    is not `md-workbench.status` inside the workspace. `wait`: seconds to wait for another
    node that is writing the shared data file (report.shared.busy when it has not finished).
    """
    check_host(host)
    _check_needs()
    shared = target.data_file == "shared"
    if shared and host == SHARED_DIR:
        raise WorkspaceError(f"host name {host!r} is the directory of the shared data file "
                             "(.slowdown/shared); set host to another name")
    dirs, per_dir, object_size = _pool_shape(target)
    need = _write_size(target) if shared else _data_size(target, ram_bytes)
    shared_need = _data_size(target, ram_bytes) if shared else 0
    root = Path(target.path)
    if target.create_parents:
        root.parent.mkdir(parents=True, exist_ok=True)
    check_target_path(root)
    sd = root / SLOWDOWN_DIR
    ws = sd / host
    layout = PoolLayout(ws / POOL_NAME, dirs, per_dir, object_size)

    root_st = lstat_or_none(root)
    sd_st = lstat_or_none(sd) if root_st is not None else None
    if sd_st is not None:
        require_dir(sd, sd_st)
    ws_st = lstat_or_none(ws) if sd_st is not None else None
    manifest: Manifest | None = None
    adopt: tuple[int, int] | None = None
    if ws_st is not None:
        require_dir(ws, ws_st)
        require_ours(ws, ws_st)
        manifest = read_ours(read_manifest, ws)
        if manifest is None:
            entries = set(os.listdir(ws))
            if entries and not entries <= {POOL_NAME, STATUS_NAME}:
                raise ForeignWorkspaceError(f"{ws} exists without a slowdown MANIFEST (it holds "
                                            f"{sorted(entries)[:3]}); not touching it")
            if entries:
                status = md_workbench_status or ws / STATUS_NAME
                adopt = recognise_md_workbench(ws, dirs, per_dir, object_size, status)

    if manifest is not None and manifest.data_file != target.data_file:
        report = _other_layout(target, ws, manifest)
    elif manifest is not None:
        report = _resume(target, ws, layout, manifest, need, progress, console, host)
    else:
        report = _create(target, host, ws, layout, need, shared_need, adopt,
                         (root_st, sd_st, ws_st), progress, console)
    if shared and (manifest is None or manifest.data_file == "shared"):
        report.shared = wait_shared(target, host, shared_need, wait, parents=report.parents,
                                    progress=progress, console=console)
    if report.shared is None or not report.shared.busy:
        _direct_io(report, ws, ram_bytes)
    return report


def _create(target: Target, host: str, ws: Path, layout: PoolLayout, need: int,
            shared_need: int, adopt: tuple[int, int] | None,
            found: tuple[os.stat_result | None, ...], progress: bool,
            console: Console | None) -> PrepareReport:
    """Nothing of ours yet: check the space for everything (the shared data file too, unless
    it is ready), then create."""
    root_st, sd_st, ws_st = found
    sd = ws.parent
    root = sd.parent
    dirs, per_dir, object_size = layout.dirs, layout.per_dir, layout.object_size
    where = ws if ws_st is not None else sd if sd_st is not None else (
        root if root_st is not None else root.parent)
    objects = 0 if adopt is not None else layout.files
    new_dirs = (0 if adopt is not None else dirs + 1) + (ws_st is None) + (sd_st is None) + (
        root_st is None)
    extra = 0
    if shared_need:
        ready = inspect_shared(shared_paths(target)[1]) if sd_st is not None else None
        have = ready.data_size if ready is not None and ready.complete else 0
        extra = max(shared_need - have, 0)
        new_dirs += ready is None
    need_bytes, need_inodes = estimate(where, need + extra, objects, object_size, new_dirs)
    unchecked = check_space(where, need_bytes, need_inodes)

    parents: list[str] = []
    if root_st is None and _mkdir_new(root):  # other nodes may be preparing at once
        parents.append(".")
    if sd_st is None and _mkdir_new(sd):
        parents.append(SLOWDOWN_DIR)
    if ws_st is None:
        os.mkdir(ws, 0o755)
    # The MANIFEST comes first: from here on an interrupted prepare leaves a workspace that
    # prepare continues and cleanup removes.
    position, first = adopt if adopt is not None else (0, 0)
    manifest = Manifest(
        host=host, target=target.name, uid=os.geteuid(), created=time.time(), data_size=need,
        pool=PoolEntry(dirs=dirs, files_per_dir=per_dir, object_size=object_size,
                       first_index=first, position=position, adopted=adopt is not None),
        parents=parents, workspace_adopted=adopt is not None and ws_st is not None,
        data_file=target.data_file,
    )
    write_manifest(ws, manifest)
    write_status(ws / STATUS_NAME, position, dirs)
    report = _finish(ws, layout, manifest, need, 0, progress, console, adopt is None)
    report.action = "adopted" if adopt is not None else "created"
    report.parents = parents
    report.notes.extend(unchecked)
    return report


def _other_layout(target: Target, ws: Path, manifest: Manifest) -> PrepareReport:
    """A workspace prepared with the other data_file: probed as it is, never converted."""
    was, now = manifest.data_file, target.data_file
    if not manifest.complete:
        raise WorkspaceError(f"{ws} was prepared with data_file = {was!r} and did not finish; "
                             f"target {target.name} now says {now!r}: run cleanup first")
    what = ("keeps its own data.bin" if was == "own" else "reads the shared data file")
    report = PrepareReport(ws, "unchanged", manifest.data_size, position=manifest.pool.position)
    report.notes.append(f"{ws} {what} (prepared with data_file = {was!r}) and is probed so; "
                        f"for data_file = {now!r} run cleanup, then prepare")
    return report


def _direct_io(report: PrepareReport, ws: Path, ram_bytes: int | None) -> None:
    """The data probe's mode on this filesystem; a note when O_DIRECT is refused and the
    file it reads is not larger than this node's RAM (then reads may hit the page cache)."""
    try:
        with DataProbe.from_workspace(ws) as probe:
            report.mode, size = probe.mode, probe.size
    except (OSError, ManifestError) as exc:
        report.notes.append(f"the data probe cannot open its files: {exc}")
        return
    if report.mode != FADVISE:
        return
    if ram_bytes is None:
        import psutil

        ram_bytes = int(psutil.virtual_memory().total)
    if size <= ram_bytes:
        report.notes.append(
            f"this filesystem refuses O_DIRECT: the data probe falls back to posix_fadvise, "
            f"and a data file not larger than this node's RAM ({format_size(size)} <= "
            f"{format_size(ram_bytes)}) may be read from its page cache; give the target "
            'data_size = "4xRAM"')


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
    data = ws / manifest.data_name
    st = lstat_or_none(data)
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise UnsafePathError(f"{data} is not a regular file")
    size = st.st_size if st is not None else 0
    if manifest.complete:
        # The pool has been rotating since: never touch it again; only data.bin may grow
        # (a larger data_size in the configuration).
        for path in [layout.root] + [layout.root / layout.dir_name(d)
                                     for d in range(layout.dirs)]:
            pst = lstat_or_none(path)
            if pst is None:
                raise WorkspaceError(f"{path} is missing from a prepared workspace; run "
                                     "cleanup, then prepare")
            require_dir(path, pst)
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
        have, strays = scan_pool(layout, window)
        objects = layout.files - sum(len(s) for s in have)
        new_dirs = sum(lstat_or_none(p) is None for p in [layout.root] + [
            layout.root / layout.dir_name(d) for d in range(layout.dirs)])
    need_bytes, need_inodes = estimate(ws, max(need - have_data, 0), objects,
                                       layout.object_size, new_dirs)
    unchecked = check_space(ws, need_bytes, need_inodes)
    action = "extended" if manifest.complete else "resumed"
    report = _finish(ws, layout, manifest, need, have_data, progress, console, build_pool, have)
    report.action = action
    report.notes.extend(unchecked)
    report.notes.extend(f"left in place: {s}" for s in strays)
    return report


def _finish(ws: Path, layout: PoolLayout, manifest: Manifest, need: int, have_data: int,
            progress: bool, console: Console | None, build_pool: bool,
            have: list[set[int]] | None = None) -> PrepareReport:
    """Write the rest of data.bin, then the rest of the pool, then mark the MANIFEST
    complete."""
    report = PrepareReport(ws, "", max(need, have_data), position=manifest.pool.position)
    if have_data < need:
        with progress_bar("bytes", progress, console) as bar:
            report.data_written = write_data(ws / manifest.data_name, have_data, need, bar)
    if build_pool:
        first = manifest.pool.first_index
        window = range(first, first + layout.per_dir)
        with progress_bar("objects", progress, console) as bar:
            report.objects_created = fill_pool(
                layout, window, have or [set() for _ in range(layout.dirs)], bar)
    manifest.data_size = max(need, have_data)
    manifest.complete = True
    manifest.completed = time.time()
    write_manifest(ws, manifest)
    return report
