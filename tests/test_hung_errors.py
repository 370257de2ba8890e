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
from slowdown.probe.runtime.recorder import Recorder
from tests.kit.faultfs import FaultFS
from tests.kit.servicekit import (
    TargetSpec,
    live,
    prepared,
    records,
    start_live,
    stop_service,
    wait_for,
)
from tests.kit.workerkit import DEAD_MD_WRITE, HUNG_SAVE, Worker, workspace

pytestmark = pytest.mark.root

ENOTCONN_READ = {"ops": ["read"], "path": "*data.bin", "error": "ENOTCONN"}


class Results(Recorder):
    """The recorder, with each result the runner hands it kept in order (``seen``), each
    skipped tick's sample apart (``waits``) and each stuck age noted (``stuck_ages``)."""

    def __init__(self) -> None:
        super().__init__("h")
        self.seen: list[tuple[str, float | None, bool]] = []
        self.waits: list[tuple[str, float | None]] = []
        self.stuck_ages: list[tuple[str, float]] = []

    def stuck(self, target: str, op: str, age: float, wall: float, at_end: bool = False
              ) -> None:
        self.stuck_ages.append((op, age))
        super().stuck(target, op, age, wall, at_end=at_end)

    def result(self, target: str, op: str, latency: float | None, wall: float,
               failed: bool = False) -> None:
        self.seen.append((op, latency, failed))
        super().result(target, op, latency, wall, failed=failed)

    def waited(self, target: str, op: str, latency: float | None, wall: float,
               failed: bool = False) -> None:
        self.waits.append((op, latency))
        Recorder.result(self, target, op, latency, wall, failed=failed)  # not in ``seen``


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
        config, database = prepared(tmp_path, [TargetSpec("fuse", fs.mountpoint)])
        proc = start_live(config, database)
        try:
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


@pytest.mark.timeout(90)
def test_a_replacement_stuck_at_its_start_counts_its_wait_not_an_error(tmp_path: Path) -> None:
    """A stuck worker's replacement that hangs too, on the workspace's lock as it starts, and
    is abandoned in turn, exits without running its tick once the filesystem answers: its tick
    waited that long (a latency of its age), and no op failed (it was counted an error with no
    latency, "1.04% of data-read failed" after a hang without an I/O error)."""
    from slowdown.probe.runtime.recorder import Recorder
    from slowdown.probe.runtime.runner import TargetRunner

    with FaultFS(tmp_path / "backing", tmp_path / "mnt") as fs:
        ws = workspace(fs.mountpoint)
        recorder = Recorder("h")
        runner = TargetRunner("t", ws, recorder, interval=0.2, abandon_after=1.0,
                              max_abandoned=2)
        runner.owner = {"host": "h", "since": time.time(), "database": str(tmp_path / "db")}
        try:
            runner.start()
            assert runner.lock_said.wait(10) and runner.lock_state == "ok"
            assert runner.tick()
            wait_for(lambda: runner.status.last_end is not None, 10, what="a first run")
            fs.hang(["read"], path="*data.bin")  # the worker's next read hangs
            fs.hang(["open", "create"], path="*service.lock")  # and a new one's start
            deadline = time.monotonic() + 20
            while runner.abandoned < 2 and time.monotonic() < deadline:
                runner.tick()
                time.sleep(0.2)
            assert runner.abandoned == 2, runner.in_flight()
            time.sleep(0.5)
            fs.release()
            # (the runner forgets the workers that have exited as it ticks)
            wait_for(lambda: runner.tick() is not None and runner.abandoned == 0, 20,
                     what="the abandoned workers' exits")
        finally:
            runner.close()
    records, _ = recorder.take(float("inf"))
    reads = [r for r in records if r.op == "data-read"]
    assert sum(r.errors for r in reads) == 0, reads
    assert max(r.histogram.max for r in reads if r.histogram.count) >= 1.0, reads


@pytest.mark.timeout(90)
def test_a_replacement_stuck_before_its_timed_call_keeps_the_wait_it_showed(
        tmp_path: Path) -> None:
    """The first worker hangs in a read, its replacement and the next one in opening the data
    file (CephFS: the MANIFEST's object on a frozen OSD); each is abandoned in turn and then the
    filesystem answers. Every tick gives its data-read once, none an error, and each stuck op
    records at least the age it showed: the replacement's read itself took milliseconds, and
    its wait before it was lost (a stall shown for 12 s recorded as a 31 ms read)."""
    from slowdown.probe.runtime.runner import TargetRunner

    with FaultFS(tmp_path / "backing", tmp_path / "mnt") as fs:
        ws = workspace(fs.mountpoint)
        recorder = Results()
        runner = TargetRunner("t", ws, recorder, interval=0.2, abandon_after=1.0,
                              max_abandoned=2)
        runner.owner = {"host": "h", "since": time.time(), "database": str(tmp_path / "db")}
        try:
            runner.start()
            assert runner.lock_said.wait(10) and runner.lock_state == "ok"
            assert runner.tick()
            wait_for(lambda: runner.status.last_end is not None, 10, what="a first run")
            fs.hang(["read", "open"], path="*data.bin")  # its read; a new worker's open
            deadline = time.monotonic() + 20
            while runner.abandoned < 2 and time.monotonic() < deadline:
                runner.tick()
                time.sleep(0.2)
            assert runner.abandoned == 2, runner.in_flight()

            def shown() -> list[float]:
                return sorted(age for op, age, _ in runner.in_flight() if op == "data-read")

            # The last replacement starts its read when it starts, a tick or so after the
            # second was abandoned: each of the three shows a second's wait before the release.
            wait_for(lambda: len(shown()) == 3 and shown()[0] > 1.0, 10,
                     what="three reads shown stuck a second each")
            ages = shown()
            fs.release()
            wait_for(lambda: runner.tick() is not None and runner.abandoned == 0, 20,
                     what="the abandoned workers' ends")
            # The last run's answers, not only its ops' ends (they may be on their way).
            wait_for(lambda: not runner.in_flight() and runner.status.ticks == sum(
                1 for op, _, _ in recorder.seen if op == "data-read"), 10,
                what="the last run's answers")
        finally:
            runner.close()
    reads = [(lat, failed) for op, lat, failed in recorder.seen if op == "data-read"]
    assert not any(failed for _, _, failed in recorder.seen), recorder.seen
    assert len(reads) == runner.status.ticks, (reads, runner.status.ticks)  # none lost
    slowest = sorted(lat for lat, _ in reads)[-3:]
    assert all(lat >= age for lat, age in zip(slowest, ages)), (slowest, ages)


