"""The Debian package, built from this checkout by packaging/build-deb and installed on this
machine with apt-get: the commands on PATH for the packaged user, the installed units
verified, the service neither enabled nor started, an edited configuration kept across an
upgrade to a rebuilt package, ``remove`` keeping configuration and data, ``purge`` leaving
only what it must (the ``slowdown`` user, a site's own drop-ins, the workspaces on probed
filesystems). About 5 minutes (two builds, each a virtual environment from PyPI), hence
tests/long (``--long``). Whatever happens, the package is purged at the end and what the
test made (the user, /opt/slowdown, /var/lib/slowdown, /etc/slowdown) removed when it was not
there before.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.kit.fixtures_fs import require_root

ROOT = Path(__file__).resolve().parents[2]
APT = ["apt-get", "-o", "DPkg::Lock::Timeout=600", "-y", "-q"]
MADE = ("/opt/slowdown", "/var/lib/slowdown", "/etc/slowdown")
# What the package installs, all gone after purge.
INSTALLED = ("/usr/bin/slowdown", "/usr/bin/slowdown-probe", "/opt/slowdown",
             "/lib/systemd/system/slowdown-probe.service",
             "/lib/systemd/system/slowdown-probe-prepare.service",
             "/usr/lib/sysusers.d/slowdown.conf", "/usr/lib/tmpfiles.d/slowdown.conf",
             "/etc/profile.d/slowdown.sh", "/etc/slowdown/slowdown.toml",
             "/usr/share/doc/slowdown")
UNITS = ("slowdown-probe.service", "slowdown-probe-prepare.service")


def run(*argv: str, **kw) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=900, **kw)
    assert done.returncode == 0, f"{argv}: {done.stdout}\n{done.stderr}"
    return done


def build(version: str) -> Path:
    env = {**os.environ, "SLOWDOWN_DEB_VERSION": version}
    out = run(str(ROOT / "packaging" / "build-deb"), env=env).stdout.split()
    debs = [Path(p) for p in out if p.endswith(".deb")]
    assert len(debs) == 1 and version in debs[0].name, out
    return debs[0]


def as_slowdown(*argv: str) -> subprocess.CompletedProcess:
    """As the packaged user, with the PATH of a login (the commands found there)."""
    return run("runuser", "-u", "slowdown", "--", "env", "-i", "PATH=/usr/bin:/bin",
               "HOME=/var/lib/slowdown", *argv, cwd="/")


def installed() -> bool:
    done = subprocess.run(["dpkg-query", "-W", "-f", "${db:Status-Status}", "slowdown"],
                          capture_output=True, text=True)
    return done.returncode == 0 and done.stdout not in ("", "not-installed", "config-files")


@pytest.fixture
def machine():
    """The machine as it was, restored: the package purged, what it made removed."""
    require_root("installing a Debian package")
    if installed():
        pytest.fail("a slowdown package is installed on this machine already")
    had_user = subprocess.run(["getent", "passwd", "slowdown"]).returncode == 0
    had = {p for p in MADE if os.path.lexists(p)}
    try:
        yield
    finally:
        subprocess.run([*APT, "purge", "slowdown"], capture_output=True, timeout=900)
        for path in set(MADE) - had:
            shutil.rmtree(path, ignore_errors=True)
        if not had_user:
            subprocess.run(["userdel", "slowdown"], capture_output=True)
            subprocess.run(["groupdel", "slowdown"], capture_output=True)


@pytest.mark.timeout(1500)  # two builds from PyPI at a low priority beside CI's suites
def test_install_upgrade_remove_purge(machine, tmp_path: Path) -> None:
    first, second = build("0.1.0-1"), build("0.1.0-2")
    run(*APT, "install", str(first))
    for path in INSTALLED:
        assert os.path.lexists(path), path
    assert Path("/var/lib/slowdown").is_dir()  # tmpfiles
    assert Path("/var/lib/slowdown").stat().st_uid == int(
        run("id", "-u", "slowdown").stdout)  # sysusers, then tmpfiles
    # Not enabled, not started: no link into a target's wants.
    assert not list(Path("/etc/systemd/system").glob("*.wants/slowdown-probe*.service"))
    verify = subprocess.run(["systemd-analyze", "verify",
                             *(f"/lib/systemd/system/{u}" for u in UNITS)],
                            capture_output=True, text=True, timeout=120, cwd="/")
    assert verify.returncode == 0 and not verify.stderr.strip(), verify.stderr
    assert as_slowdown("slowdown", "--version").stdout.startswith("slowdown, version 0.1.0")
    # The site's edit: a target (owned by the service user, as DEPLOY.md says).
    target = tmp_path / "fs"
    (target / ".slowdown" / "otherhost").mkdir(parents=True)  # another node's workspace
    (target / ".slowdown" / "otherhost" / "MANIFEST").write_text("kept\n")
    tmp_path.chmod(0o755)
    shutil.chown(target, "slowdown", "slowdown")
    edited = Path("/etc/slowdown/slowdown.toml").read_text() + (
        f'\n[[target]]\nname = "work"\npath = "{target}"\ndata_size = "1MiB"\n'
        'write_size = "1MiB"\npool_files = 10\npool_dirs = 1\n')
    Path("/etc/slowdown/slowdown.toml").write_text(edited)
    checked = as_slowdown("slowdown-probe", "check-config")
    assert "work" in checked.stdout, checked.stdout
    # Upgrade: the edited configuration stays as the site left it.
    run(*APT, "install", str(second))
    assert run("dpkg-query", "-W", "-f", "${Version}", "slowdown").stdout == "0.1.0-2"
    assert Path("/etc/slowdown/slowdown.toml").read_text() == edited
    assert as_slowdown("slowdown", "--version").returncode == 0
    # Data of the service's, and a drop-in of the site's.
    (Path("/var/lib/slowdown") / "slowdown.db").write_bytes(b"data")
    dropin = Path("/etc/systemd/system/slowdown-probe.service.d")
    had_dropin = dropin.exists()
    assert not (dropin / "targets.conf").exists(), "a drop-in of this machine's own"
    dropin.mkdir(exist_ok=True)
    (dropin / "targets.conf").write_text("[Service]\n")
    try:
        run(*APT, "remove", "slowdown")
        assert not os.path.lexists("/usr/bin/slowdown") and not os.path.lexists("/opt/slowdown")
        assert Path("/etc/slowdown/slowdown.toml").read_text() == edited
        assert (Path("/var/lib/slowdown") / "slowdown.db").read_bytes() == b"data"
        run(*APT, "purge", "slowdown")
        for path in (*INSTALLED, "/var/lib/slowdown", "/etc/slowdown"):
            assert not os.path.lexists(path), path
        assert not installed()
        # Kept, as documented: the user, the site's drop-in, another node's workspace.
        assert subprocess.run(["getent", "passwd", "slowdown"]).returncode == 0
        assert (dropin / "targets.conf").exists()
        assert (target / ".slowdown" / "otherhost" / "MANIFEST").read_text() == "kept\n"
    finally:
        if had_dropin:
            (dropin / "targets.conf").unlink()
        else:
            shutil.rmtree(dropin)
