"""The md pool of a workspace: finding what a first prepare created, creating the rest.

The pool is laid out as MD-Workbench lays out its objects (layout/md_pool_layout.PoolLayout).
`scan_pool` reports which objects of the precreate window exist whole in each data set, unlinks
truncated ones (a kill between create and write) and reports, without touching them, names outside
the window; `fill_pool` creates the missing directories and objects (O_EXCL, never through a
symlink), in md-workbench's precreate order, and fsyncs the data set directories, so a second
run after an interruption creates exactly what is missing. An OSError while creating the
objects becomes a WorkspaceError that says to run prepare again.
"""

from __future__ import annotations

import os
from typing import Any

from slowdown.analysis.atomic_write import write_all
from slowdown.probe.layout.errors import WorkspaceError
from slowdown.probe.layout.md_content import object_content
from slowdown.probe.layout.md_pool_layout import PoolLayout, object_index
from slowdown.probe.layout.names import POOL_NAME
from slowdown.probe.layout.path_safety import lstat_or_none, require_dir


def scan_pool(layout: PoolLayout, window: range) -> tuple[list[set[int]], list[str]]:
    """Which objects of the window exist whole in each data set; unlink truncated ones
    (a kill between create and write); names outside the window are reported."""
    have: list[set[int]] = []
    strays: list[str] = []
    for d in range(layout.dirs):
        present: set[int] = set()
        dpath = layout.root / layout.dir_name(d)
        st = lstat_or_none(dpath)
        if st is None:
            have.append(present)
            continue
        require_dir(dpath, st)
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


def fill_pool(layout: PoolLayout, window: range, have: list[set[int]],
              progress: Any) -> int:
    """Create the missing objects of the window in md-workbench's precreate order (object
    index outer, data set inner); return how many were created."""
    for path in [layout.root] + [layout.root / layout.dir_name(d) for d in range(layout.dirs)]:
        st = lstat_or_none(path)
        if st is None:
            os.mkdir(path, 0o755)
        else:
            require_dir(path, st)
    total = layout.dirs * len(window)
    done = sum(len(s) for s in have)
    task = progress.add_task(f"{POOL_NAME}/", total=total, completed=done)
    payload = object_content(layout.object_size)  # md-workbench's, so -X verifies
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
                    write_all(fd, payload)
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
