"""A file written whole or not at all: its data in a new file beside it, synced, then renamed
onto it. A reader (or a crash) sees the old file or the new one, never a part: the one way
analysis writes a file that others read (import-fio's output, the report and its images, the
start state beside a database)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

_TRIES = 100


def temp_beside(path: Path, data: bytes, mode: int = 0o666) -> Path:
    """``data`` in a new file beside ``path`` (``.name.XXXX.tmp``, renamed onto it later),
    synced to the disk. Its mode is ``mode`` less the umask, as an ordinary new file; it is
    made with ``O_EXCL | O_NOFOLLOW``, so it never writes through a link planted there."""
    path = Path(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(_TRIES):
        temp = path.with_name(f".{path.name}.{os.urandom(4).hex()}.tmp")
        try:
            fd = os.open(temp, flags, mode)
        except FileExistsError:
            continue
        break
    else:  # pragma: no cover (a hundred names taken at random, all there)
        raise FileExistsError(f"{path}: no free temporary name beside it")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    return temp


def replace_whole(path: Path, data: bytes, mode: int = 0o666) -> None:
    """Write ``data`` to ``path`` whole or not at all: the old file (if any) stays until the
    new one is complete and synced, then the rename replaces it."""
    temp = temp_beside(path, data, mode)
    try:
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


class NotWritten(Exception):
    """File ``index`` of several could not be written (``error``): none was replaced."""

    def __init__(self, index: int, error: OSError) -> None:
        super().__init__(f"file {index}: {error}")
        self.index, self.error = index, error


def replace_all(files: Sequence[tuple[Path, bytes]]) -> None:
    """Write every ``(path, data)`` whole or none: every new file first, then the renames.
    A file that cannot be written is ``NotWritten``, and no file is replaced."""
    done: list[tuple[Path, Path]] = []
    try:
        for i, (path, data) in enumerate(files):
            try:
                done.append((temp_beside(path, data), path))
            except OSError as exc:
                raise NotWritten(i, exc) from None
        for temp, path in done:
            os.replace(temp, path)
    finally:
        for temp, _ in done:
            temp.unlink(missing_ok=True)


__all__ = ["NotWritten", "replace_all", "replace_whole", "temp_beside"]
