"""Which filesystem a path is on, and whether SQLite's WAL is safe there.

A WAL database keeps its readers and its writer in step through shared memory (the ``-shm``
file, mapped by every connection) and POSIX locks. Both work only within one kernel: on a
filesystem that other machines mount too (NFS, SMB, Lustre, GPFS, CephFS, GlusterFS, ...)
two nodes writing one file corrupt it, and even a single node depends on the remote lock
manager. slowdown's service refuses such a database unless told otherwise, and the built-in
default moves off a shared home.

The answer comes from ``/proc/self/mountinfo``: the mount whose device number (major:minor)
is the ``st_dev`` of the path, or of its nearest existing ancestor (a database not created
yet). When several mounts share the device (bind mounts) or none does (a btrfs subvolume
reports a device of its own), the mount point that is the longest prefix of the resolved
path decides. Looking costs one ``stat`` per missing component and one read of mountinfo;
the ``stat`` touches the filesystem in question, so this is for a database (which must be
local), and for a target only where the caller touches it anyway (prepare's estimate of the
room a small file takes there), never in the service.

FUSE: ``fuse.<name>`` and bare ``fuse`` count as shared (the server behind a FUSE mount may
be anything, sshfs, s3fs, a GlusterFS or CephFS client). ``fuseblk`` does not: it is a FUSE
driver of a block device on this machine (ntfs-3g, exFAT), as local as ext4.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

MOUNTINFO = Path("/proc/self/mountinfo")

# Filesystems other machines may mount at the same time: SQLite's WAL is unsafe on them.
NETWORK = frozenset({
    "nfs", "nfs4", "cifs", "smb3", "smbfs", "ncpfs", "9p", "afs", "coda", "davfs",
    "virtiofs", "vboxsf",
})
CLUSTER = frozenset({
    "lustre", "gpfs", "ceph", "glusterfs", "beegfs", "fhgfs", "ocfs2", "gfs2", "orangefs",
    "pvfs2", "panfs", "wekafs", "dvs",
})

_OCTAL = re.compile(r"\\([0-7]{3})")


@dataclass(frozen=True)
class Filesystem:
    """A mount: its type as mountinfo names it (``nfs4``, ``fuse.sshfs``), where it is mounted
    and what is mounted there."""

    fstype: str
    mount_point: str
    source: str

    @property
    def kind(self) -> str | None:
        """``network``, ``cluster`` or ``FUSE`` for a filesystem other machines may share;
        None for a local one."""
        if self.fstype in NETWORK:
            return "network"
        if self.fstype in CLUSTER:
            return "cluster"
        if self.fstype == "fuse" or self.fstype.startswith("fuse."):
            return "FUSE"
        return None

    @property
    def shared(self) -> bool:
        """True where SQLite's WAL is unsafe: a filesystem other machines may mount too."""
        return self.kind is not None

    def describe(self) -> str:
        """``nfs4 (a network filesystem)``, ``fuse.sshfs (a FUSE filesystem, which may be a
        network one)``, ``ext4``."""
        kind = self.kind
        if kind is None:
            return self.fstype
        if kind == "FUSE":
            return f"{self.fstype} (a FUSE filesystem, which may be a network one)"
        return f"{self.fstype} (a {kind} filesystem)"


@dataclass(frozen=True)
class _Mount:
    device: tuple[int, int]
    mount_point: str
    fstype: str
    source: str


def _unescape(text: str) -> str:
    return _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), text)


def parse_mountinfo(lines: Iterable[str]) -> list[_Mount]:
    """The mounts of mountinfo lines, in order (a later one is mounted on top)."""
    mounts = []
    for line in lines:
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 5 or not tail:
            continue
        major, _, minor = fields[2].partition(":")
        try:
            device = (int(major), int(minor))
        except ValueError:
            continue
        mounts.append(_Mount(device, _unescape(fields[4]), tail[0],
                             _unescape(tail[1]) if len(tail) > 1 else ""))
    return mounts


def existing_ancestor(path: Path) -> tuple[Path, os.stat_result]:
    """The path itself or its nearest ancestor that can be looked at, with its stat."""
    current = Path(os.path.abspath(path))
    while True:
        try:
            return current, os.stat(current)
        except OSError:
            if current.parent == current:
                raise
            current = current.parent


def _under(path: str, mount_point: str) -> bool:
    return mount_point == "/" or path == mount_point or path.startswith(mount_point + "/")


def filesystem_of(path: Path | str, mountinfo: Path = MOUNTINFO) -> Filesystem | None:
    """The filesystem ``path`` (or its nearest existing ancestor) is on; None when mountinfo
    cannot be read or names no mount for it."""
    try:
        existing, st = existing_ancestor(Path(path))
        with open(mountinfo, encoding="utf-8", errors="surrogateescape") as f:
            mounts = parse_mountinfo(f)
    except OSError:
        return None
    resolved = os.path.realpath(existing)
    device = (os.major(st.st_dev), os.minor(st.st_dev))
    same = [m for m in mounts if m.device == device]
    candidates = [m for m in same if _under(resolved, m.mount_point)] or same or [
        m for m in mounts if _under(resolved, m.mount_point)]
    if not candidates:
        return None
    # The longest mount point; among equals the last (mounted on top).
    best = max(reversed(candidates), key=lambda m: len(m.mount_point))
    return Filesystem(best.fstype, best.mount_point, best.source)
