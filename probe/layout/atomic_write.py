"""The atomic replace of a small file: a reader sees the old content or the new, never half,
and the temporary file has a fixed name that a MANIFEST can list for cleanup."""

from __future__ import annotations

import os
from pathlib import Path

from slowdown.probe.layout.names import tmp_name

_OPEN_NEW = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC


def atomic_write(path: Path, data: bytes, *, fsync: bool = True) -> None:
    """Replace `path` with `data` so a reader sees the old or the new content, never half.

    The temporary file has a fixed name next to `path` (listed in the MANIFEST, so cleanup can
    remove one left by a kill); O_NOFOLLOW keeps a planted symlink from redirecting the write.
    """
    tmp = path.with_name(tmp_name(path.name))
    fd = os.open(tmp, _OPEN_NEW, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
