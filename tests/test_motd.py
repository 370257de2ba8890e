"""``slowdown motd`` and /etc/profile.d/slowdown.sh: one line on a slow node, nothing on a
normal one, silence and exit 0 within the deadline whatever goes wrong (a hung target, a hung
database, none, a damaged one, one it may not read), and a real login shell that runs it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.kit.fixtures_fs import require_root
from tests.kit.motdkit import motd_config, node_database

ROOT = Path(__file__).resolve().parents[1]
PROFILE = ROOT / "packaging" / "profile.d" / "slowdown.sh"
LINE = re.compile(r"work is \d+x slower than usual right now\n")
# Python's start and the notice on a busy machine, beside its 100 ms deadline: a hang would
# take the test's whole timeout, a slow path some seconds.
QUICK = 2.0


def slowdown() -> str:
    found = shutil.which("slowdown")
    assert found, "slowdown is not on PATH (the venv's bin must be)"
    return found


def motd(config: Path, *prefix: str) -> tuple[subprocess.CompletedProcess, float]:
    began = time.monotonic()
    done = subprocess.run([*prefix, slowdown(), "motd", "--config", str(config)],
                          capture_output=True, text=True, timeout=60)
    return done, time.monotonic() - began


@pytest.fixture
def slow_node(tmp_path: Path) -> Path:
    (tmp_path / "fs").mkdir()
    db = node_database(tmp_path / "h1.db", slow=12.0)
    return motd_config(tmp_path / "c.toml", db, tmp_path / "fs")


def test_slow_node_one_line(slow_node: Path) -> None:
    done, _ = motd(slow_node)
    assert done.returncode == 0 and done.stderr == ""
    assert LINE.fullmatch(done.stdout), done.stdout
    assert 9 <= int(done.stdout.split()[2][:-1]) <= 15


def test_normal_node_nothing(tmp_path: Path) -> None:
    db = node_database(tmp_path / "h1.db", slow=1.0)
    done, _ = motd(motd_config(tmp_path / "c.toml", db, tmp_path))
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_off_unless_enabled(tmp_path: Path) -> None:
    db = node_database(tmp_path / "h1.db", slow=12.0)
    done, _ = motd(motd_config(tmp_path / "c.toml", db, tmp_path, enabled=False))
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    shown = subprocess.run([slowdown(), "--config", str(tmp_path / "c.toml")],
                           capture_output=True, text=True, timeout=60)
    assert "slowdown median" in shown.stdout  # the data is there: only the notice is off


def test_same_through_click(slow_node: Path) -> None:
    """``slowdown --config X motd`` (the group's form) says what the quick path says."""
    done = subprocess.run([slowdown(), "--config", str(slow_node), "motd"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and LINE.fullmatch(done.stdout), done.stdout


@pytest.mark.parametrize("damage", ["missing", "damaged", "no-config", "bad-config"])
def test_faults_are_silent(tmp_path: Path, damage: str) -> None:
    db = tmp_path / "h1.db"
    config = motd_config(tmp_path / "c.toml", db, tmp_path)
    if damage == "damaged":
        node_database(db, slow=12.0)
        with open(db, "r+b") as f:  # the header and the first pages overwritten
            f.write(b"not a database" * 1000)
    elif damage == "no-config":
        config = tmp_path / "none.toml"
    elif damage == "bad-config":
        config.write_text("[motd]\nenabled = true\ndeadline = 'soon'\n")
    done, took = motd(config)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    assert took < QUICK


def test_database_not_readable_is_silent(tmp_path: Path) -> None:
    """A database of another user's, 0600, read by one without root's file access."""
    require_root("the unreadable database (setpriv drops CAP_DAC_OVERRIDE)")
    db = node_database(tmp_path / "h1.db", slow=12.0)
    for path in tmp_path.iterdir():
        os.chown(path, 65534, 65534)
        path.chmod(0o600)
    config = motd_config(tmp_path / "c.toml", db, tmp_path)
    drop = ("setpriv", "--inh-caps=-all", "--bounding-set=-dac_override,-dac_read_search")
    done, took = motd(config, *drop)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    assert took < QUICK
    readable = subprocess.run([*drop, "cat", str(db)], capture_output=True, timeout=10)
    assert readable.returncode != 0  # the test's premise: it really cannot read it


def test_hung_target_is_never_touched(faultfs, tmp_path: Path) -> None:
    """Every operation on the probed filesystem hangs; the notice, which reads only the
    database, is said at once."""
    db = node_database(tmp_path / "h1.db", slow=12.0)
    config = motd_config(tmp_path / "c.toml", db, faultfs.mountpoint)
    faultfs.hang("*")
    done, took = motd(config)
    assert done.returncode == 0 and LINE.fullmatch(done.stdout), done.stdout
    assert took < QUICK
    faultfs.release()


def test_hung_database_gives_up_at_the_deadline(faultfs, tmp_path: Path) -> None:
    """The database itself on a filesystem that hangs: silence, exit 0, at the deadline.
    The deadline counts from the command's start, so it is long enough here for a child
    started on a busy machine to reach the database before it (the test's premise)."""
    node_database(faultfs.backing / "h1.db", slow=12.0)
    config = motd_config(tmp_path / "c.toml", faultfs.mountpoint / "h1.db", tmp_path,
                         deadline="1500ms")
    faultfs.hang("*")
    done, took = motd(config)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    assert took < 1.5 + QUICK
    faultfs.wait_hung()  # it did reach the hung filesystem, and left it hanging
    faultfs.release()


def login(tmp_path: Path, config: Path) -> subprocess.CompletedProcess:
    """A real interactive login shell (``bash -l -i``) reading /etc/profile, in a mount
    namespace of its own: /etc seen through an overlay that adds /etc/slowdown/slowdown.toml,
    /etc/profile.d holding only the notice's script, /usr/local/bin this ``slowdown``. The
    machine's own files are never touched."""
    require_root("the login shell (a mount namespace)")
    add, profile, bin_ = (tmp_path / n for n in ("etc-add", "profile.d", "bin"))
    for d in (add / "slowdown", profile, bin_):
        d.mkdir(parents=True)
    shutil.copy(PROFILE, profile / "slowdown.sh")
    shutil.copy(config, add / "slowdown" / "slowdown.toml")
    (bin_ / "slowdown").symlink_to(slowdown())
    script = (f"mount -t overlay overlay -o lowerdir={add}:/etc /etc && "
              f"mount --bind {profile} /etc/profile.d && mount --bind {bin_} /usr/local/bin && "
              "exec env -i HOME=/root TERM=dumb bash -l -i -c 'echo login-done'")
    return subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script],
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


def test_login_shell_slow_node(slow_node: Path, tmp_path: Path) -> None:
    done = login(tmp_path, slow_node)
    assert done.returncode == 0, done.stderr
    assert re.fullmatch(r"work is \d+x slower than usual right now\nlogin-done\n",
                        done.stdout), done.stdout


def test_login_shell_hung_database(faultfs, tmp_path: Path) -> None:
    node_database(faultfs.backing / "h1.db", slow=12.0)
    config = motd_config(tmp_path / "c.toml", faultfs.mountpoint / "h1.db", tmp_path)
    faultfs.hang("*")
    began = time.monotonic()
    done = login(tmp_path, config)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "login-done\n"
    assert time.monotonic() - began < QUICK + 1
    faultfs.release()


def test_plain_line_imports_no_numpy_nor_rich(slow_node: Path) -> None:
    """The uptime-like line and the notice load what they use: no numpy, no rich, and the
    notice not even click. The line runs as the console script runs it (``entry.main``);
    the notice's work is done in a forked child, so its ``notice`` is run here in-process."""
    report = "import atexit, sys\n" \
        "atexit.register(lambda: print(' '.join(sorted(sys.modules)), file=sys.stderr))\n"
    line = report + ("from slowdown.analysis.cli.entry import main\n"
                     "sys.argv[0] = 'slowdown'\nsys.exit(main())\n")
    notice = report + ("from pathlib import Path\nfrom slowdown.analysis.cli.motd import notice\n"
                       "print(notice(Path(sys.argv[1]), 0.0, float), end='')\n")
    for code, args, without in ((line, ["--config", str(slow_node)], ("numpy", "rich")),
                                (notice, [str(slow_node)], ("numpy", "rich", "click"))):
        done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0 and "work" in done.stdout, done.stdout + done.stderr
        loaded = set(done.stderr.split())
        assert "slowdown.analysis.store.store" in loaded  # the probe sees the real imports
        assert not {m for m in loaded if m.split(".")[0] in without}, args


def test_check_config_names_a_bad_motd_key(tmp_path: Path) -> None:
    """The notice says nothing of a bad [motd]; check-config names the key and its line."""
    config = motd_config(tmp_path / "c.toml", tmp_path / "h1.db", tmp_path, deadline="1m")
    done = subprocess.run([shutil.which("slowdown-probe") or "slowdown-probe", "check-config",
                           "--config", str(config)], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert f"{config}:5: motd.deadline: must be at most 10s" in done.stderr, done.stderr
