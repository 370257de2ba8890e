"""Free space and inodes: prepare writes nothing it has not first checked room for.

`estimate` turns what remains to be written (data bytes, pool objects, new directories) into
bytes and inodes as the filesystem allocates them (one inode per file and directory, three
more for data.bin and the state files); `check_space` raises NoSpaceError unless statvfs
shows room for that plus a margin (16 MiB and 2 % of the bytes; 16 inodes and 1 % of them).

What a small file or a directory costs is the filesystem's allocation unit (`allocation`):
- in general its fundamental block size, f_frsize (4 KiB on ext4, XFS, tmpfs);
- on CephFS (mountinfo type `ceph` or `fuse.ceph-fuse`) f_bsize and f_frsize name the
  layout's object size (4 MiB by default), while a file's object in RADOS holds only the
  bytes written: a small file costs its size in 4 KiB units (BlueStore's min_alloc_size since
  Ceph 16.2; free space there is already counted per replica), and 4 KiB more for what its
  object and inode add beside the bytes (the object's record in BlueStore's RocksDB, the
  inode in the metadata pool, both on the same OSDs as a rule). Measured on Ceph 16.2: the
  data pool held 4 KiB per 3901-byte file; statvfs's free space fell by 9.5 KiB per file in
  all, the metadata pool's journal and RocksDB included.
The type comes from the mount (/proc/self/mountinfo, by the path's device), not from the
numbers; a mount not found falls back to f_frsize.

What statvfs cannot tell is not checked, and `check_space` says so in its notes: inodes where
the filesystem keeps no count (f_files 0; CephFS's -1 free: layout/fs_counts.py), bytes where
it reports no size (f_blocks 0, as ramfs).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from slowdown.analysis.store.filesystem import MOUNTINFO, filesystem_of
from slowdown.analysis.units import format_size
from slowdown.probe.layout.errors import NoSpaceError
from slowdown.probe.layout.fs_counts import free_inodes
from slowdown.probe.layout.names import BLOCK_SIZE

MARGIN_BYTES = 16 * BLOCK_SIZE
MARGIN_INODES = 16
# Filesystems whose statvfs block size is an object size a small file does not fill, with
# the unit a small file's bytes take there.
CEPH_TYPES = frozenset({"ceph", "fuse.ceph-fuse", "fuse.ceph"})
CEPH_ALLOC = 4096  # BlueStore's min_alloc_size (HDD and SSD) since Ceph 16.2 Pacific
CEPH_EXTRA = 4096  # per file or directory: its object's record and its inode, beside its bytes


@dataclass(frozen=True)
class Allocation:
    """What a small file or directory costs on one filesystem: whole `unit`s of bytes,
    and `extra` bytes each."""

    unit: int
    fstype: str | None  # as mountinfo names it; None when the mount was not found
    rule: str  # in words: "f_frsize" or why another unit
    extra: int = 0

    def file(self, size: int) -> int:
        """The bytes a file of `size` bytes takes."""
        return -(-size // self.unit) * self.unit + self.extra

    @property
    def directory(self) -> int:
        """The bytes a new, small directory takes."""
        return self.unit + self.extra


def allocation(where: Path, st: os.statvfs_result, mountinfo: Path = MOUNTINFO) -> Allocation:
    """The allocation unit of small files on the filesystem of `where` (statvfs `st`)."""
    fs = filesystem_of(where, mountinfo)
    fstype = fs.fstype if fs is not None else None
    if fstype in CEPH_TYPES:
        return Allocation(CEPH_ALLOC, fstype,
                          f"CephFS: a small file's bytes in {CEPH_ALLOC // 1024} KiB units and "
                          f"{CEPH_EXTRA // 1024} KiB more, not the {format_size(st.f_bsize)} "
                          "object size statvfs names", extra=CEPH_EXTRA)
    return Allocation(max(st.f_frsize, 1), fstype, "f_frsize")


def check_space(where: Path, need_bytes: int, need_inodes: int,
                st: os.statvfs_result | None = None) -> list[str]:
    """Refuse (NoSpaceError) unless statvfs shows room for the rest plus a margin; the
    notes say what could not be checked."""
    st = os.statvfs(where) if st is None else st
    notes = []
    free = st.f_bavail * st.f_frsize
    margin = MARGIN_BYTES + need_bytes // 50
    if need_bytes and st.f_blocks <= 0:
        notes.append(f"{where}: free space not checked ({format_size(need_bytes)} to write): "
                     "the filesystem reports no size (statvfs: 0 blocks)")
    elif need_bytes and free < need_bytes + margin:
        raise NoSpaceError(f"{where}: not enough free space: {format_size(need_bytes)} to write "
                           f"+ {format_size(margin)} margin, {format_size(free)} free")
    available = free_inodes(st)
    if need_inodes and available is None:
        notes.append(f"{where}: free inodes not checked ({need_inodes:,} to create): the "
                     f"filesystem does not say how many are free (statvfs: {st.f_favail} free "
                     f"of {st.f_files})")
    elif need_inodes and available is not None:
        inode_margin = MARGIN_INODES + need_inodes // 100
        if available < need_inodes + inode_margin:
            raise NoSpaceError(f"{where}: not enough free inodes: {need_inodes} files + "
                               f"{inode_margin} margin, {available} free")
    return notes


def estimate(where: Path, data_bytes: int, objects: int, object_size: int,
             new_dirs: int, st: os.statvfs_result | None = None,
             mountinfo: Path = MOUNTINFO) -> tuple[int, int]:
    """(bytes, inodes) that writing `data_bytes`, `objects` objects of `object_size` bytes
    and `new_dirs` directories takes on the filesystem of `where`."""
    st = os.statvfs(where) if st is None else st
    alloc = allocation(where, st, mountinfo)
    return (data_bytes + objects * alloc.file(object_size) + new_dirs * alloc.directory,
            objects + new_dirs + 3)
