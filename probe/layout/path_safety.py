"""Path safety: where slowdown may create, probe and remove a workspace.

A target path passes `check_target_path` only when it is absolute and in normal form, is not
`/`, a system directory, a pseudo filesystem or a home directory itself (also under another
name: a bind mount of a home is recognised by its inode), and every existing component of it
is a real directory, never a symlink; only its last component may be missing. A host name
passes `check_host` only when it is one path component that does not start with a dot.
`check_workspace` is what the service's worker checks before it probes: it touches the target,
so it runs in the worker, and it imports nothing heavy. `require_dir` and `require_ours` refuse
a symlink, a non-directory and a directory of another user. Refusals are UnsafePathError (or
WorkspaceError for what is merely missing or not a directory), with a one-line message; a
filesystem that fails a call on the way (ENOTCONN, EIO) is TargetUnavailableError, which keeps
the errno: that is no refusal of the path.
"""

from __future__ import annotations

import errno
import os
import pwd
import stat
from contextlib import suppress
from pathlib import Path

from slowdown.analysis.config.defaults import PSEUDO_FS, SYSTEM_DIRS
from slowdown.probe.layout.errors import (
    TargetUnavailableError,
    UnsafePathError,
    WorkspaceError,
)


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
        st = lstat_or_none(path)
        if st is None:
            return
        require_dir(path, st)
        require_ours(path, st)


def _refuse_symlinks(path: Path) -> None:
    """Every existing component must be a real directory; only the last may be missing."""
    current = Path("/")
    parts = path.parts[1:]
    for n, part in enumerate(parts):
        current = current / part
        try:
            st = os.lstat(current)
        except FileNotFoundError as exc:
            if n != len(parts) - 1:  # named ENOENT: an evicted CephFS mount answers so
                raise WorkspaceError(f"target path {path}: {current} does not exist (prepare "
                                     "creates only the target directory itself)") from exc
            return
        except OSError as exc:
            if exc.errno not in (errno.EACCES, errno.EPERM):  # the filesystem failed the call
                raise TargetUnavailableError(f"target path {path}: {current}: {exc.strerror}",
                                             exc.errno) from exc
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


def lstat_or_none(path: Path) -> os.stat_result | None:
    """lstat, None when the path does not exist."""
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None


def require_dir(path: Path, st: os.stat_result) -> None:
    """A real directory: UnsafePathError for a symlink, WorkspaceError for anything else."""
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePathError(f"{path} is a symlink")
    if not stat.S_ISDIR(st.st_mode):
        raise WorkspaceError(f"{path} is not a directory")


def require_ours(path: Path, st: os.stat_result) -> None:
    """Owned by this user (effective uid), else UnsafePathError."""
    uid = os.geteuid()
    if st.st_uid != uid:
        raise UnsafePathError(f"{path} belongs to uid {st.st_uid}, not to this user (uid {uid})")
