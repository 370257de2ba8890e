"""The server side of the testbed: our own glusterd, bricks on loop-mounted ext4 images, one
volume (replica 2 on two bricks, or distribute over four with ``replica=1``); and the ledger
of everything made, so that cleanup touches nothing else.

Facts behind the choices (GlusterFS 10.3, Debian 12):
- glusterd listens on port 24007 and keeps its sockets in /var/run/gluster: one per machine.
  Ours runs in the foreground (``-N``, so it is our child and reaped) with a working
  directory of its own (not /var/lib/glusterd); a glusterd we did not start makes the testbed
  refuse, and a lock file makes a second testbed on the machine wait its turn.
- Bricks (glusterfsd) and the self-heal daemon are started by glusterd and daemonize; they are
  found by their command lines, which name our volume, and reaped by PID.
- A brick frozen with SIGSTOP would hang ``volume stop``: cleanup sends SIGCONT first.
- A slow brick server: its glusterfsd in a cpu cgroup of its own with a CFS quota (cgroup v1's
  ``cpu.cfs_quota_us``: this kernel has no ``cpu.max``), named after the prefix and removed by
  ``clean`` once the brick is gone. A quota alone hardly slows a brick that probes keep busy
  for well under a millisecond a second (measured: 5 %, 1 % and 0.5 % of a CPU over a second
  left md ops on it at 0.5-0.9 ms); a busy loop in the same group (``busy``), as other work
  on a loaded server, uses each period's quota up, and the brick's requests then wait for the
  next period (5 %: md-stat, md-read, md-delete 50-100 ms against 0.5-2 ms on the others).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import socket
import subprocess
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from tests.kit.faultfs.mounts import mount_fstype, wait_unmounted
from tests.kit.testbed.cpu_quota import CPU_CGROUPS, CpuQuotas

LOCK_FILE = Path("/run/lock/slowdown-testbed.lock")
GLUSTERD_VOL = """volume management
    type mgmt/glusterd
    option working-directory {workdir}
    option transport-type socket
    option transport.socket.keepalive-time 10
    option transport.socket.keepalive-interval 2
    option transport.socket.read-fail-log off
    option transport.socket.listen-port 24007
    option ping-timeout 0
    option event-threads 1
    option max-port 60999
end-volume
"""


class TestbedRefused(RuntimeError):
    """The testbed cannot start here without touching what is not its own."""

    __test__ = False  # an error, not a test class, whatever its name


def sh(*cmd: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
    """Run a fixed command (no shell); raise with its output when it fails."""
    proc = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): "
                           f"{(proc.stderr or proc.stdout).strip()}")
    return proc


def gluster(*args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
    return sh("gluster", "--mode=script", *args, timeout=timeout, check=check)


def processes() -> dict[int, tuple[str, str, str]]:
    """pid -> (comm, state, command line) of every live process."""
    found = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                stat = f.read()
            with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        state = stat[stat.rindex(")") + 2:].split()[0]
        if state != "Z":
            found[int(entry.name)] = (comm, state, cmdline)
    return found


def pids_mentioning(word: str) -> list[int]:
    """Live processes whose command line contains ``word`` (our unique prefix)."""
    me = os.getpid()
    return [pid for pid, (_, _, cmd) in processes().items() if word in cmd and pid != me]


def kill_all(pids: list[int], timeout: float = 10) -> None:
    """SIGCONT (a frozen one cannot die), SIGKILL, and wait until they are gone."""
    for sig in (signal.SIGCONT, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
    deadline = time.monotonic() + timeout
    live = processes()
    while any(p in live for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
        live = processes()


@dataclass
class Ledger:
    """What the testbed made, in the order it made it."""

    prefix: str
    base: Path
    images: list[Path] = field(default_factory=list)
    brick_mounts: list[Path] = field(default_factory=list)
    volume: str | None = None
    glusterd: subprocess.Popen | None = None
    files: list[Path] = field(default_factory=list)  # made by glusterd for our volume
    cgroups: list[Path] = field(default_factory=list)  # made to slow a brick down


def recovered(base: Path) -> Ledger:
    """The ledger of a testbed whose process was killed (``python -m tests.kit.testbed.gluster
    BASE`` cleans up after it): everything named after its prefix, the directory's name."""
    prefix = base.name
    ledger = Ledger(prefix, base, volume=prefix)
    ledger.images = sorted(base.glob("brick*.img"))
    ledger.brick_mounts = [i.with_suffix("") for i in ledger.images]
    ledger.files = [Path("/var/log/glusterfs/bricks") / (str(m / "brick").strip("/")
                                                         .replace("/", "-") + ".log")
                    for m in ledger.brick_mounts]
    ledger.files += volume_files(prefix) + sockets(prefix)
    ledger.cgroups = sorted(CPU_CGROUPS.glob(f"{prefix}-*"))
    return ledger


def volume_files(volume: str) -> list[Path]:
    """What glusterd makes outside its working directory for a volume, named after it."""
    return [Path("/var/run/gluster/vols") / volume, Path("/var/run/gluster/shd") / volume,
            Path("/var/log/glusterfs/gfproxy") / volume, Path("/var/log/glusterfs/snaps") / volume]


