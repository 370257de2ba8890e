"""The benchmarks' kit: workspaces, a loop-mounted ext4 image and the machine's description for
the probe and service benchmarks (bench_probe.py, bench_service.py, service_cpu.py,
service_ticks.py), and the two targets the service benchmarks prepare alike."""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

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


# -- the service benchmarks' two targets ---------------------------------------------------------

DEFAULT_DIR = Path("/var/tmp/slowdown-bench-service")
GOAL_P99 = 5e-3  # the tick start delay's, seconds
PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


def reap_orphans(deadline: float) -> list[int]:
    """Wait for every child left (the service's workers, handed to us); return any still alive
    at ``deadline`` (seconds from now)."""
    end = time.monotonic() + deadline
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return []
        if pid == 0:
            if time.monotonic() >= end:
                return [p.pid for p in psutil.Process().children()]
            time.sleep(0.05)


def parse_seconds(text: str) -> float:
    from slowdown.analysis.units import parse_duration

    return float(parse_duration(text))


def progress(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def add_target_options(parser: argparse.ArgumentParser, quick: str = "") -> None:
    """The options of the two targets: where, the second's kind, sizes, keep."""
    parser.add_argument("--dir", type=Path, default=None,
                        help=f"where everything goes (default {DEFAULT_DIR}; the root disk)")
    parser.add_argument("--second", choices=("loop", "dir"), default=None,
                        help="second target on a loop-mounted ext4 image (default; root) or in "
                        f"a second directory on the root disk{quick}")
    parser.add_argument("--size", default=None, help="data.bin size per target in GiB (2)")
    parser.add_argument("--pool-files", type=int, default=None, help="md pool size (10000)")
    parser.add_argument("--keep", action="store_true",
                        help="keep the workspaces (and image) for the next run")


@dataclass
class ServiceTargets:
    """Two prepared targets and the configuration that names them."""

    base: Path
    config: Path
    database: Path
    targets: list[BenchTarget]
    header: list[str]  # the machine, the targets
    prepared_in: float  # seconds


@contextlib.contextmanager
def service_targets(args: argparse.Namespace, quick: bool = False) -> Iterator[ServiceTargets]:
    """Two targets prepared with ``slowdown-probe prepare``: ``root``, a directory on the root
    disk, and ``loop``, a directory on a loop-mounted ext4 image (needs root), or ``dir``, a
    second directory on the root disk. This process becomes the child subreaper of what it
    starts. Unless ``args.keep``, everything goes at the end."""
    size = int(float(args.size) * GIB) if args.size else (64 * MIB if quick else 2 * GIB)
    size -= size % MIB
    pool = args.pool_files or (100 if quick else 10_000)
    second = args.second or ("dir" if quick else "loop")
    base = (args.dir or DEFAULT_DIR).resolve()
    made_base = not base.exists()
    base.mkdir(parents=True, exist_ok=True)
    become_subreaper()
    header = machine()
    config = base / "bench-service.toml"
    database = base / "db" / "slowdown.db"
    with contextlib.ExitStack() as stack:
        if second == "loop":
            mnt = stack.enter_context(loop_ext4(base / "ext4.img", base / "mnt",
                                                size + size // 8 + 256 * MIB, args.keep))
            second_path = mnt / "loop"
        else:
            second_path = base / "second"
        targets = [BenchTarget("root", base / "root", size, pool, 10),
                   BenchTarget(second, second_path, size, pool, 10)]
        write_config(config, database, targets)
        if not args.keep:
            stack.callback(config.unlink, missing_ok=True)
            stack.callback(cleanup, config)
        progress(f"preparing {len(targets)} workspaces of {size / GIB:.2f} GiB + {pool} files")
        took = prepare(config)
        for t in targets:
            header.append(f"target {t.name}: {t.path} on {filesystem_of(t.path)}, data.bin "
                          f"{size / GIB:.2f} GiB, pool {pool} files in 10 directories")
        yield ServiceTargets(base, config, database, targets, header, took)
        if not args.keep:
            for leftover in database.parent.glob(database.name + "*"):
                leftover.unlink()
            with contextlib.suppress(OSError):
                database.parent.rmdir()
    if not args.keep and made_base:
        with contextlib.suppress(OSError):
            base.rmdir()


def load_average() -> str:
    with open("/proc/loadavg") as f:
        return f"load average at end: {' '.join(f.read().split()[:3])}"


def print_on_targets(args: argparse.Namespace, run: Callable[[ServiceTargets], str]) -> int:
    """``run`` on the service's targets (interval 1 s), then its text printed after the
    machine, the targets and the load average at the end; the exit status, 0."""
    with service_targets(args) as bench:
        header = bench.header
        header.append(f"prepared in {bench.prepared_in:.0f} s; interval 1 s")
        text = run(bench)
    header.append(load_average())
    print("\n".join([*header, ""]))
    print(text)
    return 0
