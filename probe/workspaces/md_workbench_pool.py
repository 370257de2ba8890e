"""Recognising a pool that md-workbench precreated, so that prepare can adopt it.

A `.slowdown/<host>` without our MANIFEST is adopted only when it holds exactly a pool made by
`md-workbench -1 -o <workspace>/md -D=<dirs> -P=<files per dir> -S=<object size>` (and maybe
its status file): `recognise_md_workbench` either returns the pool's rotation position or
raises ForeignWorkspaceError saying what did not match. It only reads (lstat, listdir, one
read of the status file without following a symlink); it never changes anything.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from slowdown.probe.layout.errors import ForeignWorkspaceError
from slowdown.probe.layout.manifest import ManifestError
from slowdown.probe.layout.md_pool_layout import object_index
from slowdown.probe.layout.md_status import parse_status
from slowdown.probe.layout.names import POOL_NAME
from slowdown.probe.layout.path_safety import lstat_or_none


def recognise_md_workbench(ws: Path, dirs: int, per_dir: int, object_size: int,
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
    st = lstat_or_none(md)
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
