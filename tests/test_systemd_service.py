"""The service as its units run it: prepare and run in a sandbox like the units', and READY=1,
the watchdog through a hang and stopping, as systemd sees them."""

from __future__ import annotations

import os
import platform
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

from slowdown.probe.command import systemd_dropin as dropin
from tests.kit.faultfs import FaultFS
from tests.kit.servicekit import (
    NotifySocket,
    TargetSpec,
    live,
    output,
    probe_cli,
    records,
    start_service,
    wait_for,
    write_config,
)
from tests.kit.systemdkit import (
    OPS,
    SERVICE,
    SYSTEMD,
    settings,
)

# --------------------------------------------------------------------------- the service

# A sandbox like the units', in a process of its own: a mount namespace in which every mount
# is read-only but the paths given (ProtectSystem=strict and the drop-in's ReadWritePaths=),
# no new privileges, no memory both writable and executable, and a seccomp filter made from
# the unit's SystemCallFilter= and RestrictAddressFamilies= (EPERM and EAFNOSUPPORT, as there).
SANDBOX = r"""
import ctypes, os, struct, sys
libc = ctypes.CDLL(None, use_errno=True)
def check(result, what):
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
def mount(source, target, flags):
    check(libc.mount(source and source.encode(), target.encode(), None, flags, None), target)
MS_RDONLY, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 32, 4096, 16384, 1 << 18
check(libc.unshare(0x00020000), "unshare")
mount(None, "/", MS_REC | MS_PRIVATE)
points = sorted({line.split()[4].encode().decode("unicode_escape")
                 for line in open("/proc/self/mountinfo")}, key=len)
for point in points:
    if not point.startswith(("/proc", "/sys", "/dev")):
        mount(None, point, MS_REMOUNT | MS_BIND | MS_RDONLY)
for path in filter(None, os.environ.pop("SANDBOX_WRITABLE").split("\n")):
    mount(path, path, MS_BIND | MS_REC)
    mount(None, path, MS_REMOUNT | MS_BIND)
check(libc.prctl(38, 1, 0, 0, 0), "PR_SET_NO_NEW_PRIVS")
check(libc.prctl(65, 1, 0, 0, 0), "PR_SET_MDWE")
LD, JEQ, RET = 0x20, 0x15, 0x06
ALLOW, KILL, ERRNO = 0x7FFF0000, 0x80000000, 0x00050000
socket_nr, *families = map(int, os.environ.pop("SANDBOX_SOCKET").split(","))
prog = [(LD, 0, 0, 4), (JEQ, 1, 0, 0xC000003E), (RET, 0, 0, KILL), (LD, 0, 0, 0),
        (JEQ, 0, len(families) + 3, socket_nr), (LD, 0, 0, 16)]
prog += [(JEQ, len(families) - i, 0, f) for i, f in enumerate(families)]
prog += [(RET, 0, 0, ERRNO | 97), (RET, 0, 0, ALLOW), (LD, 0, 0, 0)]
for nr in map(int, os.environ.pop("SANDBOX_SYSCALLS").split(",")):
    prog += [(JEQ, 0, 1, nr), (RET, 0, 0, ALLOW)]
prog.append((RET, 0, 0, ERRNO | 1))
code = ctypes.create_string_buffer(b"".join(struct.pack("HBBI", *i) for i in prog))
class Program(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
check(libc.prctl(22, 2, ctypes.byref(Program(len(prog), ctypes.addressof(code))), 0, 0),
      "PR_SET_SECCOMP")
os.execv(sys.executable, [sys.executable, *sys.argv[1:]])
"""


def syscall_group(name: str) -> set[str]:
    """The system calls of a systemd group such as @system-service, groups expanded."""
    done = subprocess.run(["systemd-analyze", "syscall-filter", name], capture_output=True,
                          text=True, timeout=60, check=True)
    calls: set[str] = set()
    for line in done.stdout.splitlines()[1:]:
        word = line.strip()
        if word and not word.startswith("#"):
            calls |= syscall_group(word) if word.startswith("@") else {word}
    return calls


def syscall_numbers() -> dict[str, int]:
    """Names to numbers on this machine (x86-64: the seccomp filter above is for it)."""
    assert platform.machine() == "x86_64", "the seccomp sandbox knows x86-64 only"
    header = next(Path("/usr/include").glob("*/asm/unistd_64.h"), None)
    assert header is not None, "asm/unistd_64.h missing: apt-get install linux-libc-dev"
    found = re.findall(r"#define __NR_(\w+) (\d+)", header.read_text())
    return {name: int(number) for name, number in found}


def sandbox_env(writable: list[Path]) -> dict[str, str]:
    """What SANDBOX needs, taken from slowdown-probe.service itself."""
    unit = settings((SYSTEMD / SERVICE).read_text())
    assert unit["SystemCallArchitectures"] == ["native"]
    assert unit["SystemCallErrorNumber"] == ["EPERM"]
    first, *rest = unit["SystemCallFilter"]
    assert not first.startswith("~")
    allowed: set[str] = set()
    for entry in (first, *rest):
        names = set().union(*(syscall_group(w) if w.startswith("@") else {w}
                              for w in entry.lstrip("~").split()))
        allowed = allowed - names if entry.startswith("~") else allowed | names
    numbers = syscall_numbers()
    families = [str(int(getattr(socket, f))) for f in unit["RestrictAddressFamilies"][0].split()]
    return {"SANDBOX_WRITABLE": "\n".join(map(str, writable)),
            "SANDBOX_SYSCALLS": ",".join(str(numbers[n]) for n in sorted(allowed & set(numbers))),
            "SANDBOX_SOCKET": ",".join([str(numbers["socket"]), *families])}


