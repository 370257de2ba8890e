"""Workspace preparation: `<target>/.slowdown/<host>/` with data.bin, md/, MANIFEST.

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

This module orchestrates; the jobs are done by pathsafety (the path checks), space (free space
and inodes), datafile (data.bin), pool (creating the pool), mdworkbench (recognising a pool to
adopt) and progressbar (the bars). cleanup.py removes a workspace again.
"""

from __future__ import annotations

import os
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from slowdown.probe.datafile import verified_length, write_data
from slowdown.probe.manifest import (
    BLOCK_SIZE,
    DATA_NAME,
    MANIFEST_NAME,
    POOL_NAME,
    STATUS_NAME,
    Manifest,
    ManifestError,
    PoolEntry,
    read_manifest,
    write_manifest,
    write_status,
)
from slowdown.probe.md_probe import PoolLayout
from slowdown.probe.mdworkbench import recognise_md_workbench
from slowdown.probe.pathsafety import (
    check_host,
    check_target_path,
    lstat_or_none,
    require_dir,
    require_ours,
)
from slowdown.probe.pool import fill_pool, scan_pool
from slowdown.probe.progressbar import progress_bar
from slowdown.probe.space import check_space, estimate
from slowdown.probe.workspace_errors import (
    ForeignWorkspaceError,
    UnsafePathError,
    WorkspaceError,
)

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
    if target.create_parents:
        root.parent.mkdir(parents=True, exist_ok=True)
    check_target_path(root)
    sd = root / SLOWDOWN_DIR
    ws = sd / host
    layout = PoolLayout(ws / POOL_NAME, dirs, per_dir, object_size)
    uid = os.geteuid()

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
                adopt = recognise_md_workbench(ws, dirs, per_dir, object_size, status)

    if manifest is not None:
        return _resume(target, ws, layout, manifest, need, progress, console, host)

    # Nothing of ours yet: check the space for everything, then create.
    where = ws if ws_st is not None else sd if sd_st is not None else (
        root if root_st is not None else root.parent)
    objects = 0 if adopt is not None else layout.files
    new_dirs = (0 if adopt is not None else dirs + 1) + (ws_st is None) + (sd_st is None) + (
        root_st is None)
    need_bytes, need_inodes = estimate(where, need, objects, object_size, new_dirs)
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
        with progress_bar("bytes", progress, console) as bar:
            report.data_written = write_data(ws / DATA_NAME, have_data, need, bar)
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
