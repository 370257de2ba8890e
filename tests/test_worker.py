"""The worker's answers and its shared position: one write per run, the op in flight readable
by the service without a line from the worker, results filed under the time they returned."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slowdown.analysis.config import DataSize, Target
from slowdown.analysis.words import OPS
from slowdown.probe.probes.worker import HOLD_ANSWERS
from slowdown.probe.probes.worker_position import Position, Progress
from slowdown.probe.workspaces.prepare import Workspace, prepare
from tests.faultfs import FaultFS

MIB = 1 << 20


def test_the_page_reads_back_what_was_written_and_nothing_before() -> None:
    service, fd = Progress.create()
    worker = Progress.attach(os.dup(fd))
    os.close(fd)
    assert service.get() is None
    worker.set(7, 3, 123.25)
    assert service.get() == Position(7, 3, 123.25)
    worker.set(8, 0, 124.5)
    assert service.get() == Position(8, 0, 124.5)


def workspace(path: Path) -> Path:
    target = Target(name="t", path=path, data_size=DataSize(bytes=4 * MIB), pool_files=20,
                    pool_dirs=2)
    prepare(target, "node-a", progress=False)
    return Workspace.of(target, "node-a").dir


class Worker:
    """A worker started as the service starts it, read byte by byte as they arrive."""

    def __init__(self, ws: Path) -> None:
        self.progress, fd = Progress.create()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "slowdown.probe.probes.worker", str(ws), "--progress-fd",
             str(fd)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, pass_fds=(fd,))
        os.close(fd)

    def tick(self, n: int) -> None:
        self.process.stdin.write(json.dumps({"tick": n}).encode() + b"\n")
        self.process.stdin.flush()

    def read(self, timeout: float) -> bytes:
        """What one read returns (one write of the worker, unless it wrote again meanwhile),
        or b"" when nothing came within ``timeout``."""
        ready, _, _ = select.select([self.process.stdout], [], [], timeout)
        return os.read(self.process.stdout.fileno(), 1 << 16) if ready else b""

    def run(self, timeout: float) -> list[dict]:
        """A whole run's lines, up to its end: one write, or several when the run was slow
        (a first run on FUSE, opening its files on a loaded machine, may pass HOLD_ANSWERS)."""
        lines: list[dict] = []
        while not lines or "end" not in lines[-1]:
            chunk = self.read(timeout)
            assert chunk, f"no end of the run within {timeout} s: {lines}"
            lines += [json.loads(line) for line in chunk.splitlines()]
        return lines

    def close(self) -> None:
        self.process.kill()
        self.process.wait()


@pytest.mark.timeout(60)
def test_a_run_answers_in_one_write_and_leaves_its_position(tmp_path: Path) -> None:
    worker = Worker(workspace(tmp_path / "target"))
    try:
        for n in (1, 2, 3):
            before = time.time()
            worker.tick(n)
            lines = [json.loads(line) for line in worker.read(20).splitlines()]
            if "end" not in lines[-1]:  # only a run slower than the hold writes early (a
                # loaded machine): the line that went out first came after HOLD_ANSWERS
                assert lines[-1]["at"] - before > HOLD_ANSWERS, lines
                lines += worker.run(20)
            # every op and the end: in one write, unless the run outlasted the hold
            assert [m.get("op") for m in lines] == [*OPS, None], lines
            assert all(m["tick"] == n for m in lines) and lines[-1]["end"] is True
            assert all("lat" in m for m in lines[:-1]), lines
            times = [m["at"] for m in lines[:-1]]
            assert before <= times[0] and times == sorted(times) and times[-1] <= time.time()
            seen = worker.progress.get()
            assert seen.tick == n and seen.done == len(OPS)
    finally:
        worker.close()


@pytest.mark.timeout(90)
def test_a_hung_op_is_named_in_the_page_and_earlier_results_keep_their_time(
        tmp_path: Path) -> None:
    with FaultFS(tmp_path / "backing", tmp_path / "mnt") as fs:
        ws = workspace(fs.mountpoint)
        worker = Worker(ws)
        try:
            worker.tick(1)  # a first run opens the files: later ones only read and write
            assert len(worker.run(20)) == len(OPS) + 1
            fs.hang(["write"], path="*data.bin")
            sent = time.monotonic()
            worker.tick(2)
            time.sleep(2.0)
            seen = worker.progress.get()
            # data-read returned, data-write is in flight since then; no line has come yet
            assert seen.tick == 2 and OPS[seen.done] == "data-write", seen
            assert sent < seen.since < sent + 1.0
            assert worker.read(0) == b""
            released = time.time()
            fs.release()
            ops = {m["op"]: m for m in worker.run(20) if "op" in m}
            assert list(ops) == list(OPS)
            # held while the next op hung, data-read keeps the time it returned
            assert ops["data-read"]["at"] < released - 1.5
            assert ops["data-write"]["at"] >= released and ops["data-write"]["lat"] >= 2.0
            assert worker.progress.get().done == len(OPS)
        finally:
            fs.release()
            worker.close()

