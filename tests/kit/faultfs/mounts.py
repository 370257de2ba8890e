"""Mount checks by reading /proc/self/mountinfo only.

A failed mount can go unnoticed (the test then writes into the plain directory
underneath), so every helper asserts its mount. Only mountinfo is read, never the mount
point itself: a stat of a hung FUSE mount would hang the test process.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

_OCTAL = re.compile(r"\\([0-7]{3})")


def mount_fstype(path: str | os.PathLike[str]) -> str | None:
    """The filesystem type mounted exactly at `path` (topmost mount), or None.

    `path` must already be absolute and free of symlinks: resolving it here could
    touch a hung mount.
    """
    target = os.fspath(path)
    found = None
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            point = _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), left.split()[4])
            if point == target:
                found = right.split()[0]  # later lines are mounted on top
    return found


def wait_unmounted(path: Path, timeout: float = 5.0) -> None:
    """Raise unless `path` leaves mountinfo within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while mount_fstype(path) is not None:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{path} is still mounted after {timeout:g} s")
        time.sleep(0.02)


def run(cmd: list[str]) -> None:
    """Run a command; on failure raise with its stderr (no shell, fixed arguments)."""
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()}")
