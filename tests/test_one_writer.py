"""One writer per database, one service per workspace, and databases kept off shared filesystems.

The real service runs as a subprocess (tests/kit/servicekit.py). A lock "on another host" is a
helper process that writes a holder naming another machine into the lock file and holds its
flock; a FUSE mount (tests/kit/faultfs) stands for a network filesystem, as mountinfo names it
``fuse.faultfs``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from slowdown.analysis.store.filesystem import filesystem_of, parse_mountinfo
from slowdown.probe.locks.lock_file import utc
from tests.kit.faultfs import FaultFS
from tests.kit.fixtures_fs import require_root
from tests.kit.servicekit import (
    output,
    probe_cli,
    start_service,
    stop_service,
    wait_for,
)

pytestmark = pytest.mark.timeout(120)

HOST = "testhost"

# Holds the flock of argv[1] after writing a holder that names another machine; prints
# "locked", then waits for its stdin to close.
HOLDER = r"""
import fcntl, json, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
os.pwrite(fd, json.dumps({"what": "service", "pid": 4242, "host": sys.argv[2],
                          "node": "node-b.cluster", "boot": "another-boot",
                          "since": 1700000000.0, "database": "/var/lib/slowdown/slowdown.db"}
                         ).encode().ljust(1024), 0)
print("locked", flush=True)
sys.stdin.read()
"""


def config_text(path: Path, target: Path, *top: str, database: Path | None = None,
                host: str = HOST) -> Path:
    """A configuration of one small target; ``top`` lines go before it, as written."""
    lines = [f'host = "{host}"', *top]
    if database is not None:
        lines.append(f'database = "{database}"')
    lines += ["[[target]]", 'name = "t"', f'path = "{target}"', 'data_size = "4MiB"',
              "pool_files = 20", "pool_dirs = 2"]
    path.write_text("\n".join(lines) + "\n")
    return path


def prepared(tmp_path: Path, name: str = "c", database: Path | None = None, *top: str,
             default_database: bool = False, host: str = HOST,
             target: Path | None = None) -> Path:
    """A prepared target; the database in ``tmp_path/db`` unless given or the default."""
    target = target or tmp_path / "target"
    target.mkdir(exist_ok=True)
    if not default_database:
        database = database or tmp_path / "db" / "slowdown.db"
    config = config_text(tmp_path / f"{name}.toml", target, *top, database=database, host=host)
    done = probe_cli(config, "prepare", "--no-progress")
    assert done.returncode == 0, done.stderr
    return config


def run_briefly(config: Path, *args: str, timeout: float = 30, env: dict | None = None
                ) -> tuple[int, str]:
    proc = start_service(config, *args, env=env)
    return proc.wait(timeout=timeout), output(proc)


def one_error(text: str) -> str:
    """The service's one error line (its output is a file: dated lines), and no traceback."""
    errors = [line for line in text.splitlines() if line.split(" ", 2)[1:2] == ["ERROR"]]
    assert len(errors) == 1 and "Traceback" not in text, text
    return errors[0]


