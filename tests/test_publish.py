"""Publishing a node's database to a shared directory (probe/exporters/publish.py,
probe/exporters/jobs.py):
real SQLite files, real child processes killed with SIGKILL, real read-only and full
filesystems (tmpfs), the real ``slowdown`` reading the copies while they are replaced."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from slowdown.analysis.config import loads
from slowdown.analysis.config.errors import ConfigError
from slowdown.analysis.store import Selection, Store
from slowdown.analysis.store.open_files import read_only_uri
from slowdown.probe.command.main import describe_config
from slowdown.probe.command.main import main as probe_main
from slowdown.probe.exporters.jobs import PublishJob
from slowdown.probe.exporters.publish import PublishError, publish, published_by, temp_path
from testdata.datakit import fill, lognormal
from tests.kit.cli_runner import runner
from tests.kit.faultfs.realfs import run, tmpfs
from tests.kit.fixtures_fs import require_root
from tests.kit.servicekit import wait_for

HOST = "n1"


def make_source(path: Path, minutes: int = 120, filler: int = 0, seed: int = 0) -> int:
    """A node's database (WAL, as the service keeps it) with ``minutes`` of records ending
    now, and ``filler`` bytes more in a table of its own (a large file to copy). Returns the
    number of records."""
    now = int(time.time()) // 60 * 60
    fill(path, now - 60 * minutes, minutes, lognormal(0.002), host=HOST, seed=seed)
    if filler:
        conn = sqlite3.connect(path, isolation_level=None)
        try:
            conn.execute("CREATE TABLE IF NOT EXISTS filler (blob BLOB)")
            conn.executemany("INSERT INTO filler VALUES (?)",
                             [(os.urandom(1 << 16),) for _ in range(filler >> 16)])
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            conn.close()
    return count_records(path)


def count_records(path: Path) -> int:
    with Store(path, readonly=True) as store:
        return len(list(store.records(Selection())))


def integrity(path: Path) -> str:
    conn = sqlite3.connect(read_only_uri(path), uri=True)
    try:
        return conn.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        conn.close()


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def publish_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "slowdown.probe.exporters.publish", *args],
                          capture_output=True, text=True, timeout=60)


def test_a_copy_is_a_whole_rollback_journal_database_that_readers_open_immutable(tmp_path):
    source, shared = tmp_path / "node.db", tmp_path / "shared"
    shared.mkdir()
    records = make_source(source)
    done = publish(source, shared, HOST)
    copy = shared / f"{HOST}.db"
    assert done.path == copy and done.bytes == copy.stat().st_size
    assert copy.read_bytes()[18:20] == b"\x01\x01"  # a rollback journal, never WAL
    assert sorted(os.listdir(shared)) == [f"{HOST}.db"]  # no temporary, no journal, no -wal
    assert published_by(copy)["host"] == HOST
    assert read_only_uri(copy).endswith("?mode=ro&immutable=1")
    assert count_records(copy) == records and integrity(copy) == "ok"
    assert sorted(os.listdir(shared)) == [f"{HOST}.db"]  # the reader created nothing there
    shown = subprocess.run(["slowdown", "--db", str(shared / "*.db"), "--json"],
                           capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    data = json.loads(shown.stdout)
    assert [t["target"] for t in data["targets"]] == ["work"]
    assert [s["published"] for s in data["services"]] == [published_by(copy)["at"]]
    line = subprocess.run(["slowdown", "--db", str(copy)], capture_output=True, text=True,
                          timeout=60).stdout
    assert "published copy, made at" in line and "service stopped" not in line, line
    watched = subprocess.run(["slowdown", "watch", "--count", "1", "--db", str(copy)],
                             capture_output=True, text=True, timeout=60)
    assert watched.returncode == 0 and "read from a copy made at" in watched.stdout, watched


def test_a_publish_killed_at_any_moment_leaves_the_previous_or_the_new_whole_copy(tmp_path):
    """kill -9 of the publishing process while it copies, syncs or renames: the shared copy
    is always a whole database, the previous one or the new one; the next publish removes
    the killed one's temporary file."""
    source, shared = tmp_path / "node.db", tmp_path / "shared"
    shared.mkdir()
    make_source(source, filler=16 << 20)
    publish(source, shared, HOST)
    copy = shared / f"{HOST}.db"

    def start() -> tuple[subprocess.Popen, Path, float]:
        """A publishing process, once its temporary file is there (the copy begun)."""
        child = subprocess.Popen([sys.executable, "-m", "slowdown.probe.exporters.publish",
                                  str(source),
                                  str(shared), HOST], stdout=subprocess.DEVNULL)
        temp = temp_path(shared, HOST, child.pid)
        deadline = time.monotonic() + 20
        while not temp.exists() and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.001)
        return child, temp, time.monotonic()

    child, _, begun = start()
    child.wait()
    took = time.monotonic() - begun  # from the temporary file to the rename, and the exit
    rng = random.Random(7)
    generations = {json.dumps(published_by(copy))}
    interrupted = 0
    for round_ in range(12):
        with Store(source) as store:  # the source moves on between attempts
            store.write([], state={"round": round_})
        child, temp, _ = start()
        if round_ % 3 == 2:  # every third publish is left to finish: it replaces the copy
            assert child.wait() == 0
            assert json.dumps(published_by(copy)) not in generations
        else:
            time.sleep(rng.uniform(0, took))  # kills land between the copy's start and its end
            if child.poll() is None:
                interrupted += temp.exists()
                child.send_signal(signal.SIGKILL)
            child.wait()
        assert integrity(copy) == "ok"
        mark = published_by(copy)
        assert mark is not None and mark["host"] == HOST
        generations.add(json.dumps(mark))
    assert interrupted >= 3, "too few kills landed inside a copy to show anything"
    assert len(generations) >= 5  # the first copy and the four left to finish
    publish(source, shared, HOST)  # removes what a killed one left
    assert sorted(os.listdir(shared)) == [f"{HOST}.db"]
    assert integrity(copy) == "ok"


