"""The hardened systemd units: checked and rated by systemd's own tools, the drop-in made from the
configuration, the service in a sandbox like theirs, and its notify protocol while a target hangs.

There is no running systemd here: `systemd-analyze verify` and `security --offline=true` read the
unit files as systemd would (verify exits 0 on unknown keys and bad values, so any word on stderr
fails), `systemd-sysusers` and `systemd-tmpfiles` work on a scratch root.
"""

from __future__ import annotations

import inspect
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import click
import psutil
import pytest
from click.testing import CliRunner

from slowdown.probe import dropin
from slowdown.probe.cli import ProbeContext
from slowdown.probe.dropin import systemd_dropin, unit_path
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

SYSTEMD = Path(__file__).resolve().parent.parent / "systemd"
SERVICE = "slowdown-probe.service"
PREPARE = "slowdown-probe-prepare.service"
UNITS = (SERVICE, PREPARE)
EXEC = "/usr/local/bin/slowdown-probe"
MAX_EXPOSURE = 2.5
OPS = ("data-read", "data-write", "md-stat", "md-read", "md-delete", "md-write")


# --------------------------------------------------------------------------- helpers


@click.group()
@click.option("--config", "config_path", type=click.Path(path_type=Path), default=None)
@click.pass_context
def group(ctx: click.Context, config_path: Path | None) -> None:
    """Stands in for `slowdown-probe`, which hands its commands a ProbeContext."""
    ctx.obj = ProbeContext(config_path=config_path)


group.add_command(systemd_dropin)


def run_dropin(config: Path, *args: str) -> click.testing.Result:
    separate = "mix_stderr" in inspect.signature(CliRunner.__init__).parameters
    runner = CliRunner(**({"mix_stderr": False} if separate else {}))
    return runner.invoke(group, ["--config", str(config), "systemd-dropin", *args])


def writable(text: str) -> list[str]:
    return [line.split("=", 1)[1] for line in text.splitlines()
            if line.startswith("ReadWritePaths=")]


def settings(text: str) -> dict[str, list[str]]:
    """Key -> values of a unit file (comments and section headers left out)."""
    found: dict[str, list[str]] = {}
    for line in text.splitlines():
        if line and not line.startswith(("#", ";", "[")):
            key, _, value = line.partition("=")
            found.setdefault(key.strip(), []).append(value.strip())
    return found


def install_units(directory: Path) -> Path:
    """The units in a directory of their own, ExecStart= naming a program that exists (verify
    checks it): the installed slowdown-probe, else a stand-in that runs the same code."""
    directory.mkdir(parents=True, exist_ok=True)
    program = shutil.which("slowdown-probe")
    if program is None:
        stand_in = directory / "bin" / "slowdown-probe"
        stand_in.parent.mkdir()
        stand_in.write_text(f"#!{sys.executable}\nfrom slowdown.probe.cli import main\nmain()\n")
        stand_in.chmod(0o755)
        program = str(stand_in)
    for unit in UNITS:
        text = (SYSTEMD / unit).read_text()
        assert f"ExecStart={EXEC} " in text, unit
        (directory / unit).write_text(text.replace(EXEC, program))
    return directory


def verify(directory: Path) -> None:
    done = subprocess.run(["systemd-analyze", "verify", *(str(directory / u) for u in UNITS)],
                          capture_output=True, text=True, timeout=120, cwd=directory)
    assert done.returncode == 0 and not done.stderr.strip(), done.stderr + done.stdout


def exposure(unit: Path) -> float:
    done = subprocess.run(["systemd-analyze", "security", "--offline=true", "--no-pager",
                           str(unit)], capture_output=True, text=True, timeout=120)
    found = re.search(r"Overall exposure level for \S+: (\d+(?:\.\d+)?)", done.stdout)
    assert found, done.stdout + done.stderr
    return float(found.group(1))


def two_targets(tmp_path: Path, **top: str) -> Path:
    lines = [f'{key} = "{value}"' for key, value in top.items()]
    lines += ['host = "node1"',
              "[[target]]", 'name = "home"', 'path = "/srv/slowdown test/home"',
              "[[target]]", 'name = "work"', 'path = "/lustre/work/slowdown-probe"']
    path = tmp_path / "slowdown.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


# --------------------------------------------------------------------------- the units


