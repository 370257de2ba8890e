"""Readers create nothing beside a database they only read, and need no write access to its
directory (``store.read_only_uri``): a reader looks at the service's database through a
read-only bind mount of its directory (every file it made there would fail with EROFS) and
the directory is listed before and after."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testdata.datakit import fill, lognormal
from tests.kit.fixtures_fs import require_root
from tests.kit.servicekit import records, start_service, stop_service, wait_for

pytestmark = pytest.mark.timeout(120)

OPS = ("data-read", "data-write", "md-stat", "md-read", "md-delete", "md-write")


def service_config(tmp_path: Path, database: Path) -> Path:
    target = tmp_path / "target"
    target.mkdir(exist_ok=True)
    config = tmp_path / "slowdown.toml"
    config.write_text(f'host = "testhost"\ndatabase = "{database}"\n[[target]]\nname = "t"\n'
                      f'path = "{target}"\ndata_size = "4MiB"\npool_files = 20\npool_dirs = 2\n')
    done = subprocess.run([sys.executable, "-m", "slowdown.probe.command.main", "--config",
                           str(config), "prepare", "--no-progress"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return config


@contextlib.contextmanager
def read_only_view(directory: Path):
    """``directory`` bind-mounted read-only beside it."""
    require_root("a read-only bind mount")
    view = directory.with_name(directory.name + "-ro")
    view.mkdir()
    subprocess.run(["mount", "--bind", "-o", "ro", str(directory), str(view)], check=True)
    try:
        yield view
    finally:
        subprocess.run(["umount", str(view)], check=True)


def listing(directory: Path) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in directory.iterdir()}


def read_counts(config: Path, database: Path, *args: str) -> dict[tuple[str, str], int]:
    """``slowdown stats --json`` of one database: count per (target, op)."""
    done = subprocess.run([sys.executable, "-m", "slowdown.analysis.cli", "--config",
                           str(config), "stats", "--db", str(database), "--since", "2h",
                           "--json", *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return {(op["target"], op["op"]): op["count"] for op in json.loads(done.stdout)["ops"]}


def stored_counts(database: Path) -> dict[tuple[str, str], int]:
    counts: dict[tuple[str, str], int] = {}
    for rec in records(database):
        counts[(rec.target, rec.op)] = counts.get((rec.target, rec.op), 0) + rec.histogram.count
    return counts


def test_a_stopped_services_database_is_read_where_nothing_may_be_written(tmp_path):
    database = tmp_path / "db" / "slowdown.db"
    config = service_config(tmp_path, database)
    proc = start_service(config, "--duration", "3s")
    assert proc.wait(timeout=30) == 0
    before = listing(database.parent)
    assert not any(name.endswith(("-wal", "-shm")) for name in before), before
    with read_only_view(database.parent) as view:
        seen = read_counts(config, view / database.name)
    stored = stored_counts(database)  # in this process, where it could write: nothing either
    assert listing(database.parent) == before
    assert seen == stored and set(seen) == {("t", op) for op in OPS}, (seen, stored)
    assert all(count >= 1 for count in seen.values()), seen


def test_a_reader_while_the_service_runs_reads_and_makes_nothing(tmp_path):
    database = tmp_path / "db" / "slowdown.db"
    database.parent.mkdir()
    start = (int(time.time()) // 60 - 40) * 60
    fill(database, start, 20, lognormal(0.002), host="testhost", targets=("history",))
    config = service_config(tmp_path, database)
    proc = start_service(config)
    try:
        wait_for(lambda: database.with_name(database.name + ".live.json").exists(), 15,
                 what="the live state")
        names = set(listing(database.parent))
        assert {database.name + "-wal", database.name + "-shm"} <= names, names
        with read_only_view(database.parent) as view:
            seen = read_counts(config, view / database.name, "--target", "history")
        assert seen == {("history", op): 20 * 60 for op in OPS}
        assert set(listing(database.parent)) == names
    finally:
        _, text = stop_service(proc)
    assert proc.returncode == 0, text


def test_a_database_named_with_hash_and_question_mark(tmp_path):
    directory = tmp_path / "odd"
    directory.mkdir()
    database = directory / "node#1?.db"
    start = (int(time.time()) // 60 - 30) * 60
    fill(database, start, 10, lognormal(0.002), host="node#1", targets=("work",))
    config = service_config(tmp_path, tmp_path / "unused.db")
    assert read_counts(config, database) == {("work", op): 10 * 60 for op in OPS}
    assert stored_counts(database) == {("work", op): 10 * 60 for op in OPS}
    assert sorted(p.name for p in directory.iterdir()) == ["node#1?.db"]  # no "node" file