_PUBLISH_LOOP = """
import sys, time
from pathlib import Path
from slowdown.probe.exporters.publish import publish
end = time.monotonic() + float(sys.argv[4])
n = 0
while time.monotonic() < end:
    publish(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3])
    n += 1
print(n)
"""


def test_a_reader_of_copies_being_replaced_never_fails(tmp_path):
    """``slowdown --db 'dir/*.db'`` again and again while both hosts' copies are replaced in
    a loop: every read succeeds with the same numbers (the sources do not change)."""
    shared = tmp_path / "shared"
    shared.mkdir()
    sources = []
    for i, host in enumerate(("n1", "n2")):
        path = tmp_path / f"{host}-source.db"
        now = int(time.time()) // 60 * 60
        fill(path, now - 3600, 60, lognormal(0.002), host=host, seed=i)
        publish(path, shared, host)
        sources.append((path, host))
    loops = [subprocess.Popen([sys.executable, "-c", _PUBLISH_LOOP, str(path), str(shared),
                               host, "4"], stdout=subprocess.PIPE, text=True)
             for path, host in sources]
    seen = set()
    reads = 0
    try:
        while all(loop.poll() is None for loop in loops):
            shown = subprocess.run(["slowdown", "--db", str(shared / "*.db"), "--json",
                                    "--at", str(now)], capture_output=True, text=True,
                                   timeout=60)
            assert shown.returncode == 0, shown.stderr
            data = json.loads(shown.stdout)
            assert "skipped" not in shown.stderr and not data["merged"]["skipped"]
            seen.add(json.dumps(data["targets"], sort_keys=True))
            reads += 1
    finally:
        copies = [int(loop.communicate(timeout=60)[0]) for loop in loops]
    assert all(loop.returncode == 0 for loop in loops)
    assert reads >= 3 and min(copies) >= 10, (reads, copies)
    assert len(seen) == 1  # the same numbers, whichever copy each read met


@pytest.mark.parametrize("what", ["not a database", "a database not published", "a symlink",
                                  "another host's copy"])
def test_a_file_the_tool_did_not_publish_is_never_replaced(tmp_path, what):
    source, shared = tmp_path / "node.db", tmp_path / "shared"
    shared.mkdir()
    make_source(source, minutes=5)
    copy = shared / f"{HOST}.db"
    if what == "not a database":
        copy.write_text("someone's notes\n")
    elif what == "a database not published":
        make_source(copy, minutes=1)
    elif what == "a symlink":
        (tmp_path / "elsewhere").write_text("x")
        copy.symlink_to(tmp_path / "elsewhere")
    else:
        other = tmp_path / "other"
        other.mkdir()
        publish(source, other, "n2")
        os.rename(other / "n2.db", copy)
    before = os.lstat(copy), (copy.read_bytes() if not copy.is_symlink() else None)
    done = publish_cli(str(source), str(shared), HOST)
    assert done.returncode == 1
    error = json.loads(done.stdout)["error"]
    assert str(copy) in error and "not replaced" in error
    assert os.lstat(copy).st_ino == before[0].st_ino
    assert (copy.read_bytes() if not copy.is_symlink() else None) == before[1]
    assert sorted(os.listdir(shared)) == [f"{HOST}.db"]  # no temporary left either