@pytest.mark.timeout(120)
def test_units_verify_without_a_word(tmp_path):
    verify(install_units(tmp_path / "units"))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("unit", UNITS)
def test_units_are_rated_safe(tmp_path, unit):
    directory = install_units(tmp_path / "units")
    score = exposure(directory / unit)
    assert score <= MAX_EXPOSURE, f"{unit}: exposure {score}"
    # The same judgement as systemd's own gate (its scale is ten times finer).
    gate = subprocess.run(["systemd-analyze", "security", "--offline=true", "--no-pager",
                           f"--threshold={int(MAX_EXPOSURE * 10)}", str(directory / unit)],
                          capture_output=True, text=True, timeout=120)
    assert gate.returncode == 0, gate.stdout + gate.stderr


@pytest.mark.timeout(120)
def test_units_verify_and_stay_safe_with_the_generated_dropins(tmp_path):
    """Paths that need quoting, a home directory (ProtectHome=read-only) and a database outside
    the state directory: systemd reads all of it without a complaint."""
    config = two_targets(tmp_path, database="/srv/slowdown db/100%/slowdown.db")
    config.write_text(config.read_text().replace("/srv/slowdown test/home",
                                                 "/home/slowdown probe"))
    directory = install_units(tmp_path / "units")
    for unit, args in ((SERVICE, ()), (PREPARE, ("--prepare",))):
        result = run_dropin(config, *args)
        assert result.exit_code == 0, result.stderr
        assert "ProtectHome=read-only" in result.stdout
        (directory / f"{unit}.d").mkdir()
        (directory / f"{unit}.d" / "targets.conf").write_text(result.stdout)
    verify(directory)
    for unit in UNITS:
        assert exposure(directory / unit) <= MAX_EXPOSURE, unit


def test_unit_settings_the_issue_asks_for_and_none_that_would_distort():
    service = settings((SYSTEMD / SERVICE).read_text())
    prepare = settings((SYSTEMD / PREPARE).read_text())
    assert service["Type"] == ["notify"] and service["Restart"] == ["on-failure"]
    assert service["WatchdogSec"] and service["MemoryMax"] and service["TasksMax"]
    assert service["KillMode"] == ["mixed"]  # the service ends its own probe workers
    assert service["CapabilityBoundingSet"] == [""] and service["ProtectSystem"] == ["strict"]
    assert service["RestrictAddressFamilies"] == ["AF_UNIX AF_INET AF_INET6"]
    assert service["User"] == [dropin.SERVICE_USER]
    assert Path("/var/lib", *service["StateDirectory"]) == dropin.STATE_DIRECTORY
    assert PREPARE in service["Wants"][0] and PREPARE in service["After"][0]
    assert prepare["Type"] == ["oneshot"] and prepare["TimeoutStartSec"] == ["infinity"]
    assert "prepare --no-progress" in prepare["ExecStart"][0]
    for unit in (service, prepare):
        for key in ("Nice", "CPUQuota", "CPUWeight", "IOSchedulingClass",
                    "IOSchedulingPriority", "IOWeight", "MemoryHigh", "CPUSchedulingPolicy"):
            assert key not in unit, key


