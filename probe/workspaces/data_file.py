"""data.bin, the data probe's file: written with real, stamped data, its written length verified.

Every 4 KiB page of data.bin starts with (STAMP_MAGIC, page number), the rest is random bytes
(one random chunk, reused): no two pages are equal and nothing compresses. A kill
leaves the file as long as the bytes written; a crash can leave a tail never written (holes
or zeros): `verified_length` counts only whole 1 MiB blocks up to the last one whose pages carry
the stamp, and `write_data` first cuts any tail beyond where it starts. Writes are made durable
(fdatasync) every SYNC_EVERY bytes and dropped from the page cache once durable. The file is
never opened through a symlink, and a data.bin that is not a regular file is refused.
numpy is imported only when data is verified or written, not by every `slowdown-probe` command.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from slowdown.probe.layout.errors import WorkspaceError
from slowdown.probe.layout.names import BLOCK_SIZE

STAMP_MAGIC = int.from_bytes(b"slowdown", "little")
STAMP_UNIT = 4096  # every 4 KiB of data.bin starts with (magic, page number): no two pages equal
WRITE_CHUNK = 8 * BLOCK_SIZE
SYNC_EVERY = 256 * BLOCK_SIZE


def _stamped(block: memoryview | bytearray) -> bool:
    import numpy as np  # here: every slowdown-probe command imports this module

    words = np.frombuffer(block, dtype=np.uint64)
    return bool(np.all(words[:: STAMP_UNIT // 8] == STAMP_MAGIC))


def verified_length(path: Path) -> int:
    """Length of data.bin up to its last whole block that prepare's writes reached.

    A kill leaves the file as long as the bytes written; a crash can leave a tail of blocks
    that were never written (holes or zeros) — those carry no stamp and are not counted. The
    data probe only ever writes back data read from the file, so stamps survive probing.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return 0
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise WorkspaceError(f"{path} is not a regular file")
        n = st.st_size // BLOCK_SIZE
        buf = bytearray(BLOCK_SIZE)
        while n > 0:
            got = os.preadv(fd, [buf], (n - 1) * BLOCK_SIZE)
            if got == BLOCK_SIZE and _stamped(buf):
                break
            n -= 1
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        return n * BLOCK_SIZE
    finally:
        os.close(fd)


def write_data(path: Path, start: int, end: int, progress: Any,
               on_sync: Callable[[], None] | None = None, label: str | None = None) -> int:
    """Write real, stamped data from `start` to `end`; return bytes written. `on_sync` is
    called after each sync (the shared file's writer beats its claim there)."""
    import numpy as np

    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise WorkspaceError(f"{path} is not a regular file")
        if st.st_size > start:
            os.ftruncate(fd, start)  # drop an unverified tail (this file is ours)
        buf = bytearray(os.urandom(WRITE_CHUNK))
        words = np.frombuffer(buf, dtype=np.uint64)
        step = STAMP_UNIT // 8
        words[::step] = STAMP_MAGIC
        pages = WRITE_CHUNK // STAMP_UNIT
        view = memoryview(buf)
        task = progress.add_task(label or path.name, total=end, completed=start)
        off = synced = start
        while off < end:
            n = min(WRITE_CHUNK, end - off)
            first = off // STAMP_UNIT
            words[1::step] = np.arange(first, first + pages, dtype=np.uint64)
            chunk = view[:n]
            done = 0
            while done < n:
                done += os.pwrite(fd, chunk[done:], off + done)
            off += n
            if off - synced >= SYNC_EVERY or off == end:
                os.fdatasync(fd)
                # Written and durable: keep it from pushing everyone's cache out.
                os.posix_fadvise(fd, synced, off - synced, os.POSIX_FADV_DONTNEED)
                synced = off
                if on_sync is not None:
                    on_sync()
            progress.update(task, completed=off)
        return end - start
    except OSError as exc:
        raise WorkspaceError(f"{path}: {exc.strerror} while writing; free space and run "
                             "prepare again, it continues where it stopped") from exc
    finally:
        os.close(fd)