def test_only_this_hosts_leftovers_of_dead_publishes_are_removed(tmp_path):
    source, shared = tmp_path / "node.db", tmp_path / "shared"
    shared.mkdir()
    make_source(source, minutes=5)
    dead = subprocess.Popen(["true"])
    dead.wait()
    # a publish still running (a process of slowdown), and a PID taken again by another program
    running = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)",
                                "slowdown.probe.exporters.publish"])
    reused = subprocess.Popen(["sleep", "60"])
    mine = [f".{HOST}.db.{dead.pid}.publishing", f".{HOST}.db.{dead.pid}.publishing-journal",
            f".{HOST}.db.{reused.pid}.publishing"]
    others = [f".n2.db.{dead.pid}.publishing",  # another host's
              f".{HOST}.db.{running.pid}.publishing",
              f"{HOST}.db.{dead.pid}.publishing", "notes.txt"]  # not our name
    for name in mine + others:
        (shared / name).write_bytes(b"partial")
    if os.geteuid() == 0:  # our name, another user's file: not ours to remove
        other_user = f".{HOST}.db.{dead.pid}.publishing-wal"
        (shared / other_user).write_bytes(b"theirs")
        os.chown(shared / other_user, 65534, 65534)
        others.append(other_user)
    try:
        publish(source, shared, HOST)
    finally:
        running.kill()
        reused.kill()
    assert sorted(os.listdir(shared)) == sorted([f"{HOST}.db", *others])


@pytest.mark.root
def test_a_read_only_directory_is_said_with_its_errno_and_the_copy_stays(tmp_path):
    require_root("a read-only tmpfs")
    source = tmp_path / "node.db"
    make_source(source, minutes=5)
    with tmpfs(tmp_path, 16 << 20) as mount:
        shared = mount.path
        publish(source, shared, HOST)
        before = digest(shared / f"{HOST}.db")
        run(["mount", "-o", "remount,ro", str(shared)])
        try:
            done = publish_cli(str(source), str(shared), HOST)
            assert done.returncode == 1
            error = json.loads(done.stdout)["error"]
            assert str(shared) in error and "(EROFS)" in error, error
            assert digest(shared / f"{HOST}.db") == before
        finally:
            run(["mount", "-o", "remount,rw", str(shared)])
        assert publish_cli(str(source), str(shared), HOST).returncode == 0  # retried: works


@pytest.mark.root
def test_a_full_directory_is_refused_before_writing_and_the_copy_stays(tmp_path, small_tmpfs):
    """8 MiB: the first copy (3 MiB) fits; the next (twice as large) does not and is refused
    with ENOSPC before a byte is written; grown, the directory takes it."""
    source, shared = tmp_path / "node.db", small_tmpfs.path
    make_source(source, minutes=5, filler=3 << 20)
    publish(source, shared, HOST)
    before = digest(shared / f"{HOST}.db")
    make_source(source, minutes=5, filler=3 << 20, seed=1)
    done = publish_cli(str(source), str(shared), HOST)
    assert done.returncode == 1
    error = json.loads(done.stdout)["error"]
    assert "(ENOSPC)" in error and str(shared) in error, error
    assert digest(shared / f"{HOST}.db") == before
    assert sorted(os.listdir(shared)) == [f"{HOST}.db"]
    small_tmpfs.remount_size(64 << 20)
    assert publish_cli(str(source), str(shared), HOST).returncode == 0


@pytest.mark.root
def test_a_directory_out_of_inodes_is_said_with_its_errno(tmp_path):
    require_root("a tmpfs without inodes")
    source = tmp_path / "node.db"
    make_source(source, minutes=5)
    with tmpfs(tmp_path, 16 << 20, nr_inodes=2) as mount:  # the root and one copy
        publish(source, mount.path, HOST)
        before = digest(mount.path / f"{HOST}.db")
        with pytest.raises(PublishError, match=r"cannot create .*\(ENOSPC\)"):
            publish(source, mount.path, HOST)
        assert digest(mount.path / f"{HOST}.db") == before