@pytest.mark.timeout(60)
def test_sysusers_and_tmpfiles_make_the_user_and_its_directories(tmp_path):
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    for tool, conf in (("systemd-sysusers", "slowdown.sysusers.conf"),
                       ("systemd-tmpfiles", "slowdown.tmpfiles.conf")):
        args = [tool, f"--root={root}", *(["--create"] if tool == "systemd-tmpfiles" else []),
                str(SYSTEMD / conf)]
        done = subprocess.run(args, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
    entry = next(line.split(":") for line in (root / "etc/passwd").read_text().splitlines()
                 if line.startswith(f"{dropin.SERVICE_USER}:"))
    uid, home, shell = int(entry[2]), entry[5], entry[6]
    assert 0 < uid < 1000 and home == str(dropin.STATE_DIRECTORY) and "nologin" in shell
    state = root / str(dropin.STATE_DIRECTORY).lstrip("/")
    assert state.stat().st_uid == uid and oct(state.stat().st_mode & 0o777) == "0o755"
    assert (root / "etc/slowdown").is_dir()


# --------------------------------------------------------------------------- the drop-in


def test_the_dropin_lists_exactly_the_workspaces(tmp_path):
    config = two_targets(tmp_path, database="/var/lib/slowdown/slowdown.db")
    result = run_dropin(config)
    assert result.exit_code == 0, result.stderr
    assert writable(result.stdout) == ['"-/srv/slowdown test/home/.slowdown/node1"',
                                       "-/lustre/work/slowdown-probe/.slowdown/node1"]
    assert result.stdout.splitlines()[0].startswith(f"# {SERVICE}")
    assert "ProtectHome" not in result.stdout
    # Missing directories are named on stderr, with the command that makes them.
    assert "install -d -o slowdown -g slowdown '/srv/slowdown test/home'" in result.stderr


def test_a_database_left_to_its_default_is_in_the_state_directory(tmp_path, monkeypatch):
    monkeypatch.delenv("STATE_DIRECTORY", raising=False)  # as in an administrator's shell
    result = run_dropin(two_targets(tmp_path))
    assert result.exit_code == 0, result.stderr
    assert len(writable(result.stdout)) == 2


def test_a_database_elsewhere_adds_its_directory(tmp_path):
    result = run_dropin(two_targets(tmp_path, database="/srv/slowdown/db/slowdown.db"))
    assert result.exit_code == 0, result.stderr
    assert writable(result.stdout)[2:] == ["/srv/slowdown/db"]  # no '-': the service needs it


def test_the_prepare_dropin_lists_the_target_directories(tmp_path):
    config = two_targets(tmp_path, database="/srv/slowdown/db/slowdown.db")
    result = run_dropin(config, "--prepare")
    assert result.exit_code == 0, result.stderr
    assert writable(result.stdout) == ['"-/srv/slowdown test/home"',
                                       "-/lustre/work/slowdown-probe"]
    assert result.stdout.splitlines()[0].startswith(f"# {PREPARE}")


@pytest.mark.parametrize("where", ["target", "token"])
def test_a_path_under_the_private_tmp_is_refused_and_nothing_written(tmp_path, where):
    config = two_targets(tmp_path)
    if where == "target":
        config.write_text(config.read_text().replace("/srv/slowdown test/home", "/tmp/probe"))
    else:
        config.write_text(config.read_text() + textwrap.dedent("""
            [[alert]]
            name = "slow"
            statistic = "q95"
            window = "10m"
            above = 10.0
            action = { type = "webhook", url = "https://example.org/h", token_file = "/var/tmp/t" }
            """))
    out = tmp_path / "slowdown-probe.service.d" / "targets.conf"
    out.parent.mkdir()
    out.write_text("# the previous drop-in\n")
    result = run_dropin(config, "--output", str(out))
    assert result.exit_code == 1 and result.stdout == ""
    assert ("/tmp/probe" if where == "target" else "/var/tmp/t") in result.stderr
    assert "PrivateTmp" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert out.read_text() == "# the previous drop-in\n"
    assert sorted(p.name for p in out.parent.iterdir()) == ["targets.conf"]


def test_output_replaces_the_file_whole(tmp_path):
    config = two_targets(tmp_path)
    out = tmp_path / "etc" / "slowdown-probe.service.d" / "targets.conf"
    result = run_dropin(config, "-o", str(out))
    assert result.exit_code == 0 and result.stdout == ""
    assert len(writable(out.read_text())) == 2 and oct(out.stat().st_mode & 0o777) == "0o644"


def test_a_configuration_with_mistakes_exits_2_naming_the_key(tmp_path):
    config = two_targets(tmp_path, interval="soon")
    result = run_dropin(config)
    assert result.exit_code == 2 and result.stdout == ""
    assert f"{config}:1: interval" in result.stderr


def test_unit_paths_are_quoted_and_escaped_as_systemd_reads_them():
    assert unit_path(Path("/a/b"), optional=True) == "-/a/b"
    assert unit_path(Path("/a/100%")) == "/a/100%%"  # not a specifier
    assert unit_path(Path("/a b"), optional=True) == '"-/a b"'
    assert unit_path(Path('/a"b\\c')) == '"/a\\"b\\\\c"'
    with pytest.raises(dropin.DropinError):
        unit_path(Path("/a\nb"))


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
    done = sandboxed(for_prepare, "-m", "slowdown.probe.cli", "--config", str(config),
                     "prepare", "--no-progress")
    assert done.returncode == 0, done.stderr
    service = subprocess.Popen(
        [sys.executable, "-c", SANDBOX, "-m", "slowdown.probe.cli", "--config", str(config),
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
