"""Free space and inodes: prepare writes nothing it has not first checked room for.

`estimate` turns what remains to be written (data bytes, pool objects, new directories) into
bytes and inodes as the filesystem allocates them (whole fragments of `f_frsize`, one inode per
file and directory, three more for data.bin and the state files); `check_space` raises
NoSpaceError unless statvfs shows room for that plus a margin (16 MiB and 2 % of the bytes;
16 inodes and 1 % of them). A filesystem that reports no inode count (f_files 0) is not
checked for inodes, nor one that reports no size (f_blocks 0, as ramfs) for bytes.
"""

from __future__ import annotations

import os
from pathlib import Path

from slowdown.analysis.units import format_size
from slowdown.probe.layout.errors import NoSpaceError
from slowdown.probe.layout.names import BLOCK_SIZE

MARGIN_BYTES = 16 * BLOCK_SIZE
MARGIN_INODES = 16


def check_space(where: Path, need_bytes: int, need_inodes: int) -> None:
    """Refuse (NoSpaceError) unless statvfs shows room for the rest plus a margin."""
    st = os.statvfs(where)
    free = st.f_bavail * st.f_frsize
    margin = MARGIN_BYTES + need_bytes // 50
    if need_bytes and st.f_blocks > 0 and free < need_bytes + margin:
        raise NoSpaceError(f"{where}: not enough free space: {format_size(need_bytes)} to write "
                           f"+ {format_size(margin)} margin, {format_size(free)} free")
    if st.f_files > 0 and need_inodes:
        inode_margin = MARGIN_INODES + need_inodes // 100
        if st.f_favail < need_inodes + inode_margin:
            raise NoSpaceError(f"{where}: not enough free inodes: {need_inodes} files + "
                               f"{inode_margin} margin, {st.f_favail} free")


def estimate(where: Path, data_bytes: int, objects: int, object_size: int,
             new_dirs: int) -> tuple[int, int]:
    """(bytes, inodes) that writing `data_bytes`, `objects` objects of `object_size` bytes
    and `new_dirs` directories takes on the filesystem of `where`."""
    unit = max(os.statvfs(where).f_frsize, 1)
    per_object = -(-object_size // unit) * unit
    return data_bytes + objects * per_object + new_dirs * unit, objects + new_dirs + 3
