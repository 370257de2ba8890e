"""Helpers of the reliability suite (tests/test_reliability_*.py, tests/long/).

- libfaketime for the service's wall clock: a fixed offset (to put a service just before a
  minute boundary, so its flush comes within seconds) or a control file that steps the clock
  of the running service and of its workers. The monotonic clock is never faked
  (DONT_FAKE_MONOTONIC=1): on a real machine a clock step moves CLOCK_REALTIME only.
- Database snapshots taken from copies (the file, its -wal and -shm), so that checking a
  database after a kill -9 never recovers or checkpoints the original.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import hashlib
import os
import shutil
import sqlite3
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.kit.faultfs.mounts import mount_fstype, run, wait_unmounted

SITE = Path(__file__).with_name("faketime_site")  # time.sleep without clock_nanosleep
LIBFAKETIME_GLOBS = ("/usr/lib/*/faketime/libfaketimeMT.so.1",
                     "/usr/lib/faketime/libfaketimeMT.so.1",
                     "/usr/local/lib/faketime/libfaketimeMT.so.1")


def libfaketime() -> str:
    """The multithreaded libfaketime (the service has many threads); fail when missing."""
    for pattern in LIBFAKETIME_GLOBS:
        found = sorted(glob.glob(pattern))
        if found:
            return found[0]
    pytest.fail("libfaketime not found: apt-get install faketime (CI installs it)", pytrace=False)


def _base_env() -> dict[str, str]:
    path = os.environ.get("PYTHONPATH", "")
    return {
        "LD_PRELOAD": libfaketime(),
        "DONT_FAKE_MONOTONIC": "1",
        "PYTHONPATH": f"{SITE}{os.pathsep}{path}" if path else str(SITE),
    }


def offset_env(offset: float) -> dict[str, str]:
    """A wall clock ``offset`` seconds from the real one, for the whole process tree."""
    return {**_base_env(), "FAKETIME": f"{offset:+.3f}"}


def offset_to(second: float, minute_start: float | None = None) -> float:
    """The offset that puts the clock at ``second`` of a minute now (of the next minute when
    that second has passed in this one), or at ``minute_start + second`` when given."""
    now = time.time()
    if minute_start is None:
        minute_start = now // 60 * 60
        if now - minute_start > second:
            minute_start += 60
    return minute_start + second - now


class SteppedClock:
    """A wall clock the test steps while the process runs (FAKETIME_TIMESTAMP_FILE).

    libfaketime reads the file at every clock call (FAKETIME_NO_CACHE=1), so a step applies
    at once to the service and to its workers, which inherit the environment.
    """

    def __init__(self, directory: Path) -> None:
        self.file = Path(directory) / "faketime.rc"
        self.offset = 0.0
        self.set(0.0)

    def env(self) -> dict[str, str]:
        return {**_base_env(), "FAKETIME_TIMESTAMP_FILE": str(self.file), "FAKETIME_NO_CACHE": "1"}

    def set(self, offset: float) -> None:
        tmp = self.file.with_suffix(".tmp")
        tmp.write_text(f"{offset:+.3f}\n")
        os.replace(tmp, self.file)
        self.offset = offset

    def step(self, seconds: float) -> None:
        self.set(self.offset + seconds)

    def now(self) -> float:
        return time.time() + self.offset


# -- databases --------------------------------------------------------------------------------

def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@dataclass
class Snapshot:
    integrity: str
    # (series, start) -> (count, errors, skipped, sum, max, min)
    minutes: dict[tuple[int, int], tuple]
    duplicates: int  # (series, start) pairs found more than once (must be 0), node rows too
    series: dict[int, tuple[str, str, str]]
    stuck: dict[tuple[int, int], float]


def snapshot(database: Path) -> Snapshot:
    """Read a copy of the database as a recovering reader would see it; never the original."""
    with tempfile.TemporaryDirectory(prefix="slowdown-snap-") as tmp:
        copy = Path(tmp) / "copy.db"
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                shutil.copyfile(f"{database}{suffix}", f"{copy}{suffix}")
        conn = sqlite3.connect(copy)
        try:
            integrity = "\n".join(r[0] for r in conn.execute("PRAGMA integrity_check"))
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
            if "minutes" not in tables:
                return Snapshot(integrity, {}, 0, {}, {})
            minutes = {(row[0], row[1]): row[2:] for row in conn.execute(
                "SELECT series, start, count, errors, skipped, sum, max, min FROM minutes")}
            stuck = {(s, t): st for s, t, st in conn.execute(
                "SELECT series, start, stuck FROM minutes")}
            duplicates = conn.execute(
                "SELECT count(*) FROM (SELECT 1 FROM minutes GROUP BY series, start "
                "HAVING count(*) > 1)").fetchone()[0]
            duplicates += conn.execute(
                "SELECT count(*) FROM (SELECT 1 FROM node GROUP BY host, start "
                "HAVING count(*) > 1)").fetchone()[0]
            series = {i: (h, t, o) for i, h, t, o in conn.execute(
                "SELECT id, host, target, op FROM series")}
        finally:
            conn.close()
    return Snapshot(integrity, minutes, duplicates, series, stuck)


# -- an ext4 volume that goes read-only under open files ----------------------------------------

class Ext4Volume:
    """A loop-mounted ext4 image mounted ``errors=remount-ro``.

    ``fail()`` raises a filesystem error through ext4's own test hook (sysfs
    ``trigger_fs_error``): the kernel aborts the journal and the filesystem turns read-only
    under every open file, as after a real disk error. ``repair()`` does what an admin does:
    unmount (lazily, the service may still hold files), e2fsck, mount again at the same path.
    (A plain ``mount -o remount,ro`` is refused while a file is open for writing.)
    """

    def __init__(self, directory: Path, size_mib: int = 32) -> None:
        self.size_mib = size_mib
        self.image = Path(directory).resolve() / "volume.img"
        self.point = Path(directory).resolve() / "volume"

    def __enter__(self) -> Ext4Volume:
        self.point.mkdir(parents=True, exist_ok=True)
        run(["truncate", "-s", f"{self.size_mib}M", str(self.image)])
        run(["mkfs.ext4", "-q", "-F", "-m", "0", "-b", "4096",
             "-E", "lazy_itable_init=0,lazy_journal_init=0", str(self.image)])
        self._mount()
        return self

    def _mount(self) -> None:
        run(["mount", "-o", "loop,errors=remount-ro", str(self.image), str(self.point)])
        if mount_fstype(self.point) != "ext4":
            raise RuntimeError(f"{self.point} is not mounted")

    def device(self) -> str:
        out = subprocess.run(["findmnt", "-no", "SOURCE", str(self.point)], capture_output=True,
                             text=True, check=True).stdout.split()
        return Path(out[-1]).name

    def options(self) -> str:
        return subprocess.run(["findmnt", "-no", "OPTIONS", str(self.point)],
                              capture_output=True, text=True, check=False).stdout.strip()

    def fail(self) -> None:
        Path(f"/sys/fs/ext4/{self.device()}/trigger_fs_error").write_text("slowdown test\n")
        deadline = time.monotonic() + 5
        while not self.read_only():
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.point} did not turn read-only: {self.options()}")
            time.sleep(0.05)

    def read_only(self) -> bool:
        """Writes are refused (kernels since 6.x show this as ``emergency_ro``, not ``ro``)."""
        try:
            fd = os.open(self.point / ".probe-write", os.O_WRONLY | os.O_CREAT, 0o600)
        except OSError as exc:
            if exc.errno == errno.EROFS:
                return True
            raise
        os.close(fd)
        os.unlink(self.point / ".probe-write")
        return False

    def repair(self) -> None:
        self._unmount()
        done = subprocess.run(["e2fsck", "-fy", str(self.image)], capture_output=True, text=True,
                              check=False)
        if done.returncode not in (0, 1):  # 1: errors corrected
            raise RuntimeError(f"e2fsck: {done.returncode}\n{done.stdout}{done.stderr}")
        self._mount()

    def _unmount(self) -> None:
        if mount_fstype(self.point) is None:
            return
        try:
            run(["umount", str(self.point)])
        except RuntimeError:
            run(["umount", "-l", str(self.point)])
        wait_unmounted(self.point)
        out = subprocess.run(["losetup", "-j", str(self.image)], capture_output=True, text=True,
                             check=False).stdout
        for line in out.splitlines():
            with contextlib.suppress(RuntimeError):
                run(["losetup", "-d", line.split(":", 1)[0]])

    def __exit__(self, *exc: object) -> None:
        self._unmount()


@contextlib.contextmanager
def ext4_volume(directory: Path) -> Iterator[Ext4Volume]:
    with Ext4Volume(directory) as volume:
        yield volume


def fill(directory: Path, name: str = "filler") -> Path:
    """Take every free block of the filesystem holding ``directory`` (ENOSPC from then on)."""
    path = Path(directory) / name
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for size in (1 << 20, 4096, 512):
            block = b"\0" * size
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, block)
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)
    return path
