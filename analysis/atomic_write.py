"""A file written whole or not at all: its data in a new file beside it, synced, then renamed
onto it. A reader (or a crash) sees the old file or the new one, never a part: the one way
slowdown writes a file that others read (import-fio's output, the report and its images, the
start state beside a database; in a workspace, its MANIFEST, the md status file and a shared
file's claim, whose new file has a fixed name the MANIFEST lists, so cleanup can remove one
left by a kill)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

_TRIES = 100
_NEW = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC


def write_all(fd: int, data: bytes) -> None:
    """Every byte of ``data`` to ``fd``: one write may take only part of it."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _write(temp: Path, data: bytes, flags: int, mode: int, sync: bool) -> None:
    fd = os.open(temp, flags, mode)
    try:
        write_all(fd, data)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def temp_beside(path: Path, data: bytes, mode: int = 0o666) -> Path:
    """``data`` in a new file beside ``path`` (``.name.XXXX.tmp``, renamed onto it later),
    synced to the disk. Its mode is ``mode`` less the umask, as an ordinary new file; it is
    made with ``O_EXCL | O_NOFOLLOW``, so it never writes through a link planted there."""
    path = Path(path)
    for _ in range(_TRIES):
        temp = path.with_name(f".{path.name}.{os.urandom(4).hex()}.tmp")
        try:
            _write(temp, data, _NEW | os.O_EXCL, mode, sync=True)
        except FileExistsError:
            continue
        except BaseException:
            temp.unlink(missing_ok=True)
            raise
        return temp
    raise FileExistsError(f"{path}: no free temporary name beside it")  # pragma: no cover


def replace_whole(path: Path, data: bytes, mode: int = 0o666, *, temp: Path | None = None,
                  sync: bool = True) -> None:
    """Write ``data`` to ``path`` whole or not at all: the old file (if any) stays until the
    new one is complete (and synced, unless ``sync`` is false), then the rename replaces it.

    ``temp``: a fixed name for the new file (one a workspace's MANIFEST lists), truncated if
    a kill left it there; never followed if it is a link. Without it, a name taken at random
    (``temp_beside``)."""
    if temp is None:
        temp = temp_beside(path, data, mode)
        try:
            os.replace(temp, path)
        except BaseException:
            temp.unlink(missing_ok=True)
            raise
        return
    _write(temp, data, _NEW | os.O_TRUNC, mode, sync)
    os.replace(temp, path)


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


__all__ = ["NotWritten", "replace_all", "replace_whole", "temp_beside", "write_all"]
