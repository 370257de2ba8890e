"""The data probe: one 1 MiB read or write of data.bin at a random aligned offset, uncached.

The caller times `read_block()` / `write_block()`; each does exactly one I/O system call in
"direct" mode (O_DIRECT, page-aligned mmap buffer), so nothing but the I/O is inside the timed
section. Where the filesystem refuses O_DIRECT (EINVAL at open or at the first read), the
probe runs in "fadvise" mode: posix_fadvise(DONTNEED) on the block before each read (a system
call without I/O: the block's pages are clean, so they are only dropped) and fdatasync after
each write, so a read still comes from the server and a write still reaches it. Readahead is
switched off there (POSIX_FADV_RANDOM) so a read does not cache its neighbours.

Writes only overwrite whole blocks below the size the file had at open: the file never grows.
Each write carries fresh bytes: a buffer of its own (random at open, never what a read
brought in) gets 8 new random bytes in every 4 KiB page before each write (`fresh_bytes`,
which the caller runs outside the timed call; about 20 us), so no two writes, and no write
and block on disk, hold the same content: a deduplicating or compressing layer cannot make a
write cheaper than a new one. With `sync` (the target's `sync = true`) each write is followed
by fdatasync inside the timed call, as `ioping -W` times its writes (also in direct mode).

Only the reads' descriptor (read-only) stays open between ops. The writes' one is opened for
each write and closed after it, both outside the timed call (`open_write`, `close_write`):
a file held open for writing on the probed filesystem would make its admin's
`mount -o remount,ro` fail ("busy").

With a shared data file (data_file = "shared") the probe reads the target's shared data.bin,
opened read-only, and writes the node's own write.bin: many nodes read one file (compatible
read locks only) and no two nodes ever write the same file, so no write lock (a GPFS byte-range
token, a Lustre extent lock) passes between nodes: what a write measures is the write. Both
files are opened in one mode, direct or fadvise.
"""

from __future__ import annotations

import errno
import mmap
import os
import random
import stat
import time
from pathlib import Path

from slowdown.analysis.words import DATA_OPS
from slowdown.probe.layout.manifest import ManifestError, read_manifest, read_shared_manifest
from slowdown.probe.layout.names import BLOCK_SIZE, DATA_NAME, SHARED_DIR, WRITE_NAME
from slowdown.probe.probes import DATA_FILE, Place, Probe, Report, Result, error_of

DATA_READ, DATA_WRITE = DATA_OPS
DIRECT = "direct"
FADVISE = "fadvise"

_O_DIRECT = getattr(os, "O_DIRECT", 0)
_BASE_FLAGS = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC  # a shared file: never written
_PAGE_WORDS = 4096 // 8  # one fresh 8-byte word per 4 KiB page of each write