def sockets(volume: str) -> list[Path]:
    """The sockets of the volume's bricks and self-heal daemon (named by glusterd at random),
    read from their command lines while they run."""
    found = []
    for pid in pids_mentioning(volume):
        cmd = processes().get(pid, ("", "", ""))[2].split()
        if "-S" in cmd:
            found.append(Path(cmd[cmd.index("-S") + 1]))
    return found


class MachineLock:
    """One testbed of a kind per machine at a time (glusterd's port and /var/run/gluster are
    shared; so are the ports of the CephFS testbed's mon)."""

    def __init__(self, wait: float, path: Path = LOCK_FILE, what: str = "GlusterFS") -> None:
        self.wait = wait
        self.path = path
        self.what = what
        self.fd: int | None = None

    def __enter__(self) -> MachineLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + self.wait
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return self
            except BlockingIOError:
                if time.monotonic() > deadline:
                    os.close(self.fd)
                    raise TestbedRefused(
                        f"another {self.what} testbed holds {self.path} for more than "
                        f"{self.wait:.0f} s; one testbed per machine at a time") from None
                time.sleep(1)

    def __exit__(self, *exc: object) -> None:
        if self.fd is not None:
            os.close(self.fd)  # releases the lock; the file stays (it is shared)


def foreign_glusterd() -> list[int]:
    return [pid for pid, (comm, _, _) in processes().items() if comm == "glusterd"]


