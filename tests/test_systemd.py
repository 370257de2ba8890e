"""The hardened systemd units: checked and rated by systemd's own tools, the drop-in made from the
configuration, the service in a sandbox like theirs, and its notify protocol while a target hangs.

There is no running systemd here: `systemd-analyze verify` and `security --offline=true` read the
unit files as systemd would (verify exits 0 on unknown keys and bad values, so any word on stderr
fails), `systemd-sysusers` and `systemd-tmpfiles` work on a scratch root.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from slowdown.probe.command import systemd_dropin as dropin
from slowdown.probe.command.systemd_dropin import systemd_dropin, unit_path
from tests.kit.systemdkit import (
    PREPARE,
    SERVICE,
    SYSTEMD,
    group,
    run_dropin,
    settings,
    two_targets,
    writable,
)

UNITS = (SERVICE, PREPARE)
EXEC = "/usr/local/bin/slowdown-probe"
MAX_EXPOSURE = 2.5


# --------------------------------------------------------------------------- helpers


group.add_command(systemd_dropin)


def install_units(directory: Path) -> Path:
    """The units in a directory of their own, ExecStart= naming a program that exists (verify
    checks it): the installed slowdown-probe, else a stand-in that runs the same code."""
    directory.mkdir(parents=True, exist_ok=True)
    program = shutil.which("slowdown-probe")
    if program is None:
        stand_in = directory / "bin" / "slowdown-probe"
        stand_in.parent.mkdir()
        stand_in.write_text(
            f"#!{sys.executable}\nfrom slowdown.probe.command.main import main\nmain()\n")
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
