"""Why prepare or cleanup stops: one exception family, each message one line for the user.

Every refusal of the workspace modules (layout/path_safety; in workspaces/: space, data_file,
md_pool, md_workbench_pool, prepare, cleanup) is a WorkspaceError, so a caller that catches it
catches all of them; the subclasses say which kind of refusal it was. This module imports nothing.
"""

from __future__ import annotations


class WorkspaceError(Exception):
    """prepare or cleanup cannot go on; the message is one line for the user."""


class UnsafePathError(WorkspaceError):
    """The target path or workspace is not a place slowdown may write to."""


class TargetUnavailableError(WorkspaceError):
    """The target's filesystem failed a call while the path was checked (ENOTCONN, EIO, ...):
    not a refusal of the path, a filesystem that does not answer; ``errno`` says how."""

    def __init__(self, message: str, code: int | None) -> None:
        super().__init__(message)
        self.errno = code


class NoSpaceError(WorkspaceError):
    """Not enough free space or inodes for what remains to be written."""


class ForeignWorkspaceError(WorkspaceError):
    """A `.slowdown/<host>` directory that is not ours (no MANIFEST, not an md-workbench
    pool)."""


class WorkspaceInUseError(WorkspaceError):
    """A service (or its worker, stuck) probes the workspace: cleanup leaves it alone."""