def test_the_service_job_logs_a_failed_publish_and_returns(tmp_path, caplog):
    """The service's job (a real child process): a missing directory is one error line with
    the path and errno, and the next run says nothing new until it works."""
    source = tmp_path / "node.db"
    make_source(source, minutes=5)
    shared = tmp_path / "missing"
    config = loads(f'database = "{source}"\nhost = "{HOST}"\n[[target]]\nname = "work"\n'
                   f'path = "{tmp_path / "w"}"\n[publish]\ndir = "{shared}"\nevery = "1m"\n')
    job = PublishJob(config)
    with caplog.at_level(logging.INFO, logger="slowdown.probe.exporters.jobs"):
        job.run()
        job.run()
        shared.mkdir()
        job.run()
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and str(shared) in errors[0] and "(ENOENT)" in errors[0], errors
    assert any("again after 2 failed attempts" in r.getMessage() for r in caplog.records)
    mark = published_by(shared / f"{HOST}.db")
    assert mark["host"] == HOST and mark["every"] == 60.0  # readers know how old it may get


def test_check_over_a_copy_allows_for_how_often_copies_are_made(tmp_path):
    """A copy is up to ``every`` older than its source: ``check`` over copies made every 5
    minutes is not UNKNOWN with its newest minute 6 minutes old, a copy that does not say how
    often it is made is, and so is a ``--stale`` given by hand."""
    source = tmp_path / "node.db"
    now = int(time.time()) // 60 * 60
    fill(source, now - 60 * 96, 90, lognormal(0.002), host=HOST, seed=3)  # ends 6 minutes ago
    config = tmp_path / "probe.toml"
    config.write_text(f'database = "{source}"\nhost = "{HOST}"\n[[target]]\nname = "work"\n'
                      f'path = "{tmp_path / "w"}"\n')
    told, untold = tmp_path / "told", tmp_path / "untold"
    told.mkdir()
    untold.mkdir()
    done = runner().invoke(probe_main, ["--config", str(config), "publish", "--to", str(told),
                                        "--every", "5m"])
    assert done.exit_code == 0, done.output
    publish(source, untold, HOST)
    assert published_by(told / f"{HOST}.db")["every"] == 300.0
    assert "every" not in published_by(untold / f"{HOST}.db")

    def check(copy: Path, *extra: str) -> subprocess.CompletedProcess:
        return subprocess.run(["slowdown", "check", "--db", str(copy), *extra],
                              capture_output=True, text=True, timeout=60)

    ok = check(told / f"{HOST}.db")
    assert ok.returncode == 0 and ok.stdout.startswith("SLOWDOWN OK"), ok.stdout + ok.stderr
    for stale in (check(untold / f"{HOST}.db"), check(told / f"{HOST}.db", "--stale", "3m")):
        assert stale.returncode == 3 and "UNKNOWN" in stale.stdout, stale.stdout + stale.stderr
        assert "numbers from" in stale.stdout or "ago" in stale.stdout, stale.stdout
    wrong = runner().invoke(probe_main, ["--config", str(config), "publish", "--to", str(told),
                                         "--every", "often"])
    assert wrong.exit_code == 2 and "--every" in wrong.output + (wrong.stderr or "")


@pytest.mark.parametrize("text, key", [
    ('[publish]\nevery = "5m"\n', "publish.dir"),
    ('[publish]\ndir = "shared"\n', "publish.dir"),
    ('[publish]\ndir = "/shared"\nevery = "30s"\n', "publish.every"),
    ('[publish]\ndir = "/shared"\nevry = "5m"\n', "publish.evry"),
    ('[metrics]\ntextfile = "/var/lib/node-exporter/slowdown.txt"\n', "metrics.textfile"),
    ('[metrics]\ntextfile_every = "15s"\n', "metrics.textfile_every"),
])
def test_configuration_mistakes_name_their_key(tmp_path, text, key):
    base = f'host = "{HOST}"\n[[target]]\nname = "work"\npath = "{tmp_path}"\n'
    with pytest.raises(ConfigError) as caught:
        loads(base + text)
    assert key in str(caught.value)


def test_a_textfile_alone_opens_no_port_and_listen_adds_one(tmp_path):
    base = f'host = "{HOST}"\n[[target]]\nname = "work"\npath = "{tmp_path}"\n[metrics]\n'
    alone = loads(base + 'textfile = "/var/lib/node-exporter/slowdown.prom"\n').metrics
    assert not alone.serve and alone.textfile == Path("/var/lib/node-exporter/slowdown.prom")
    both = loads(base + 'textfile = "/x/slowdown.prom"\nlisten = "127.0.0.1:9100"\n').metrics
    assert both.serve and both.listen_port == 9100
    assert loads(base).metrics.serve  # [metrics] alone: the endpoint, as before
    shown = describe_config(loads(base + 'textfile = "/x/slowdown.prom"\n[publish]\n'
                                  'dir = "/shared/slowdown"\n'))
    assert "metrics        no HTTP endpoint; textfile /x/slowdown.prom every 15s" in shown
    assert f"publish        /shared/slowdown/{HOST}.db every 5m" in shown


