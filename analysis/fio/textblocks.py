"""A file's text in blocks of whole lines, in reused buffers, for the block parser.

Guarantees: every block ``TextBlocks.read`` returns is whole lines, its last one ending in a
newline (one is added when the file's last line has none, and the block says so), with at
least ``PAD`` readable bytes before its first, so that the parser loads 8- and 16-byte words
before any field without copying; a line longer than a block is read whole into a larger
buffer. Buffers handed back with ``Buffers.give`` are reused, never more than were in use at
once. ``first_line`` reads only a file's head.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

PAD = 16  # zero bytes before a block, so that a 16-byte load before any field is in range


@dataclass
class RawBlock:
    """Whole lines of a file: ``buffer[start:end]``, ending with a newline, with at least
    ``PAD`` readable bytes before ``start`` (so the parser loads words without copying)."""

    buffer: bytes | bytearray
    start: int
    end: int
    index: int  # 0-based number of the block in its file
    unterminated: bool = False  # the file's last line had no newline (one was added)

    @property
    def data(self) -> bytes:
        return bytes(self.buffer[self.start:self.end])

    @property
    def size(self) -> int:
        return self.end - self.start


class Buffers:
    """Buffers handed back for reuse: fresh memory costs a page fault per 4 KiB, which for a
    file read once is more than the copy from the page cache. Never more are kept than were
    in use at once. Used from one thread."""

    GRAIN = 64 << 10  # sizes are rounded up to this, so that buffers fit the next request

    def __init__(self) -> None:
        self._free: list[bytearray] = []

    def take(self, size: int) -> bytearray:
        fits = [i for i, buffer in enumerate(self._free) if len(buffer) >= size]
        if fits:
            return self._free.pop(min(fits, key=lambda i: len(self._free[i])))
        return bytearray(-(-size // self.GRAIN) * self.GRAIN)

    def give(self, buffer: bytes | bytearray) -> None:
        if isinstance(buffer, bytearray):
            self._free.append(buffer)


class TextBlocks:
    """A file in blocks of whole lines of about ``block_bytes`` each.

    A block's buffer comes from ``buffers``; whoever is done with a block (and everything
    parsed from it lives elsewhere) may hand ``block.buffer`` back with ``buffers.give``.
    """

    def __init__(self, path: Path, block_bytes: int, buffers: Buffers | None = None) -> None:
        self.path = path
        self.block_bytes = max(int(block_bytes), 1 << 12)
        self._file: BinaryIO | None = open(path, "rb", buffering=0)  # noqa: SIM115
        with contextlib.suppress(OSError):  # no larger buffers than the file needs
            self.block_bytes = min(self.block_bytes, os.fstat(self._file.fileno()).st_size + 1)
        self._buffers = buffers or Buffers()
        self._carry = b""
        self._count = 0
        self.bytes_read = 0

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def read(self) -> RawBlock | None:
        """The next block, or None at the end of the file."""
        if self._file is None:
            return None
        carry = self._carry
        filled = PAD + len(carry)
        want = self.block_bytes
        buffer = self._buffers.take(filled + want + 1)
        buffer[PAD:filled] = carry
        while True:
            with memoryview(buffer) as view:
                got = self._file.readinto(view[filled:filled + want])
            self.bytes_read += got
            if got == 0:  # the end of the file
                self.close()
                self._carry = b""
                if not buffer[PAD:filled].strip():
                    self._buffers.give(buffer)
                    return None
                buffer[filled] = 10  # the last line had no newline
                self._count += 1
                return RawBlock(buffer, PAD, filled + 1, self._count - 1, True)
            cut = buffer.rfind(b"\n", filled, filled + got)
            filled += got
            if cut >= 0:
                self._carry = bytes(buffer[cut + 1:filled])
                self._count += 1
                return RawBlock(buffer, PAD, cut + 1, self._count - 1)
            want *= 2  # a line longer than a block: read on into a larger buffer
            larger = self._buffers.take(filled + want + 1)
            larger[:filled] = buffer[:filled]
            self._buffers.give(buffer)
            buffer = larger


def first_line(path: Path, limit: int = 1 << 22) -> tuple[int, bytes, bool] | None:
    """Number and text of the first non-blank line (None for an empty file), and whether the
    file goes on after it: False when the file ends inside that line, without its newline.
    Reads at most ``limit`` bytes, so that a file without newlines is not read whole (a line
    longer than that counts as going on)."""
    with open(path, "rb") as f:
        head = f.read(1 << 16)
        ended = len(head) < 1 << 16
        while len(head) < limit and head.lstrip().find(b"\n") < 0 and not ended:
            more = f.read(1 << 16)
            ended = not more
            head += more
    number, start = 1, 0
    while start < len(head):
        end = head.find(b"\n", start)
        whole = end >= 0 or not ended
        end = len(head) if end < 0 else end
        if head[start:end].strip():
            return number, head[start:end], whole
        number, start = number + 1, end + 1
    return None


__all__ = ["PAD", "Buffers", "RawBlock", "TextBlocks", "first_line"]
