"""`cleanup --shared`: remove a target's shared data file, as its MANIFEST lists it, once no
workspace reads it any more.

A node's cleanup removes its own workspace and never touches the shared data file, which the
other nodes go on reading. `cleanup --shared` runs after it, from any node: it takes the
shared file's claim (so no prepare writes or resumes the file meanwhile; refused while a live
prepare holds it), refuses while a workspace in `.slowdown/` still reads it (a MANIFEST that
says data_file = "shared", or one it cannot read: that one might), then removes data.bin and
the state files, the MANIFEST last, the directory unless it was there before the first
prepare, and the directories above that prepare made, when empty. Anything else found is
left in place, with the MANIFEST, and named. Directories are walked through descriptors
opened with O_NOFOLLOW, as workspaces/cleanup.py walks a workspace. The workspace of a node
that is gone for good is removed with `cleanup` run under that node's host name (`host` in a
configuration).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from slowdown.probe.layout.errors import ForeignWorkspaceError, UnsafePathError, WorkspaceError
from slowdown.probe.layout.manifest import (
    SHARED_STATE_FILES,
    ManifestError,
    read_manifest,
    read_ours,
    read_shared_manifest,
)
from slowdown.probe.layout.names import DATA_NAME, SHARED_DIR
from slowdown.probe.layout.path_safety import check_host, require_ours
from slowdown.probe.locks.shared_claim import ClaimHolder, try_claim
from slowdown.probe.workspaces.cleanup import (
    _open_dir_at,
    _open_dir_path,
    normal_root,
    remove_emptied,
    unlink_listed,
    unlink_manifest_if_alone,
)
from slowdown.probe.workspaces.prepare import SLOWDOWN_DIR
from slowdown.probe.workspaces.shared_data import CLAIM_NAME

if TYPE_CHECKING:
    from slowdown.analysis.config import Target


@dataclass
class SharedCleanupReport:
    directory: Path
    existed: bool = True
    removed_files: int = 0
    removed_dirs: int = 0
    strays: list[str] = field(default_factory=list)
    manifest_kept: bool = False


def readers(sd_fd: int, sd: Path) -> list[str]:
    """Host names of the workspaces under `.slowdown/` that read the shared data file."""
    with os.scandir(sd_fd) as it:
        names = sorted(e.name for e in it if e.is_dir(follow_symlinks=False)
                       and e.name != SHARED_DIR and not e.name.startswith("."))
    found = []
    for name in names:
        try:
            dfd = _open_dir_at(sd_fd, name, sd / name)
        except (FileNotFoundError, UnsafePathError):
            continue
        try:
            manifest = read_manifest(sd / name, dir_fd=dfd)
        except ManifestError:
            found.append(name)  # cannot tell: it might
            continue
        finally:
            os.close(dfd)
        if manifest is not None and manifest.data_file == "shared":
            found.append(name)
    return found


def cleanup_shared(target: Target, host: str) -> SharedCleanupReport:
    """Remove the target's shared data file (what its MANIFEST lists), unless it is read."""
    check_host(host)
    root = normal_root(target)
    sd = root / SLOWDOWN_DIR
    shared = sd / SHARED_DIR
    report = SharedCleanupReport(shared)
    fds: list[int] = []
    try:
        try:
            fds.append(_open_dir_path(root))
            fds.append(_open_dir_at(fds[0], SLOWDOWN_DIR, sd))
            fds.append(_open_dir_at(fds[1], SHARED_DIR, shared))
        except FileNotFoundError:
            report.existed = False
            return report
        _, sd_fd, shared_fd = fds
        require_ours(shared, os.fstat(shared_fd))
        manifest = read_ours(read_shared_manifest, shared, dir_fd=shared_fd)
        if manifest is None:
            raise ForeignWorkspaceError(f"{shared} has no slowdown MANIFEST; not touching it")
        got = try_claim(sd / CLAIM_NAME, host)
        if isinstance(got, ClaimHolder):
            raise WorkspaceError(f"{shared / DATA_NAME} is being prepared by {got.describe()}; "
                                 "run cleanup --shared later")
        try:
            users = readers(sd_fd, sd)
            if users:
                more = f" and {len(users) - 5} more" if len(users) > 5 else ""
                raise WorkspaceError(
                    f"{shared / DATA_NAME} is still read by the workspaces of "
                    f"{', '.join(users[:5])}{more}: run cleanup on those nodes first (for a "
                    "node that is gone, with its name as host in a configuration)")
            unlink_listed(shared_fd, (DATA_NAME, *SHARED_STATE_FILES), report)
            if not unlink_manifest_if_alone(shared_fd, report):
                return report
        finally:
            got.release()
        report.removed_dirs += remove_emptied(
            fds, None if manifest.dir_existed else SHARED_DIR, root, manifest.parents)
        return report
    finally:
        for fd in fds:
            os.close(fd)