def sandboxed(writable: list[Path], *args: str, timeout: float = 60
              ) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", SANDBOX, *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **sandbox_env(writable)})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.root
@pytest.mark.timeout(120)
def test_prepare_and_run_in_a_sandbox_like_the_units(tmp_path, monkeypatch):
    """The first prepare with only the target directories writable, then the service with only
    the workspaces and the database's directory, both under the unit's system call filter:
    every op recorded, no error anywhere, the metrics endpoint answering."""
    targets = [TargetSpec("one", tmp_path / "one"), TargetSpec("two", tmp_path / "two")]
    for t in targets:
        t.path.mkdir()
    database = tmp_path / "db" / "slowdown.db"
    database.parent.mkdir()
    config = write_config(tmp_path / "slowdown.toml", database, targets)
    port = free_port()
    with config.open("a") as f:
        f.write(f'[metrics]\nlisten = "127.0.0.1:{port}"\n')
    monkeypatch.setattr(dropin, "PRIVATE_TMP", ())  # this test's directories are under /tmp
    loaded = dropin.service_config(config, {})
    for_prepare = [p for p, _, _ in dropin.build(loaded, prepare=True).writable]
    for_service = [p for p, _, _ in dropin.build(loaded).writable]
    assert for_prepare == [t.path for t in targets]
    assert for_service == [t.path / ".slowdown" / "testhost" for t in targets] + [database.parent]

    probe = sandboxed([], "-c", textwrap.dedent("""
        import mmap, os, socket
        for attempt in (lambda: mmap.mmap(-1, 4096, prot=7), lambda: os.nice(-1),
                        lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW),
                        lambda: open("/etc/slowdown-sandbox-test", "w")):
            try:
                attempt()
                print("allowed")
            except OSError as exc:
                print(exc.errno)
        """))
    assert probe.stdout.split() == ["13", "1", "97", "30"], probe.stdout + probe.stderr
    done = sandboxed(for_prepare, "-m", "slowdown.probe.command.main", "--config", str(config),
                     "prepare", "--no-progress")
    assert done.returncode == 0, done.stderr
    service = subprocess.Popen(
        [sys.executable, "-c", SANDBOX, "-m", "slowdown.probe.command.main",
         "--config", str(config),
         "run", "--duration", "6s"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, **sandbox_env(for_service)})
    try:
        page = wait_for(lambda: scrape(port), 15, what="the metrics endpoint")
        _, err = service.communicate(timeout=30)
    finally:
        if service.poll() is None:
            service.kill()
            service.wait()
    assert service.returncode == 0, err
    assert "slowdown" in page
    assert "Read-only file system" not in err, err  # nor an error line, dated or not:
    assert not re.search(r"^(<[0-3]>|\S+ (ERROR|CRITICAL) )", err, re.M), err
    recs = records(database)
    assert {(r.target, r.op) for r in recs} == {(t.name, op) for t in targets for op in OPS}
    assert sum(r.errors for r in recs) == 0, err


def scrape(port: int) -> str | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as answer:
            return answer.read().decode()
    except OSError:
        return None


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.timeout(60)
def test_ready_then_watchdog_through_a_hang_then_stopping(tmp_path, faultfs: FaultFS):
    target = TargetSpec("fuse", faultfs.mountpoint)
    database = tmp_path / "db" / "slowdown.db"
    config = write_config(tmp_path / "slowdown.toml", database, [target])
    done = probe_cli(config, "prepare", "--no-progress", timeout=40)  # through FUSE, no fault
    assert done.returncode == 0, done.stderr
    notify = NotifySocket(tmp_path)
    watchdog = 2.0
    proc = start_service(config, env={"NOTIFY_SOCKET": str(notify.path), "WATCHDOG_PID": "",
                                      "WATCHDOG_USEC": str(int(watchdog * 1e6))},
                         journal=True)
    try:
        ready = notify.wait("READY=1", 20)
        wait_for(lambda: database.with_name("slowdown.db.live.json").exists(), 10,
                 what="the live state")
        wait_for(lambda: live(database)["targets"]["fuse"]["ticks"] >= 2, 10,
                 what="two ticks before the hang")
        workers = psutil.Process(proc.pid).children()  # only the service speaks to systemd
        assert workers and all("NOTIFY_SOCKET" not in w.environ() for w in workers)
        faultfs.hang("*")
        faultfs.wait_hung(timeout=5)
        hung = time.monotonic()
        time.sleep(8)
        assert faultfs.hung(), "the hang ended by itself"
        ages = [f["age"] for f in live(database)["targets"]["fuse"]["in_flight"]]
        assert ages and max(ages) >= 5, ages  # the service saw the op hang all along
        term = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        stopping = notify.wait("STOPPING=1", 10)
        proc.wait(timeout=15)
        exited = time.monotonic()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        faultfs.release()
        notify.close()
    log = output(proc)
    assert proc.returncode == 0, log
    assert exited - term < 10, f"exit took {exited - term:.1f} s"
    pings = notify.times("WATCHDOG=1")
    assert pings and min(pings) > ready, "a watchdog ping before READY=1"
    during = [hung, *notify.times("WATCHDOG=1", hung, term), term]
    assert len(during) >= 8, during
    gaps = [b - a for a, b in zip(during, during[1:])]
    assert max(gaps) < watchdog, f"watchdog gap {max(gaps):.2f} s while the target hung"
    assert term < stopping and not notify.times("WATCHDOG=1", stopping)
    # Journald reads the priority from each line's <N> prefix: one line per event, every one.
    lines = [line for line in log.splitlines() if line.strip()]
    assert lines and all(re.match(r"<[0-7]>\S", line) for line in lines), log