class DataProbe:
    """Random aligned block I/O on one file (or reads on one, writes on another), opened once."""

    __slots__ = ("_buf", "_bufs", "_cached", "_fd", "_fresh", "_nblocks", "_randbelow",
                 "_stamps", "_wblocks", "_wbuf", "_wbufs", "_wfd", "block_size", "mode", "path",
                 "size", "sync", "write_path", "write_size")

    def __init__(self, path: Path | str, *, block_size: int = BLOCK_SIZE,
                 seed: int | None = None, allow_direct: bool = True,
                 write_path: Path | str | None = None, read_size: int | None = None,
                 sync: bool = False) -> None:
        """Reads (and writes) `path`; with `write_path`, writes go there and `path` is opened
        read-only. `read_size`: read only below it (a shared file that may be growing).
        `sync`: fdatasync after each write, inside `write_block`."""
        if block_size <= 0 or block_size % mmap.PAGESIZE:
            raise ValueError("block_size must be a positive multiple of the page size")
        self.path = str(path)
        self.write_path = None if write_path is None else str(write_path)
        self.block_size = block_size
        self.sync = sync
        self._fd = self._wfd = -1
        self._cached = False
        # Anonymous mmaps: page aligned, as O_DIRECT needs, and allocated once; one for what
        # reads bring in, one for what writes take out.
        self._buf = mmap.mmap(-1, block_size)
        self._bufs = [self._buf]
        self._wbuf = mmap.mmap(-1, block_size)
        self._wbufs = [self._wbuf]
        self._wbuf.write(os.urandom(block_size))
        self._stamps = memoryview(self._wbuf).cast("Q")[::_PAGE_WORDS]
        self._fresh = False
        self.mode = DIRECT if allow_direct and _O_DIRECT else FADVISE
        try:
            try:
                self._open_files()
            except OSError as exc:
                if exc.errno != errno.EINVAL or self.mode != DIRECT:
                    raise
                self._fallback()  # the filesystem refuses O_DIRECT at open
            self._sizes(read_size)
            if self.mode == DIRECT:
                try:
                    for fd in dict.fromkeys((self._wfd, self._fd)):
                        self._pread(0, fd)
                except OSError as exc:
                    if exc.errno != errno.EINVAL:
                        raise
                    self._fallback()  # open accepted O_DIRECT but I/O refuses it
            if self.mode == FADVISE:
                os.posix_fadvise(self._fd, 0, 0, os.POSIX_FADV_RANDOM)
                self._pread(0)
                os.posix_fadvise(self._fd, 0, 0, os.POSIX_FADV_DONTNEED)
        except BaseException:
            self.close()
            raise
        self.close_write()
        self._cached = self.mode == FADVISE
        self._randbelow = random.Random(seed).randrange

    @classmethod
    def from_workspace(cls, workspace: Path | str, **kwargs: object) -> DataProbe:
        """The probe of a prepared workspace, as its MANIFEST says: its own data.bin, or the
        target's shared data file (read-only, below the size its MANIFEST calls ready) with
        the workspace's write.bin."""
        workspace = Path(workspace)
        manifest = read_manifest(workspace)
        if manifest is None:
            raise ManifestError(f"{workspace}: no MANIFEST; run 'slowdown-probe prepare'",
                                errno.ENOENT)
        if manifest.data_file != "shared":
            return cls(workspace / DATA_NAME, **kwargs)  # type: ignore[arg-type]
        shared = workspace.parent / SHARED_DIR
        try:
            st = os.lstat(shared)
        except FileNotFoundError:
            st = None
        if st is not None and (not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid()):
            raise ManifestError(f"{shared} is not a directory of this user; not reading it")
        ready = read_shared_manifest(shared) if st is not None else None
        if ready is None or not ready.complete:
            holder = f" (prepare by host {ready.host} did not finish)" if ready else ""
            raise ManifestError(f"{shared / DATA_NAME}: the shared data file is not prepared"
                                f"{holder}; run 'slowdown-probe prepare'")
        return cls(shared / DATA_NAME, write_path=workspace / WRITE_NAME,
                   read_size=ready.data_size, **kwargs)  # type: ignore[arg-type]

    def _open_files(self) -> None:
        self._fd = os.open(self.path, _READ_FLAGS | self._direct)
        self.open_write()

    @property
    def _direct(self) -> int:
        return _O_DIRECT if self.mode == DIRECT else 0

    def open_write(self) -> None:
        """Open the file the next write goes to (outside the timed call); OSError as the
        filesystem answers (EROFS on a volume remounted read-only)."""
        if self._wfd < 0:
            self._wfd = os.open(self.write_path or self.path, _BASE_FLAGS | self._direct)

    def close_write(self) -> None:
        """Let go of the file written (after each write): nothing stays open for writing."""
        wfd, self._wfd = self._wfd, -1
        if wfd >= 0:
            os.close(wfd)

    def _close_files(self) -> None:
        fd, wfd, self._fd, self._wfd = self._fd, self._wfd, -1, -1
        for one in dict.fromkeys((fd, wfd)):
            if one >= 0:
                os.close(one)

    def _fallback(self) -> None:
        """Reopen without O_DIRECT: both files or neither, so reads and writes are one mode."""
        self._close_files()
        self.mode = FADVISE
        self._open_files()

    def _sizes(self, read_size: int | None) -> None:
        bs = self.block_size
        self.size = os.fstat(self._fd).st_size
        if read_size is not None:
            self.size = min(self.size, read_size)
        self._nblocks = self.size // bs
        self.write_size = os.fstat(self._wfd).st_size if self.write_path else self.size
        self._wblocks = self.write_size // bs
        for blocks, path in ((self._nblocks, self.path), (self._wblocks, self.write_path)):
            if blocks < 1:
                raise OSError(errno.EINVAL, f"smaller than one block ({bs} bytes)", path)

    @property
    def blocks(self) -> int:
        """How many whole blocks the probe chooses from."""
        return self._nblocks

    def _pread(self, offset: int, fd: int | None = None) -> None:
        n = os.preadv(self._fd if fd is None else fd, self._bufs, offset)
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

    def fresh_bytes(self) -> None:
        """Give the next write new content: 8 random bytes in each 4 KiB page of the write
        buffer (one getrandom call and one strided copy). Call it outside the timed region;
        a write without it makes its own, inside."""
        self._stamps[:] = memoryview(os.urandom(len(self._stamps) * 8)).cast("Q")
        self._fresh = True

    def write_block(self) -> int:
        """Overwrite one block at a random aligned offset with fresh bytes (then fdatasync
        with `sync`, or where O_DIRECT is refused); return the offset. The caller opens the
        file first (`open_write`) and closes it after (`close_write`), untimed."""
        if not self._fresh:
            self.fresh_bytes()
        self._fresh = False
        self.open_write()  # already open when the caller did it before timing
        bs = self.block_size
        offset = self._randbelow(self._wblocks) * bs
        n = os.pwritev(self._wfd, self._wbufs, offset)
        if n != bs:
            raise OSError(errno.EIO, f"short write: {n} of {bs} bytes at offset {offset}",
                          self.write_path or self.path)
        if self._cached or self.sync:
            os.fdatasync(self._wfd)
        return offset

    def close(self) -> None:
        self._close_files()
        self._stamps.release()
        for buf in (self._buf, self._wbuf):
            if not buf.closed:
                buf.close()

    def fileno(self) -> int:
        return self._fd

    def __enter__(self) -> DataProbe:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class DataFileProbe(Probe):
    """The data probe as the worker runs it: one block read, then one block write, each
    timed around its one I/O call (the write's file opened before and closed after, both
    untimed)."""

    name = "data"
    ops = DATA_OPS
    needs = (DATA_FILE,)

    def __init__(self, data: DataProbe) -> None:
        self.data = data

    @property
    def mode(self) -> str:  # type: ignore[override]
        return self.data.mode

    @property
    def path(self) -> str:
        """The file read (and written, unless ``write_path``)."""
        return self.data.path

    @property
    def write_path(self) -> str | None:
        """The file written, when it is not the one read (a shared data file)."""
        return self.data.write_path

    def fileno(self) -> int:
        """The descriptor of the file read."""
        return self.data.fileno()

    @classmethod
    def open(cls, workspace: Path, *, sync: bool = False) -> DataFileProbe:
        return cls(DataProbe.from_workspace(workspace, sync=sync))  # own or shared data file

    def step(self, report: Report) -> None:
        data = self.data
        clock = time.perf_counter
        data.fresh_bytes()  # the next write's content, made outside the timed calls
        t0 = clock()
        try:
            offset = data.read_block()
            result = Result(DATA_READ, clock() - t0, where=Place(data.path, offset))
        except OSError as exc:  # how long it took to fail: a hang that ended so
            result = Result(DATA_READ, clock() - t0, *error_of(exc))
        report(result)
        t0 = clock()
        try:
            data.open_write()  # its file opened untimed, and closed after
            t0 = clock()
            offset = data.write_block()
            result = Result(DATA_WRITE, clock() - t0,
                            where=Place(data.write_path or data.path, offset))
        except OSError as exc:
            result = Result(DATA_WRITE, clock() - t0, *error_of(exc))
        try:
            data.close_write()
        except OSError as exc:  # the write did not make it after all
            err, msg = error_of(exc)
            result = result._replace(err=err, msg=msg)
        report(result)

    def close(self) -> None:
        self.data.close()


PROBE = DataFileProbe
