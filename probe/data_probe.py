"""The data probe: one 1 MiB read or write of data.bin at a random aligned offset, uncached.

The caller times `read_block()` / `write_block()`; each does exactly one I/O system call in
"direct" mode (O_DIRECT, page-aligned mmap buffer), so nothing but the I/O is inside the timed
section. Where the filesystem refuses O_DIRECT (EINVAL at open or at the first read), the
probe runs in "fadvise" mode: posix_fadvise(DONTNEED) on the block before each read (a system
call without I/O: the block's pages are clean, so they are only dropped) and fdatasync after
each write, so a read still comes from the server and a write still reaches it. Readahead is
switched off there (POSIX_FADV_RANDOM) so a read does not cache its neighbours.

Writes only overwrite whole blocks below the size the file had at open: the file never grows.
The buffer starts with a block read from the file, so a write puts back data of the same kind
(prepare's content), never zeros.
"""

from __future__ import annotations

import errno
import mmap
import os
import random
from pathlib import Path

from slowdown.probe.manifest import BLOCK_SIZE

DIRECT = "direct"
FADVISE = "fadvise"

_O_DIRECT = getattr(os, "O_DIRECT", 0)
_BASE_FLAGS = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC


class DataProbe:
    """Random aligned block I/O on one file, opened once."""

    __slots__ = ("_buf", "_bufs", "_cached", "_fd", "_nblocks", "_randbelow", "block_size",
                 "mode", "path", "size")

    def __init__(self, path: Path | str, *, block_size: int = BLOCK_SIZE,
                 seed: int | None = None, allow_direct: bool = True) -> None:
        if block_size <= 0 or block_size % mmap.PAGESIZE:
            raise ValueError("block_size must be a positive multiple of the page size")
        self.path = str(path)
        self.block_size = block_size
        self._fd = -1
        self._cached = False
        # Anonymous mmap: page aligned, as O_DIRECT needs, and allocated once.
        self._buf = mmap.mmap(-1, block_size)
        self._bufs = [self._buf]
        self.mode = FADVISE
        fd = -1
        if allow_direct and _O_DIRECT:
            try:
                fd = os.open(self.path, _BASE_FLAGS | _O_DIRECT)
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
            else:
                self.mode = DIRECT
        if fd < 0:
            fd = os.open(self.path, _BASE_FLAGS)
        self._fd = fd
        try:
            self.size = os.fstat(fd).st_size
            self._nblocks = self.size // block_size
            if self._nblocks < 1:
                raise OSError(errno.EINVAL, f"smaller than one block ({block_size} bytes)",
                              self.path)
            if self.mode == DIRECT:
                try:
                    self._pread(0)
                except OSError as exc:
                    if exc.errno != errno.EINVAL:
                        raise
                    # Open accepted O_DIRECT but I/O refuses it: reopen without.
                    os.close(fd)
                    self._fd = -1
                    self._fd = fd = os.open(self.path, _BASE_FLAGS)
                    self.mode = FADVISE
            if self.mode == FADVISE:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
                self._pread(0)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        except BaseException:
            self.close()
            raise
        self._cached = self.mode == FADVISE
        self._randbelow = random.Random(seed).randrange

    @property
    def blocks(self) -> int:
        """How many whole blocks the probe chooses from."""
        return self._nblocks

    def _pread(self, offset: int) -> None:
        n = os.preadv(self._fd, self._bufs, offset)
        if n != self.block_size:
            raise OSError(errno.EIO, f"short read: {n} of {self.block_size} bytes at offset "
                          f"{offset}", self.path)

    def read_block(self) -> int:
        """Read one block at a random aligned offset; return the offset."""
        bs = self.block_size
        offset = self._randbelow(self._nblocks) * bs
        if self._cached:
            os.posix_fadvise(self._fd, offset, bs, os.POSIX_FADV_DONTNEED)
        n = os.preadv(self._fd, self._bufs, offset)
        if n != bs:
            raise OSError(errno.EIO, f"short read: {n} of {bs} bytes at offset {offset}",
                          self.path)
        return offset

    def write_block(self) -> int:
        """Overwrite one block at a random aligned offset; return the offset."""
        bs = self.block_size
        offset = self._randbelow(self._nblocks) * bs
        n = os.pwritev(self._fd, self._bufs, offset)
        if n != bs:
            raise OSError(errno.EIO, f"short write: {n} of {bs} bytes at offset {offset}",
                          self.path)
        if self._cached:
            os.fdatasync(self._fd)
        return offset

    def close(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)
        if not self._buf.closed:
            self._buf.close()

    def fileno(self) -> int:
        return self._fd

    def __enter__(self) -> DataProbe:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