class Server:
    """glusterd and one volume on ext4 loop images, all under ``ledger.base``: replica 2 on
    two bricks (``replica=2``, the default), or distribute on ``bricks`` bricks (``replica=1``:
    each file on one brick, by the hash of its name)."""

    def __init__(self, ledger: Ledger, brick_mib: int = 4096, bricks: int = 2,
                 replica: int = 2) -> None:
        if replica < 1 or bricks % replica:
            raise ValueError(f"{bricks} bricks do not make replica-{replica} sets")
        self.ledger = ledger
        self.brick_mib = brick_mib
        self.bricks = bricks
        self.replica = replica
        self.host = socket.gethostname()
        self._quotas = CpuQuotas(ledger)

    @property
    def volume(self) -> str:
        assert self.ledger.volume is not None
        return self.ledger.volume

    def start(self, ping_timeout: int | None = None) -> None:
        others = foreign_glusterd()
        if others:
            raise TestbedRefused(
                f"a glusterd this testbed did not start is running (pid {others[0]}); GlusterFS "
                "runs one glusterd per machine (port 24007, /var/run/gluster): stop it or use "
                "another machine")
        self._start_glusterd()
        bricks = [self._brick(n) for n in range(1, self.bricks + 1)]
        name = self.ledger.prefix
        replicas = ["replica", str(self.replica)] if self.replica > 1 else []
        gluster("volume", "create", name, *replicas,
                *[f"{self.host}:{b}" for b in bricks], "force")
        self.ledger.volume = name
        for b in bricks:  # the brick logs glusterd names after the brick path
            self.ledger.files.append(
                Path("/var/log/glusterfs/bricks") / (str(b).strip("/").replace("/", "-") + ".log"))
        self.ledger.files += volume_files(name)
        if ping_timeout is not None:
            gluster("volume", "set", name, "network.ping-timeout", str(ping_timeout))
        gluster("volume", "start", name)
        self.brick_pids()  # up
        self.ledger.files += sockets(name)

    def _start_glusterd(self) -> None:
        workdir = self.ledger.base / "glusterd"
        workdir.mkdir()
        vol = self.ledger.base / "glusterd.vol"
        vol.write_text(GLUSTERD_VOL.format(workdir=workdir))
        self.ledger.glusterd = subprocess.Popen(
            ["glusterd", "-N", "-f", str(vol), "-p", str(self.ledger.base / "glusterd.pid"),
             "-l", str(self.ledger.base / "glusterd.log")],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while gluster("volume", "list", check=False, timeout=10).returncode != 0:
            if self.ledger.glusterd.poll() is not None or time.monotonic() > deadline:
                log = (self.ledger.base / "glusterd.log")
                raise RuntimeError("glusterd did not start:\n" +
                                   (log.read_text()[-2000:] if log.exists() else ""))
            time.sleep(0.3)

    def _brick(self, n: int) -> Path:
        image = self.ledger.base / f"brick{n}.img"
        point = self.ledger.base / f"brick{n}"
        sh("truncate", "-s", f"{self.brick_mib}M", str(image))
        self.ledger.images.append(image)
        sh("mkfs.ext4", "-q", "-F", "-m", "0", "-i", "8192",
           "-E", "lazy_itable_init=0,lazy_journal_init=0", str(image))
        point.mkdir()
        sh("mount", "-o", "loop", str(image), str(point))
        self.ledger.brick_mounts.append(point)
        if mount_fstype(point) != "ext4":
            raise RuntimeError(f"{image} did not mount on {point}")
        brick = point / "brick"
        brick.mkdir()
        return brick

    def brick_pids(self) -> dict[str, int]:
        """brick path -> glusterfsd pid, as glusterd reports them."""
        out = gluster("--xml", "volume", "status", self.volume, timeout=30).stdout
        found = {}
        for node in ET.fromstring(out).iter("node"):
            path, pid = node.findtext("path"), node.findtext("pid")
            if path and path.startswith("/") and pid and int(pid) > 0:
                found[path] = int(pid)
        return found

    def slow_down(self, pid: int, percent: float, busy: bool = True) -> Path:
        """Hold a brick's glusterfsd to ``percent`` of one CPU (``cpu_quota.py``), removed by
        ``clean``; ``busy``: with a busy loop beside it in the group that uses the quota up."""
        return self._quotas.slow_down(pid, percent, busy)

    def release(self, pid: int) -> None:
        """The daemon back at full speed, its busy loop ended."""
        self._quotas.release(pid)

    def restart_bricks(self) -> None:
        """Start the bricks that are down (``volume start force``), as an admin would."""
        gluster("volume", "start", self.volume, "force", timeout=60)

    def clean(self) -> list[str]:
        """Undo everything in the ledger; returns what could not be undone (empty: all)."""
        problems: list[str] = []
        prefix, ledger = self.ledger.prefix, self.ledger

        def attempt(what: str, fn, *args) -> None:
            try:
                fn(*args)
            except Exception as exc:  # go on: the rest must still be undone
                problems.append(f"{what}: {exc}")

        for pid in list(self._quotas.busy):
            attempt(f"release {pid}", self.release, pid)
        for pid in pids_mentioning(prefix):  # a frozen brick would hang volume stop
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        if ledger.volume and ledger.glusterd and ledger.glusterd.poll() is None:
            gluster("volume", "stop", ledger.volume, "force", check=False, timeout=120)
            attempt("volume delete", gluster, "volume", "delete", ledger.volume)
        attempt("processes", kill_all, [p for p in pids_mentioning(prefix)
                                        if ledger.glusterd is None or p != ledger.glusterd.pid])
        if ledger.glusterd is not None and ledger.glusterd.poll() is None:
            ledger.glusterd.terminate()
            try:
                ledger.glusterd.wait(timeout=15)
            except subprocess.TimeoutExpired:
                ledger.glusterd.kill()
                ledger.glusterd.wait()
        for group in ledger.cgroups:  # empty once its processes are gone
            attempt(f"cgroup {group}", _remove_cgroup, group)
        for point in reversed(ledger.brick_mounts):
            attempt(f"umount {point}", _unmount, point)
        for image in ledger.images:
            attempt(f"detach {image}", _detach, image)
        for path in ledger.files:
            attempt(f"remove {path}", _remove, path)
        return problems


def _unmount(point: Path) -> None:
    if mount_fstype(point) is None:
        return
    if sh("umount", str(point), check=False).returncode != 0:
        sh("umount", "-l", str(point))
    wait_unmounted(point, timeout=30)


def _remove_cgroup(group: Path) -> None:
    deadline = time.monotonic() + 10  # a killed process leaves its cgroup a moment later
    while group.exists():
        try:
            group.rmdir()
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def _detach(image: Path) -> None:
    for line in sh("losetup", "-j", str(image), check=False).stdout.splitlines():
        sh("losetup", "-d", line.split(":", 1)[0], check=False)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        for child in sorted(path.rglob("*"), reverse=True):
            child.rmdir() if child.is_dir() and not child.is_symlink() else child.unlink()
        path.rmdir()
    else:
        path.unlink(missing_ok=True)


def prefix_leftovers(prefix: str, files: Iterable[Path]) -> list[str]:
    """What a testbed whose every name carries ``prefix`` left: processes, mounts, loop
    devices, and which of ``files`` still exist (GlusterFS's and CephFS's testbeds alike)."""
    found = [f"process {pid}: {processes().get(pid, ('', '', ''))[2]}"
             for pid in pids_mentioning(prefix)]
    with open("/proc/self/mountinfo") as f:
        found += [f"mount {line.split()[4]}" for line in f if prefix in line]
    loops = sh("losetup", "-a", check=False).stdout
    found += [f"loop {line}" for line in loops.splitlines() if prefix in line]
    found += [f"file {p}" for p in files if os.path.lexists(p)]
    return found


def leftovers(ledger: Ledger) -> list[str]:
    """Anything of ours still there: processes, mounts, loop devices, files."""
    found = prefix_leftovers(ledger.prefix, ledger.files)
    found += [f"cgroup {g}" for g in CPU_CGROUPS.glob(f"{ledger.prefix}-*")]
    if ledger.glusterd is not None and ledger.glusterd.poll() is None:
        found.append(f"glusterd {ledger.glusterd.pid}")
    if ledger.base.exists():
        found.append(f"directory {ledger.base}")
    return found


if __name__ == "__main__":
    import shutil
    import sys

    for arg in sys.argv[1:]:
        gone = recovered(Path(arg).resolve())
        left = Server(gone).clean()
        if not left and gone.prefix not in Path("/proc/self/mountinfo").read_text():
            shutil.rmtree(gone.base)
        print(arg, left or "cleaned", leftovers(gone))
