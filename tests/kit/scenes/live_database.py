"""What people do to a node's live database, done to the real service: nothing recorded is lost,
and what was not recorded is said.

Five services run side by side for four and a half minutes, each with its own database, and
an admin's hand on each:

- ``readers``: the sqlite3 shell and Python's default connection reading the file every few
  seconds, ``.backup``, ``attach``, ``cp``, ``rsync``, a ``VACUUM`` and a ``BEGIN IMMEDIATE``
  held for a minute, while the service's own readers (metrics, publishing, the fleet's verdict,
  an alert rule) run. A client that took itself for the last one used to delete the -wal and
  -shm under the service (its own readers had dropped its locks), and every later minute was
  lost while it said "running".
- ``deleted``: ``rm slowdown.db*`` (the lock and the live state too).
- ``replaced``: an older backup moved over the file, later a foreign SQLite file, later that
  foreign file moved away again.
- ``moved``: ``mv slowdown.db elsewhere.db``.
- ``readonly``: its directory made read-only (``chmod 555``) under the running service, which
  then stops and starts there again.

docs/RELIABILITY.md ("What people do to a live database") lists the cases and what was seen.
Run by tests/test_scenes.py, side by side with the other scenes of minutes.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

from slowdown.analysis.words import OPS
from tests.kit.servicekit import probe_cli, start_service, stop_service, wait_live

HOST = "testhost"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _node(tmp_path: Path, name: str, *extra: str) -> tuple[Path, Path]:
    """A prepared small target and a configuration; (configuration, database)."""
    home = tmp_path / name
    (home / "target").mkdir(parents=True)
    database = home / "db" / "slowdown.db"
    lines = [f'host = "{HOST}"', f'database = "{database}"', "[[target]]", 'name = "t"',
             f'path = "{home / "target"}"', 'data_size = "4MiB"', "pool_files = 20",
             "pool_dirs = 2", *extra]
    config = home / "slowdown.toml"
    config.write_text("\n".join(lines) + "\n")
    done = probe_cli(config, "prepare", "--no-progress")
    assert done.returncode == 0, done.stderr
    return config, database


def _slowdown(config: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "slowdown.analysis.cli.main", "--config",
                           str(config), *args], capture_output=True, text=True, timeout=60)


def _sqlite3(*args: str) -> str:
    done = subprocess.run(["sqlite3", *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _minutes(database: Path) -> dict[str, set[int]]:
    """The minutes recorded per op (read the way an admin would, read-only)."""
    conn = sqlite3.connect(f"file:{database}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT s.op, m.start FROM minutes m JOIN series s "
                            "ON s.id = m.series").fetchall()
    finally:
        conn.close()
    found: dict[str, set[int]] = {}
    for op, start in rows:
        found.setdefault(op, set()).add(start)
    return found


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino


def _until(moment: float) -> None:
    time.sleep(max(0.0, moment - time.time()))


def _stopped_count(log: str) -> int:
    found = re.search(r"stopped; (\d+) minute records of this run in", log)
    assert found, log
    return int(found.group(1))


def _without_dac_override(config: Path, *args: str) -> subprocess.Popen:
    """The service as root without CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH: file modes hold
    for it as for the service's own user."""
    return start_service(config, *args, wrap=["setpriv", "--bounding-set",
                                               "-dac_override,-dac_read_search", "--"])


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def scene(tmp_path: Path) -> None:
    """The five services and the admin's hands, then what each file holds and what was said
    (raises AssertionError naming what was not so)."""
    port = _free_port()
    pub = tmp_path / "pub"
    readers_cfg, readers_db = _node(
        tmp_path, "readers",
        "[metrics]", f'listen = "127.0.0.1:{port}"',
        "[publish]", f'dir = "{pub}"', 'every = "1m"',
        "[fleet]", f'databases = "{pub}/*.db"',
        "[[alert]]", 'name = "slow"', 'target = "t"', 'op = "*"', 'kind = "slowdown"',
        'statistic = "median"', 'window = "1m"', "above = 1000.0", 'for = "0s"',
        'action = { type = "command", argv = ["/bin/true"] }')
    deleted_cfg, deleted_db = _node(tmp_path, "deleted", "[metrics]",
                                    f'listen = "127.0.0.1:{_free_port()}"')
    replaced_cfg, replaced_db = _node(tmp_path, "replaced")
    moved_cfg, moved_db = _node(tmp_path, "moved")
    readonly_cfg, readonly_db = _node(tmp_path, "readonly")

    # Minutes m0 (partial, at least 30 s of it) .. m4 (partial, at the stop).
    if time.time() % 60 > 25:
        _until(time.time() // 60 * 60 + 61)
    m0 = time.time() // 60 * 60
    services = {name: start_service(cfg) for name, cfg in (
        ("readers", readers_cfg), ("deleted", deleted_cfg), ("replaced", replaced_cfg),
        ("moved", moved_cfg))}
    # The service's user may not write where the mode says no: root without the capability
    # to pass over permissions (its directory made read-only below, as for any other user).
    services["readonly"] = _without_dac_override(readonly_cfg)
    said: dict[str, list[str]] = {}  # what check said at the moments that matter

    # readers: ordinary clients all the time, the -wal watched every few seconds.
    wal_ids: list = []
    done = threading.Event()

    def readers() -> None:
        while not done.wait(3.0):
            wal_ids.append(_identity(Path(f"{readers_db}-wal")))
            _sqlite3(str(readers_db), "select count(*) from minutes")
            conn = sqlite3.connect(readers_db)  # Python's default: read-write, then closed
            conn.execute("select count(*) from minutes").fetchone()
            conn.close()

    reading = threading.Thread(target=readers, daemon=True)
    try:
        wait_live(readers_db)  # its database made (on a loaded machine, more than 3 s)
        reading.start()
        _until(m0 + 28)  # copies of every kind of the live file
        _sqlite3(str(readers_db), f".backup {tmp_path / 'backup.db'}")
        _sqlite3(":memory:", f"attach '{readers_db}' as d", "select count(*) from d.series")
        shutil.copyfile(readers_db, tmp_path / "copy.db")
        subprocess.run(["rsync", str(readers_db), str(tmp_path / "rsynced.db")], check=True)
        _sqlite3(str(replaced_db), f".backup {tmp_path / 'older.db'}")  # an early backup
        readonly_db.parent.chmod(0o555)
        _until(m0 + 40)
        for suffix in ("", "-wal", "-shm", ".lock", ".live.json"):
            Path(f"{deleted_db}{suffix}").unlink(missing_ok=True)  # rm slowdown.db*
        os.rename(moved_db, tmp_path / "moved-away.db")  # mv slowdown.db elsewhere.db
        _until(m0 + 60 + 5)  # m1: the flushes at m1 found them gone
        said["deleted"] = [_slowdown(deleted_cfg, "check").stdout, _slowdown(deleted_cfg).stdout]
        said["moved"] = [_slowdown(moved_cfg, "check").stdout]
        _until(m0 + 60 + 10)
        os.rename(tmp_path / "older.db", replaced_db)  # the early backup restored over it
        _until(m0 + 60 + 20)  # the file alone copied, after a minute was written
        shutil.copyfile(readers_db, tmp_path / "copy-m1.db")
        subprocess.run(["rsync", str(readers_db), str(tmp_path / "rsynced-m1.db")], check=True)
        _until(m0 + 60 + 30)
        _sqlite3(str(readers_db), "VACUUM")
        _until(m0 + 120 + 5)  # m2
        said["replaced"] = [_slowdown(replaced_cfg, "check").stdout]
        foreign = tmp_path / "foreign.db"
        _sqlite3(str(foreign), "create table notes (text)", "insert into notes values ('x')")
        foreign_sha = _sha(foreign)
        os.rename(foreign, replaced_db)  # someone else's file in its place
        _until(m0 + 120 + 40)
        hold = sqlite3.connect(readers_db)  # a write transaction held a minute
        hold.execute("BEGIN IMMEDIATE")
        _until(m0 + 180 + 15)  # m3: the flush waited its busy timeout, and gave up
        said["locked"] = [_slowdown(readers_cfg, "check").stdout]
        line = _slowdown(replaced_cfg)  # the file cannot be read: why, from its service
        said["foreign"] = [_slowdown(replaced_cfg, "check").stdout, line.stderr]
        assert line.returncode == 1, line
        assert _sha(replaced_db) == foreign_sha  # nothing written into it
        os.rename(replaced_db, tmp_path / "foreign-back.db")  # the admin takes it away
        _until(m0 + 180 + 40)
        hold.rollback()
        hold.close()
        _until(m0 + 240 + 15)  # m4
        said["readers"] = [_slowdown(readers_cfg, "check").stdout]
    finally:
        done.set()
        if reading.ident is not None:
            reading.join(10)
        logs = {name: stop_service(proc)[1] for name, proc in services.items()}
    again = _without_dac_override(readonly_cfg, "--duration", "3")  # started in it again
    again.wait(30)
    restarted = stop_service(again)[1]
    readonly_db.parent.chmod(0o755)

    minutes = [int(m0 + 60 * k) for k in range(5)]

    # readers: every minute of the run is in the file, and the -wal was never replaced.
    found = _minutes(readers_db)
    assert set(found) == set(OPS)
    assert all(found[op] == set(minutes) for op in OPS), (found, logs["readers"])
    assert len({i for i in wal_ids if i is not None}) == 1, wal_ids
    assert _stopped_count(logs["readers"]) == 5 * len(OPS)
    assert "CRITICAL" in said["locked"][0] and "database is locked" in said["locked"][0]
    assert str(readers_db) in said["locked"][0]
    # The held transaction's minute reached the file a minute late: nothing to be CRITICAL for.
    assert not said["readers"][0].startswith("SLOWDOWN CRITICAL"), said["readers"]
    assert "records" not in said["readers"][0], said["readers"]
    for copy in ("backup.db", "copy.db", "rsynced.db"):
        assert (tmp_path / copy).stat().st_size > 0
    for copy in ("copy-m1.db", "rsynced-m1.db"):  # the file alone, without its -wal: the
        found = _minutes(tmp_path / copy)  # service copies the WAL into it at each flush
        assert all(int(m0) in found.get(op, ()) for op in OPS), (copy, found)

    # deleted: check named the path at once; every minute from the one in progress at the
    # deletion on reached the new file; the count at the stop is the file's.
    check, line = said["deleted"]
    assert check.startswith("SLOWDOWN CRITICAL") and str(deleted_db) in check, check
    assert "deleted or moved away" in check and "deleted or moved away" in line, line
    found = _minutes(deleted_db)
    assert all(found[op] == set(minutes) for op in OPS), found
    assert _stopped_count(logs["deleted"]) == 5 * len(OPS)
    assert (deleted_db.parent / "slowdown.db.lock").exists()
    assert json.loads((deleted_db.parent / "slowdown.db.live.json").read_text())["stopped"]

    # moved: the file at the path holds every minute; the file moved away is whole.
    assert str(moved_db) in said["moved"][0] and "CRITICAL" in said["moved"][0]
    assert all(_minutes(moved_db)[op] == set(minutes) for op in OPS)
    away = sqlite3.connect(tmp_path / "moved-away.db")
    assert away.execute("pragma integrity_check").fetchone() == ("ok",)
    away.close()

    # replaced: the restored backup took m1; the foreign file was never written, and what
    # was kept meanwhile (m2, m3) reached the new file made once it was gone.
    assert "replaced by another file" in said["replaced"][0], said["replaced"]
    check, line = said["foreign"]
    assert check.startswith("SLOWDOWN CRITICAL") and "records are not reaching" in check, check
    assert "records are not reaching" in line, line
    assert _sha(tmp_path / "foreign-back.db") == foreign_sha
    assert all(_minutes(replaced_db)[op] == set(minutes[2:]) for op in OPS)
    assert _stopped_count(logs["replaced"]) == 3 * len(OPS)

    # readonly: the files it had go on taking every minute; it starts again there.
    assert all(_minutes(readonly_db)[op] >= set(minutes) for op in OPS)
    assert " 0 minute records" not in restarted and "Traceback" not in restarted, restarted
    assert again.returncode == 0, restarted
    for name in services:
        assert "Traceback" not in logs[name], logs[name]
