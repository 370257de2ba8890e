"""pytest fixtures for filesystems with faults: a FUSE fault injector, ext4, small tmpfs.

Load with `pytest_plugins = ["tests.kit.fixtures_fs"]` or `from tests.kit.fixtures_fs import *`.
They mount, so they need root; without root they fail (never skip): CI runs as root and
a skipped fault test would hide that the faults were never exercised.

PYTEST_DONT_REWRITE: this module holds no asserts; the marker keeps pytest from warning
when a conftest star-imports it and a test module also names it in pytest_plugins.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.kit.faultfs import FaultFS
from tests.kit.faultfs.realfs import TmpfsMount, ext4_image, tmpfs

__all__ = ["ext4_mount", "faultfs", "root_only", "small_tmpfs"]

SMALL_TMPFS_BYTES = 8 << 20


def require_root(what: str) -> None:
    """Fail the test (not skip) when it cannot mount."""
    if os.geteuid() != 0:
        pytest.fail(f"{what} mounts a filesystem and needs root; run the suite as root "
                    "(CI does)", pytrace=False)


@pytest.fixture
def faultfs(tmp_path: Path) -> Iterator[FaultFS]:
    """A started FaultFS: `faultfs.mountpoint` passes through to `faultfs.backing`.

    Prepare files in `backing` directly (no faults, no FUSE page cache), use them
    through `mountpoint`. Stopped (server killed, unmounted, checked) even if the test fails.
    """
    require_root("faultfs")
    with FaultFS(tmp_path / "backing", tmp_path / "mnt") as fs:
        yield fs


@pytest.fixture
def ext4_mount(tmp_path: Path) -> Iterator[Path]:
    """A fresh 64 MiB ext4 loop mount (real O_DIRECT alignment checks)."""
    require_root("ext4_mount")
    with ext4_image(tmp_path, 64) as point:
        yield point


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[TmpfsMount]:
    """An 8 MiB tmpfs: ENOSPC after exactly 8 MiB of data; `.remount_size(n)` grows it."""
    require_root("small_tmpfs")
    with tmpfs(tmp_path, SMALL_TMPFS_BYTES) as mount:
        yield mount


@pytest.fixture
def root_only() -> None:
    if os.geteuid() != 0:
        pytest.fail("mounts need root; run the suite as root (CI does)", pytrace=False)
