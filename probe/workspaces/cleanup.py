"""Workspace cleanup: remove what the MANIFEST lists, and nothing else.

cleanup removes only what the MANIFEST lists, walking the tree through directory file
descriptors opened with O_NOFOLLOW and unlinking relative to them, so a symlink is never
followed. Anything else found is left in place, with the directories holding it, and reported;
the MANIFEST then stays too, so cleanup can be run again once the strays are gone. A workspace
of another user (UnsafePathError), without a MANIFEST or with another host's MANIFEST
(ForeignWorkspaceError), or probed by a running service (WorkspaceInUseError: cleanup holds
the workspace's lock while it removes, locks/workspace_lock.py) is not touched at all. The
directories above the workspace are removed only when the MANIFEST says prepare created them,
and only when empty. The node's data file is the one its MANIFEST names (data.bin, or
write.bin); the target's shared data file, which other nodes read, is never touched here
(workspaces/shared_cleanup.py removes it).
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from slowdown.probe.layout.errors import (
    ForeignWorkspaceError,
    UnsafePathError,
    WorkspaceInUseError,
)
from slowdown.probe.layout.manifest import Manifest, PoolEntry, read_manifest, read_ours
from slowdown.probe.layout.md_pool_layout import object_index
from slowdown.probe.layout.names import MANIFEST_NAME, WORKSPACE_FILES
from slowdown.probe.layout.path_safety import check_host, lstat_or_none, require_dir, require_ours
from slowdown.probe.locks.workspace_lock import hold_for_cleanup, in_use, refusal
from slowdown.probe.probes import probe_state_files
from slowdown.probe.workspaces.prepare import SLOWDOWN_DIR, Workspace

if TYPE_CHECKING:
    from slowdown.analysis.config import Target

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass
class CleanupReport:
    workspace: Path
    removed_files: int = 0
    removed_dirs: int = 0
    strays: list[str] = field(default_factory=list)
    manifest_kept: bool = False
    existed: bool = True


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


def unlink_listed(dir_fd: int, names: tuple[str, ...], report: Any) -> None:
    """Unlink the regular files ``names`` of a MANIFEST, counted in ``report.removed_files``;
    one that is not a regular file is left and named in ``report.strays``."""
    for name in names:
        outcome = _unlink_regular(dir_fd, name)
        if outcome == "removed":
            report.removed_files += 1
        elif outcome == "stray":
            report.strays.append(name)


def unlink_manifest_if_alone(dir_fd: int, report: Any) -> bool:
    """Unlink the MANIFEST once nothing but it is left in its directory; else name what is
    left in ``report.strays`` and keep it (``report.manifest_kept``), so that cleanup can be
    run again once the strays are gone. Whether it went."""
    with os.scandir(dir_fd) as it:
        remaining = sorted(e.name for e in it if e.name != MANIFEST_NAME)
    for name in remaining:
        if not any(s == name or s.startswith(name + "/") for s in report.strays):
            report.strays.append(name)
    report.strays = sorted(set(report.strays))
    if report.strays:
        report.manifest_kept = True
        return False
    os.unlink(MANIFEST_NAME, dir_fd=dir_fd)
    report.removed_files += 1
    return True


def remove_emptied(fds: list[int], name: str | None, root: Path,
                   parents: list[str] | tuple[str, ...]) -> int:
    """Once its MANIFEST went: close the emptied directory (the last of ``fds``, after the
    target's and ``.slowdown``'s), remove it (``name`` in ``.slowdown``; None where it was
    there before prepare, so it stays), then the ``parents`` prepare made; how many went."""
    os.close(fds.pop())
    root_fd, sd_fd = fds
    removed = 0
    if name is not None and _rmdir_at(sd_fd, name):
        removed += 1
    return removed + remove_parents(root, root_fd, parents)


def remove_parents(root: Path, root_fd: int, parents: list[str] | tuple[str, ...]) -> int:
    """Remove, innermost first, the directories a MANIFEST says prepare created above a
    workspace (``.slowdown``, and ``.``: the target directory itself) if they are empty now;
    how many went."""
    removed = 0
    for parent in reversed(parents):
        if parent == SLOWDOWN_DIR:
            removed += _rmdir_at(root_fd, SLOWDOWN_DIR)
        elif parent == "." and root.parent != root:
            pfd = _open_dir_path(root.parent)
            try:
                removed += _rmdir_at(pfd, root.name)
            finally:
                os.close(pfd)
    return removed


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
    st = lstat_or_none(ws.dir)
    if st is None:
        return None
    require_dir(ws.dir, st)
    manifest = read_manifest(ws.dir)
    if manifest is None:
        raise ForeignWorkspaceError(f"{ws.dir} has no slowdown MANIFEST; not touching it")
    holder = in_use(ws.dir)
    if holder is not None:  # before asking: a service probes it
        raise WorkspaceInUseError(refusal(ws.dir, holder))
    return manifest


def normal_root(target: Target) -> Path:
    """The target directory, refused unless absolute and in normal form (no ``..``)."""
    root = Path(target.path)
    text = str(root)
    if not os.path.isabs(text) or os.path.normpath(text) != text or ".." in root.parts:
        raise UnsafePathError(f"target path {text!r} is not absolute and in normal form")
    return root


def cleanup(target: Target, host: str) -> CleanupReport:
    """Remove what the MANIFEST of the workspace lists, and nothing else."""
    check_host(host)
    root = normal_root(target)
    ws = root / SLOWDOWN_DIR / host
    report = CleanupReport(ws)
    fds: list[int] = []
    lock = None
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
        require_ours(ws, os.fstat(ws_fd))
        manifest = read_ours(read_manifest, ws, dir_fd=ws_fd)
        if manifest is None:
            raise ForeignWorkspaceError(f"{ws} has no slowdown MANIFEST; not touching it")
        if manifest.host != host:
            raise ForeignWorkspaceError(f"{ws / MANIFEST_NAME} belongs to host "
                                        f"{manifest.host!r}; not touching it")
        lock = hold_for_cleanup(ws_fd, ws, host)  # held until the end; removed as listed
        _cleanup_pool(ws_fd, manifest.pool, report)
        state_files = (*probe_state_files(), *WORKSPACE_FILES)  # what the probes wrote too
        unlink_listed(ws_fd, (manifest.data_name, *state_files), report)  # data/write.bin
        if not unlink_manifest_if_alone(ws_fd, report):
            return report
        report.removed_dirs += remove_emptied(fds, host, root, manifest.parents)
        return report
    finally:
        for fd in fds:
            os.close(fd)
        if lock is not None:
            lock.close()


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