@pytest.mark.timeout(90)
def test_a_remount_under_a_running_worker_is_met_with_the_files_opened_anew(
        tmp_path: Path) -> None:
    """The mount is lost and made again under a running worker (a CephFS client evicted and
    remounted; a FUSE server restarted): the data file's descriptor of before answers ENOTCONN
    for good, while the same file opened again answers. The worker names the error once, then
    opens its files anew: the ticks after read and write as a user's next command would."""
    with FaultFS(tmp_path / "backing", tmp_path / "mnt") as fs:
        worker = Worker(workspace(fs.mountpoint))
        try:
            worker.tick(1)  # opens the files
            assert all("err" not in m for m in answers(worker).values())
            fs.stop()  # the server gone: every descriptor of this mount is dead
            fs.start()  # the same files, mounted again at the same place
            worker.tick(2)
            ops = answers(worker)
            assert ops["data-read"]["err"] == "ENOTCONN", ops
            for n in (3, 4):
                worker.tick(n)
                ops = answers(worker)
                assert all("err" not in m and "lat" in m for m in ops.values()), (n, ops)
        finally:
            worker.close()


@pytest.mark.timeout(90)
def test_a_worker_hung_after_its_last_op_is_shown_stuck_and_abandoned(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The client evicted as a run's last op returns (CephFS): the run then hangs in letting
    go of its dead descriptors. Every op had returned, so the service showed nothing in flight,
    never abandoned the worker and skipped every tick with no word: the minutes stopped and
    the line said "collecting". Now the wait shows as the next run's first op in flight (live
    and as the minutes' stuck age), the worker is abandoned like any stuck one and probing
    goes on. The wait is the probe's own work after its ops, not a user's op: no latency
    takes it, and each skipped tick counts the run's ops by their own latencies. No op fails
    but the one made to."""
    from slowdown.probe.runtime.runner import TargetRunner

    with FaultFS(tmp_path / "backing", tmp_path / "mnt") as fs:
        ws = workspace(fs.mountpoint)
        recorder = Results()
        runner = TargetRunner("t", ws, recorder, interval=0.2, abandon_after=1.5,
                              max_abandoned=2)
        caplog.set_level("WARNING", logger="slowdown.probe.runtime.runner")
        try:
            assert runner.tick()
            wait_for(lambda: runner.status.last_end is not None, 10, what="a first run")
            fs.set_rules([DEAD_MD_WRITE, HUNG_SAVE])
            wait_for(lambda: runner.tick() is not None and fs.hung(), 10, what="the hung save")
            fs.set_rules([HUNG_SAVE])  # md-write answers again; the save stays hung
            stuck = runner._current.pid
            ages: list[float] = []
            deadline = time.monotonic() + 10
            while runner.abandoned == 0 and time.monotonic() < deadline:
                ages += [age for op, age, pid in runner.in_flight()
                         if pid == stuck and op == "data-read"]
                runner.note_stuck()  # as the service does before each tick
                runner.tick()
                time.sleep(0.1)
            assert runner.abandoned == 1 and ages and max(ages) >= 1.0, ages
            ticks = runner.status.ticks
            fs.release()
            wait_for(lambda: runner.tick() is not None and runner.status.ticks > ticks + 3
                     and runner.abandoned == 0, 20, what="probing after the hang")
        finally:
            runner.close()
    failed = [(op, lat) for op, lat, bad in recorder.seen if bad]
    assert failed == [("md-write", failed[0][1])], failed
    assert f"worker {stuck} took" in caplog.text and "after its run's last op" in caplog.text
    assert max(age for op, age in recorder.stuck_ages if op == "data-read") >= 1.0, \
        recorder.stuck_ages  # shown stuck while it lasted
    reads = [lat for op, lat, _ in recorder.seen if op == "data-read"]
    assert reads and max(reads) < 1.0, reads  # no latency took the wait after the ops
    waits = [lat for op, lat in recorder.waits if op == "data-read"]
    assert waits and max(waits) < 1.0, waits  # skipped ticks: the ops' own latencies
