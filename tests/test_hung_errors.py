"""A hang that ends in an error, as a GlusterFS client does after its ping-timeout (ENOTCONN):
the op's duration is kept in the latency it records (it counts as an error as well), and the
error is named by its errno, also when the workspace's path check is what met it (it used to
read "UnsafePathError"). A FUSE server stands in for Gluster here: replacing a hang rule by an
error rule turns the hung call into that error. The real volume: tests/long/test_gluster_faults.py.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from slowdown.analysis.words import OPS
from tests.faultfs import FaultFS
from tests.servicekit import (
    TargetSpec,
    live,
    probe_cli,
    records,
    start_service,
    stop_service,
    wait_for,
    write_config,
)
from tests.test_worker import Worker, workspace

pytestmark = pytest.mark.root

ENOTCONN_READ = {"ops": ["read"], "path": "*data.bin", "error": "ENOTCONN"}


def answers(worker: Worker, timeout: float = 20) -> dict[str, dict]:
    lines: list[dict] = []
    while not lines or "end" not in lines[-1]:
        chunk = worker.read(timeout)
        assert chunk, lines
        lines += [json.loads(line) for line in chunk.splitlines()]
    return {m["op"]: m for m in lines if "op" in m}


@pytest.mark.timeout(60)
def test_a_hang_that_ends_in_enotconn_answers_with_its_duration(tmp_path: Path) -> None:
    with FaultFS(tmp_path / "backing", tmp_path / "mnt") as fs:
        worker = Worker(workspace(fs.mountpoint))
        try:
            worker.tick(1)  # opens the files
            assert all("lat" in m for m in answers(worker).values())
            fs.hang(["read"], path="*data.bin")
            worker.tick(2)
            fs.wait_hung()
            time.sleep(2.0)
            fs.set_rules([ENOTCONN_READ])  # the client gives up on the server
            ops = answers(worker)
            assert ops["data-read"]["err"] == "ENOTCONN", ops
            assert ops["data-read"]["lat"] >= 2.0, ops
            assert all("lat" in ops[op] and "err" not in ops[op] for op in OPS[1:]), ops
        finally:
            fs.clear()
            worker.close()


@pytest.mark.timeout(60)
def test_enotconn_on_the_path_check_is_named_enotconn(tmp_path: Path) -> None:
    with FaultFS(tmp_path / "backing", tmp_path / "mnt") as fs:
        ws = workspace(fs.mountpoint / "t")
        fs.fail(["getattr"], "ENOTCONN", path="t")  # the target directory stops answering
        worker = Worker(ws)
        try:
            worker.tick(1)
            ops = answers(worker)
            assert {m["err"] for m in ops.values()} == {"ENOTCONN"}, ops
            assert "not connected" in ops["data-read"]["msg"], ops
            assert "lat" in ops["data-read"], ops  # the op that showed in flight
        finally:
            fs.clear()
            worker.close()


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_the_service_records_a_hung_error_as_slow_and_as_an_error(tmp_path: Path) -> None:
    with FaultFS(tmp_path / "backing", tmp_path / "mnt") as fs:
        database = tmp_path / "db" / "slowdown.db"
        config = write_config(tmp_path / "slowdown.toml", database,
                              [TargetSpec("fuse", fs.mountpoint)])
        done = probe_cli(config, "prepare", "--no-progress")
        assert done.returncode == 0, done.stderr
        proc = start_service(config)
        try:
            wait_for(lambda: database.with_name("slowdown.db.live.json").exists(), 15,
                     what="the live state")
            time.sleep(1.5)
            fs.hang(["read"], path="*data.bin")
            fs.wait_hung(timeout=5)
            time.sleep(3.0)
            stuck = live(database)["targets"]["fuse"]
            fs.set_rules([ENOTCONN_READ])
            time.sleep(0.5)
            fs.clear()
            time.sleep(2.0)
        finally:
            _, out = stop_service(proc)
    assert proc.returncode == 0, out
    reads = [rec for rec in records(database) if rec.op == "data-read"]
    assert sum(rec.errors for rec in reads) >= 1, out
    # the 3 s the op hung are in the latency recorded, not only in the stuck column
    assert max(rec.histogram.max for rec in reads if rec.histogram.count) >= 3.0, out
    assert "data-read failed after" in out and "ENOTCONN" in out, out
    assert "UnsafePathError" not in out
    assert stuck, stuck