@contextlib.contextmanager
def held_elsewhere(path: Path, host: str = HOST):
    """The flock of ``path`` held by a helper process whose holder is on node-b."""
    helper = subprocess.Popen([sys.executable, "-c", HOLDER, str(path), host],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert helper.stdout.readline().strip() == "locked"
        yield helper
    finally:
        helper.stdin.close()
        helper.wait(timeout=10)


def live_pid(database: Path) -> int:
    state = wait_for(lambda: _read_json(database.with_name(database.name + ".live.json")), 15,
                     what="the live state")
    return state["pid"]


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None


# -- where the filesystem is ---------------------------------------------------------------


def test_the_filesystem_of_a_path_comes_from_mountinfo(tmp_path, faultfs):
    local = filesystem_of(tmp_path / "not" / "there" / "slowdown.db")  # nearest ancestor
    assert local is not None and not local.shared, local
    fuse = filesystem_of(faultfs.mountpoint / "db" / "slowdown.db")
    assert fuse is not None and fuse.fstype == "fuse.faultfs" and fuse.shared
    assert fuse.mount_point == str(faultfs.mountpoint)
    assert "FUSE" in fuse.describe()
    lines = [
        "36 25 0:45 / /home rw,relatime shared:1 - nfs4 srv:/home rw,vers=4.2",
        r"37 25 8:17 / /mnt/my\040disk rw - fuseblk /dev/sdb1 rw",
        "38 25 0:50 / /lustre rw - lustre 10.0.0.1@o2ib:/fs rw,flock",
    ]
    nfs, ntfs, lustre = parse_mountinfo(lines)
    assert (nfs.device, nfs.mount_point, nfs.fstype) == ((0, 45), "/home", "nfs4")
    assert ntfs.mount_point == "/mnt/my disk" and ntfs.fstype == "fuseblk"
    assert lustre.fstype == "lustre"


# -- a database on a shared filesystem -----------------------------------------------------


def test_a_database_on_fuse_is_refused_with_its_reason_and_allowed_with_the_key(tmp_path,
                                                                               faultfs):
    database = faultfs.mountpoint / "db" / "slowdown.db"
    config = prepared(tmp_path, "refused", database)
    code, text = run_briefly(config, "--duration", "3s")
    line = one_error(text)
    assert code == 2, text
    assert f"database {database} is on fuse.faultfs" in line and "allow_network_database" in line
    assert "SQLite's WAL needs a local filesystem" in line
    assert not (faultfs.backing / "db").exists()  # nothing made there
    allowed = prepared(tmp_path, "allowed", database, "allow_network_database = true")
    code, text = run_briefly(allowed, "--duration", "3s")
    assert code == 0, text
    assert "allowed by allow_network_database = true" in text
    assert (faultfs.backing / "db" / "slowdown.db").stat().st_size > 0


# The machine's /var/tmp, where the moved default's directory may be left from an earlier run,
# replaced in the service's and the reader's processes by a fresh one: the directory is new.
LOCAL_ROOT_SITE = """
import os
from pathlib import Path
from slowdown.analysis.config import defaults
defaults.LOCAL_DATA_ROOT = Path(os.environ["SLOWDOWN_TEST_LOCAL_DATA_ROOT"])
"""


def test_the_built_in_default_moves_off_a_shared_home_and_the_reader_finds_it(tmp_path,
                                                                             faultfs):
    host = f"t{uuid.uuid4().hex[:12]}"
    local_root = tmp_path / "var-tmp"  # as /var/tmp: anyone's to write in, sticky
    local_root.mkdir()
    local_root.chmod(0o1777)
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(LOCAL_ROOT_SITE)
    path = os.environ.get("PYTHONPATH", "")
    env = {"XDG_DATA_HOME": str(faultfs.mountpoint / "xdg"), "STATE_DIRECTORY": "",
           "SLOWDOWN_TEST_LOCAL_DATA_ROOT": str(local_root),
           "PYTHONPATH": f"{site}{os.pathsep}{path}" if path else str(site)}
    config = prepared(tmp_path, "default", default_database=True, host=host)
    moved = local_root / f"slowdown-{os.getuid()}" / f"slowdown-{host}.db"
    shown = subprocess.run([sys.executable, "-m", "slowdown.probe.command.main", "--config",
                            str(config), "check-config"], capture_output=True, text=True,
                           env={**os.environ, **env}, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert f"database       {moved}" in shown.stdout, shown.stdout
    assert "which is on fuse.faultfs" in shown.stdout
    code, text = run_briefly(config, "--duration", "2s", env=env)
    assert code == 0, text
    assert f"database {moved}: the built-in default, not in {faultfs.mountpoint}" in text
    assert moved.exists() and not (faultfs.backing / "xdg").exists()
    assert oct(moved.parent.stat().st_mode & 0o777) == "0o700"
    read = subprocess.run([sys.executable, "-m", "slowdown.analysis.cli", "--config",
                           str(config), "stats", "--json"], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=60)
    assert read.returncode == 0, read.stderr
    assert {op["target"] for op in json.loads(read.stdout)["ops"]} == {"t"}


# -- one writer per database, one service per workspace ------------------------------------


def test_a_second_service_is_refused_naming_the_first_and_cleanup_waits_for_it(tmp_path):
    config = prepared(tmp_path)
    database = tmp_path / "db" / "slowdown.db"
    other_db = tmp_path / "other" / "slowdown.db"
    other = config_text(tmp_path / "other.toml", tmp_path / "target", database=other_db)
    first = start_service(config)
    try:
        pid = live_pid(database)
        holder = json.loads((tmp_path / "db" / "slowdown.db.lock").read_bytes())
        assert holder["pid"] == pid and holder["host"] == HOST
        # The same database: refused by the database's lock.
        code, text = run_briefly(config, "--duration", "5s")
        line = one_error(text)
        assert code == 2
        assert f"database {database} is written by the service PID {pid} on " in line
        assert f"since {utc(holder['since'])}" in line
        # Another database, the same workspace: refused by the workspace's lock, before its
        # database is made.
        # Refused at its start: well before the minute it was asked to run (its start alone
        # took 8 s once on a machine loaded fivefold).
        t0 = time.monotonic()
        code, text = run_briefly(other, "--duration", "60s", timeout=90)
        line = one_error(text)
        assert code == 2 and time.monotonic() - t0 < 30, text
        ws = tmp_path / "target" / ".slowdown" / HOST
        assert f"workspace {ws} is probed by the service PID {pid} on " in line
        assert f"(database {database})" in line
        assert not other_db.exists()
        # cleanup of the running service's workspace is refused, naming it.
        done = probe_cli(config, "cleanup", "--yes")
        assert done.returncode == 1 and "Traceback" not in done.stderr
        assert f"{ws} is in use by the service PID {pid}" in done.stderr, done.stderr
        assert (ws / "MANIFEST").exists()
        assert first.poll() is None, output(first)
    finally:
        _, text = stop_service(first)
    assert first.returncode == 0, text
    assert (tmp_path / "db" / "slowdown.db.lock").read_bytes() == b""  # released: cleared
    done = probe_cli(config, "cleanup", "--yes")
    assert done.returncode == 0, done.stderr
    assert not ws.exists()  # the lock file went with the rest: no directory left behind


def test_locks_held_on_another_host_are_named(tmp_path):
    config = prepared(tmp_path)
    database = tmp_path / "db" / "slowdown.db"
    database.parent.mkdir(exist_ok=True)  # (prepare made it for its start state)
    with held_elsewhere(tmp_path / "db" / "slowdown.db.lock"):
        code, text = run_briefly(config, "--duration", "5s")
    assert code == 2
    assert (f"database {database} is written by the service PID 4242 on node-b.cluster "
            f"(host {HOST}) since 2023-11-14 22:13:20 UTC") in one_error(text)
    assert not database.exists()  # nothing written
    ws = tmp_path / "target" / ".slowdown" / HOST
    with held_elsewhere(ws / "service.lock"):
        code, text = run_briefly(config, "--duration", "5s")
        done = probe_cli(config, "cleanup", "--yes")
    assert code == 2
    assert (f"workspace {ws} is probed by the service PID 4242 on node-b.cluster (host "
            f"{HOST}) since 2023-11-14 22:13:20 UTC (database /var/lib/slowdown/slowdown.db)"
            ) in one_error(text)
    assert done.returncode == 1 and "in use by the service PID 4242 on node-b" in done.stderr
    assert not database.exists()


def test_the_locks_of_a_killed_service_are_taken_over(tmp_path):
    config = prepared(tmp_path)
    database = tmp_path / "db" / "slowdown.db"
    first = start_service(config)
    old = live_pid(database)
    os.kill(old, signal.SIGKILL)  # no release: the lock files still name it
    first.wait(timeout=10)
    ws_lock = tmp_path / "target" / ".slowdown" / HOST / "service.lock"
    wait_for(lambda: json.loads(ws_lock.read_bytes())["pid"] == old, 5, what="the holder")
    code, text = run_briefly(config, "--duration", "3s", "-v")
    assert code == 0, text
    assert (f"database {database}: lock taken over from the service PID {old} on " in text
            and "which ended without releasing it" in text), text
    assert "the workspace's lock taken over from the service PID" in text
    holder = json.loads(ws_lock.read_bytes())
    assert holder["pid"] not in (old, 0) and holder["worker"] != holder["pid"]


def test_an_unwritable_database_directory_is_one_line_and_nothing_is_written(tmp_path):
    require_root("a read-only bind mount")
    store = tmp_path / "store"
    store.mkdir(mode=0o555)  # and the service runs as root without capabilities
    config = prepared(tmp_path, "denied", store / "slowdown.db")
    done = subprocess.run(["setpriv", "--bounding-set=-all", "--inh-caps=-all", sys.executable,
                           "-m", "slowdown.probe.command.main", "--config", str(config), "run",
                           "--duration", "3s"], capture_output=True, text=True, timeout=30)
    line = one_error(done.stdout + done.stderr)
    assert done.returncode == 2, done  # a person's mistake: systemd does not start it again
    assert (f"cannot create the lock file {store}/slowdown.db.lock: Permission denied; the "
            "service writes its database, WAL, lock and live state there") in line
    assert os.listdir(store) == []
    readonly = tmp_path / "ro"
    readonly.mkdir()
    subprocess.run(["mount", "--bind", "-o", "ro", str(store), str(readonly)], check=True)
    try:
        config = prepared(tmp_path, "ro", readonly / "slowdown.db")
        code, text = run_briefly(config, "--duration", "3s")
    finally:
        subprocess.run(["umount", str(readonly)], check=True)
    line = one_error(text)
    assert code == 1, text  # a volume's fault: systemd starts it again
    assert f"cannot create the lock file {readonly}/slowdown.db.lock: Read-only" in line
    assert os.listdir(store) == []


@pytest.mark.timeout(180)
def test_a_stuck_worker_keeps_the_workspace_and_its_replacements_wait_not_refuse(tmp_path):
    require_root("faultfs")
    with FaultFS(tmp_path / "backing", tmp_path / "mnt") as fs:
        config = prepared(tmp_path, "hung", None, 'abandon_after = "2s"',
                          target=fs.mountpoint / "t")
        database = tmp_path / "db" / "slowdown.db"
        lock = fs.backing / "t" / ".slowdown" / HOST / "service.lock"  # read past FUSE
        first = start_service(config)
        second = None
        try:
            pid = live_pid(database)
            stuck = json.loads(lock.read_bytes())["worker"]
            fs.hang("read", path="*.bin")  # the data probe's reads: the worker holds the lock
            wait_for(lambda: f"held by worker PID {stuck} of this service, stuck; taken when "
                     "it lets go" in output(first), 20, what="the replacement to wait")
            fs.release()
            wait_for(lambda: "the workspace's lock is held again" in output(first), 20,
                     what="the lock taken again")
            assert json.loads(lock.read_bytes())["worker"] != stuck
            assert first.poll() is None, output(first)
            # Killed while its worker is stuck: the next service probes on and waits for it.
            fs.hang("read", path="*.bin")
            time.sleep(2)
            os.kill(pid, signal.SIGKILL)
            first.wait(timeout=10)
            second = start_service(config)
            wait_for(lambda: f"left stuck in the filesystem by the service PID {pid}, which "
                     "has ended" in output(second), 20, what="the new service to wait")
            time.sleep(1)
            assert second.poll() is None, output(second)
            fs.release()
            wait_for(lambda: "the workspace's lock is held again" in output(second), 20,
                     what="the lock taken by the new service")
            assert json.loads(lock.read_bytes())["pid"] == second.pid != pid
            _, text = stop_service(second)
            assert second.returncode == 0, text
        finally:
            fs.release()
            for proc in (first, second):
                if proc is not None and proc.poll() is None:
                    proc.kill()
