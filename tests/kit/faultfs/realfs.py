"""Real kernel filesystems for tests: an ext4 loop image and a size-limited tmpfs.

They give what FUSE cannot: the kernel's own O_DIRECT alignment checks (ext4 answers
EINVAL for a misaligned buffer or offset; FUSE accepts anything) and exact ENOSPC or
inode exhaustion (tmpfs `size=`, `nr_inodes=`). Both need root and check mountinfo after
mounting, because a failed mount leaves a plain directory that tests would happily use.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

from .mounts import mount_fstype, run, wait_unmounted

__all__ = ["TmpfsMount", "ext4_image", "tmpfs"]


def _mount(cmd: list[str], point: Path, fstype: str) -> None:
    run(cmd)
    found = mount_fstype(point)
    if found != fstype:
        raise RuntimeError(f"{' '.join(cmd)} reported success but {point} holds {found!r}")


def _unmount(point: Path) -> None:
    """Unmount, lazily if something still uses it (a test's leftover open file or cwd)."""
    if mount_fstype(point) is None:
        return
    try:
        run(["umount", str(point)])
    except RuntimeError:
        run(["umount", "-l", str(point)])
    wait_unmounted(point)


@contextlib.contextmanager
def ext4_image(directory: Path, size_mib: int = 64) -> Iterator[Path]:
    """Mount a fresh ext4 image of `size_mib` MiB on `directory`/ext4; yield the mount point.

    4 KiB blocks like a real data disk (mke2fs would pick 1 KiB for a small image), inode
    tables written at mkfs time so no background ext4lazyinit competes with timed I/O.
    The loop device is set up by `mount -o loop` with autoclear: unmounting frees it.
    """
    directory = Path(directory).resolve()
    image, point = directory / "ext4.img", directory / "ext4"
    point.mkdir(parents=True, exist_ok=True)
    run(["truncate", "-s", f"{size_mib}M", str(image)])
    run(["mkfs.ext4", "-q", "-F", "-m", "0", "-b", "4096",
         "-E", "lazy_itable_init=0,lazy_journal_init=0", str(image)])
    _mount(["mount", "-o", "loop", str(image), str(point)], point, "ext4")
    try:
        yield point
    finally:
        _unmount(point)
        _detach_loops(image)


def _detach_loops(image: Path) -> None:
    """Free loop devices still bound to `image` (autoclear waits for lazy unmounts)."""
    out = subprocess.run(["losetup", "-j", str(image)], capture_output=True, text=True,
                         check=False).stdout
    for line in out.splitlines():
        with contextlib.suppress(RuntimeError):  # busy: the kernel frees it when released
            run(["losetup", "-d", line.split(":", 1)[0]])


class TmpfsMount(os.PathLike):
    """A mounted tmpfs; usable as a path (`os.fspath`, `/`)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __fspath__(self) -> str:
        return str(self.path)

    def __truediv__(self, other: str) -> Path:
        return self.path / other

    def __repr__(self) -> str:
        return f"TmpfsMount({str(self.path)!r})"

    def remount_size(self, size_bytes: int) -> None:
        """Resize the mounted tmpfs live (to grow it after an ENOSPC test)."""
        run(["mount", "-o", f"remount,size={size_bytes}", str(self.path)])


@contextlib.contextmanager
def tmpfs(directory: Path, size_bytes: int, nr_inodes: int | None = None
          ) -> Iterator[TmpfsMount]:
    """Mount a tmpfs of `size_bytes` (rounded up to pages) on `directory`/tmpfs.

    Writing past the size fails with ENOSPC at once; `nr_inodes` caps the number of
    files and directories (the root directory takes one).
    """
    point = Path(directory).resolve() / "tmpfs"
    point.mkdir(parents=True, exist_ok=True)
    options = f"size={size_bytes},mode=0755"
    if nr_inodes is not None:
        options += f",nr_inodes={nr_inodes}"
    _mount(["mount", "-t", "tmpfs", "-o", options, "slowdown-test", str(point)], point, "tmpfs")
    try:
        yield TmpfsMount(point)
    finally:
        _unmount(point)


@contextlib.contextmanager
def ramfs(directory: Path) -> Iterator[Path]:
    """ramfs has no direct I/O at all: open(O_DIRECT) fails with EINVAL."""
    point = directory.resolve() / "ramfs"
    point.mkdir()
    run(["mount", "-t", "ramfs", "-o", "mode=0755", "slowdown-test", str(point)])
    if mount_fstype(point) != "ramfs":
        raise RuntimeError(f"{point}: ramfs did not mount")
    try:
        yield point
    finally:
        run(["umount", str(point)])
        wait_unmounted(point)
