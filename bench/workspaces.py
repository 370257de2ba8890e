"""Workspaces, a loop-mounted ext4 image and the machine's description, for the probe and
service benchmarks (bench_probe.py, bench_service.py)."""

from __future__ import annotations

import contextlib
import os
import platform
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

HOST = "benchhost"
MIB = 1 << 20
GIB = 1 << 30


@dataclass(frozen=True)
class BenchTarget:
    name: str
    path: Path
    data_size: int  # bytes, a multiple of 1 MiB
    pool_files: int = 10
    pool_dirs: int = 10

    @property
    def data(self) -> Path:
        return self.path / ".slowdown" / HOST / "data.bin"


def write_config(path: Path, database: Path, targets: Sequence[BenchTarget]) -> Path:
    lines = [f'database = "{database}"', f'host = "{HOST}"']
    for t in targets:
        # data_file = "own": the probe reads and writes the workspace's data.bin, the file
        # fio and ioping are run on (one node: nothing to share).
        lines += ["", "[[target]]", f'name = "{t.name}"', f'path = "{t.path}"',
                  'data_file = "own"',
                  f'data_size = "{t.data_size // MIB}MiB"', f"pool_files = {t.pool_files}",
                  f"pool_dirs = {t.pool_dirs}"]
    path.write_text("\n".join(lines) + "\n")
    return path


def probe_cli(config: Path, *args: str) -> subprocess.CompletedProcess:
    """``slowdown-probe --config CONFIG ARGS``, in a child with this interpreter."""
    done = subprocess.run([sys.executable, "-m", "slowdown.probe.command.main", "--config",
                           str(config), *args], capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"slowdown-probe {' '.join(args)} failed ({done.returncode}):\n"
                         f"{done.stdout}{done.stderr}")
    return done


def prepare(config: Path) -> float:
    """Prepare (or find prepared) every target's workspace; return the seconds it took."""
    t0 = time.monotonic()
    probe_cli(config, "prepare", "--no-progress")
    return time.monotonic() - t0


def cleanup(config: Path) -> None:
    probe_cli(config, "cleanup", "--yes")


def _run(*argv: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()}")


def is_mounted(path: Path) -> bool:
    return os.path.ismount(path)


def mounted_from(mountpoint: Path, image: Path) -> bool:
    """Whether ``mountpoint`` is a loop device backed by ``image``."""
    source = subprocess.run(["findmnt", "-n", "-o", "SOURCE", "--mountpoint", str(mountpoint)],
                            capture_output=True, text=True).stdout.split()
    backed = subprocess.run(["losetup", "-n", "-O", "NAME", "-j", str(image)],
                            capture_output=True, text=True).stdout.split()
    return bool(source) and source[0] in backed


@contextlib.contextmanager
def loop_ext4(image: Path, mountpoint: Path, size: int, keep: bool) -> Iterator[Path]:
    """An ext4 filesystem in ``image`` (sparse), loop-mounted at ``mountpoint`` (needs root).

    An existing image is mounted again as it is (``--keep`` of an earlier run), so its
    prepared workspace is reused; one still mounted there (an interrupted earlier run) is
    taken over as it is. Unmounted at the end; the image is removed unless ``keep``.
    """
    if os.geteuid() != 0:
        raise SystemExit("a loop-mounted ext4 image needs root (mount -o loop)")
    created = not image.exists()
    if created:
        with open(image, "wb") as f:
            f.truncate(size)
        _run("mkfs.ext4", "-q", "-F", "-m", "0", str(image))
    mountpoint.mkdir(parents=True, exist_ok=True)
    if is_mounted(mountpoint):
        if not mounted_from(mountpoint, image):
            raise SystemExit(f"{mountpoint} is already a mount point, not of {image}")
    else:
        _run("mount", "-o", "loop", str(image), str(mountpoint))
    if not is_mounted(mountpoint):
        raise SystemExit(f"{mountpoint} is not a mount point after mount")
    try:
        yield mountpoint
    finally:
        subprocess.run(["umount", str(mountpoint)], capture_output=True)
        if not keep and not is_mounted(mountpoint):
            image.unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                mountpoint.rmdir()


def settle(pause: float, limit: float = 60.0) -> None:
    """Let the page cache's writeback of a fresh prepare finish before anything is timed."""
    os.sync()
    end = time.monotonic() + limit
    while time.monotonic() < end:
        with open("/proc/meminfo") as f:
            kib = sum(int(line.split()[1]) for line in f
                      if line.startswith(("Dirty:", "Writeback:")))
        if kib < 16 * 1024:
            break
        time.sleep(0.5)
    time.sleep(pause)


def filesystem_of(path: Path) -> str:
    done = subprocess.run(["findmnt", "-n", "-o", "SOURCE,FSTYPE", "-T", str(path)],
                          capture_output=True, text=True)
    return " ".join(done.stdout.split()) or "unknown"


def machine() -> list[str]:
    """One line each: CPU, memory, kernel, Python, load."""
    cpu = "unknown CPU"
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem = 0
    with contextlib.suppress(OSError), open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem = int(line.split()[1]) * 1024
    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    return [f"machine: {os.cpu_count()} x {cpu}, {mem / GIB:.1f} GiB RAM, "
            f"Linux {platform.release()}, Python {platform.python_version()}",
            f"load average at start: {load}"]