def test_a_copy_is_never_written_rebaseline_refuses_it(tmp_path):
    source, shared = tmp_path / "node.db", tmp_path / "shared"
    shared.mkdir()
    make_source(source, minutes=90)
    copy = publish(source, shared, HOST).path
    before = digest(copy)
    done = subprocess.run(["slowdown", "rebaseline", "--db", str(copy), "--reason", "new OSTs"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert f"{copy}: a copy published by host {HOST}" in done.stderr, done.stderr
    assert digest(copy) == before and sorted(os.listdir(shared)) == [f"{HOST}.db"]
    mine = subprocess.run(["slowdown", "rebaseline", "--db", str(source), "--reason", "new OSTs"],
                          capture_output=True, text=True, timeout=60)
    assert mine.returncode == 0, mine.stderr  # the node's own database takes it


def test_the_systemd_dropin_lets_the_service_write_where_it_publishes(tmp_path):
    """Under ProtectSystem=strict the shared directory and node_exporter's textfile
    directory must be writable; '-': a shared filesystem missing at start is said later."""
    config = tmp_path / "slowdown.toml"
    config.write_text(f'host = "{HOST}"\ndatabase = "/var/lib/slowdown/slowdown.db"\n'
                      '[[target]]\nname = "work"\npath = "/lustre/work/slowdown-probe"\n'
                      '[metrics]\ntextfile = "/var/lib/prometheus/node-exporter/slowdown.prom"\n'
                      '[publish]\ndir = "/shared/slowdown"\n')
    result = runner().invoke(probe_main, ["--config", str(config), "systemd-dropin"])
    assert result.exit_code == 0, result.stderr
    paths = [line.split("=", 1)[1] for line in result.stdout.splitlines()
             if line.startswith("ReadWritePaths=")]
    assert paths == [f"-/lustre/work/slowdown-probe/.slowdown/{HOST}", "-/shared/slowdown",
                     "-/var/lib/prometheus/node-exporter"]


@pytest.mark.root
@pytest.mark.timeout(120)
def test_a_hung_shared_directory_holds_the_publish_child_never_the_service_job(
        tmp_path, faultfs, caplog):
    """The shared directory hangs in the middle of a copy (FUSE): the job returns at its
    deadline, the next run waits for the child instead of starting another, the copy in
    place stays whole; released, the late publish is reported and the next one works; a
    child still hung when the service stops is killed."""
    source = tmp_path / "node.db"
    make_source(source, minutes=5)
    shared = faultfs.mountpoint
    config = loads(f'database = "{source}"\nhost = "{HOST}"\n[[target]]\nname = "work"\n'
                   f'path = "{tmp_path / "w"}"\n[publish]\ndir = "{shared}"\nevery = "1m"\n')
    job = PublishJob(config, deadline=1.0)
    copy = shared / f"{HOST}.db"
    with caplog.at_level(logging.INFO, logger="slowdown.probe.exporters.jobs"):
        job.run()
        first = published_by(copy)["at"]
        faultfs.hang(["write"], path=f".{HOST}.db.*")
        began = time.monotonic()
        job.run()
        assert time.monotonic() - began < 5
        faultfs.wait_hung()
        job.run()  # the hung child is waited for, not doubled
        assert integrity(copy) == "ok" and published_by(copy)["at"] == first
        faultfs.release()
        wait_for(lambda: job._child.poll() is not None, 20, what="the released publish")
        job.run()  # reports the late one, then publishes again
        assert published_by(copy)["at"] > first
        faultfs.hang(["write"], path=f".{HOST}.db.*")
        job.deadline = 60.0  # the service stops while its job waits for a hung publish
        running = threading.Thread(target=job.run)
        running.start()
        faultfs.wait_hung()
        child = job._child
        began = time.monotonic()
        job.stop()  # killed, not waited for: a child stuck in the kernel dies when it returns
        running.join(5)
        assert not running.is_alive() and time.monotonic() - began < 2.5
        faultfs.release()
        assert child.wait(10) == -signal.SIGKILL
    said = [r.getMessage() for r in caplog.records]
    assert any("has not ended after 1s" in m for m in said), said
    assert any("has not ended (a hung shared volume?); waited for" in m for m in said), said
    assert any("again after 2 failed attempts" in m for m in said), said
    assert integrity(copy) == "ok"
