"""What statvfs's inode counts mean, and when a filesystem cannot tell.

A count of free inodes is known only where the filesystem keeps a table of them. CephFS
(the kernel client and ceph-fuse) answers f_ffree and f_favail with -1, "unknown" (2**64 - 1
as C's unsigned type, -1 as Python reads it), beside an f_files that counts the files in use;
others (ramfs, some FUSE servers) say 0 of 0. Either means "cannot tell", never "none free":
prepare then goes on without that check and says so, the worker reports no inode count and
readers show no inode use. Imports nothing.
"""

from __future__ import annotations

import os


def free_inodes(st: os.statvfs_result) -> int | None:
    """The inodes an unprivileged user may still create (f_favail), or None when the
    filesystem does not say: no total (f_files 0), a negative count or one above the total."""
    total, free = st.f_files, st.f_favail
    if total <= 0 or free < 0 or free > total:
        return None
    return int(free)
