"""The worker's answers and its shared position: one write per run, the op in flight readable
by the service without a line from the worker, results filed under the time they returned."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from slowdown.analysis.words import OPS
from slowdown.probe.probes.worker import HOLD_ANSWERS
from slowdown.probe.probes.worker_position import Position, Progress
from tests.kit.faultfs import FaultFS
from tests.kit.workerkit import DEAD_MD_WRITE, HUNG_SAVE, Worker, workspace


def test_the_page_reads_back_what_was_written_and_nothing_before() -> None:
    service, fd = Progress.create()
    worker = Progress.attach(os.dup(fd))
    os.close(fd)
    assert service.get() is None
    worker.set(7, 3, 123.25)
    assert service.get() == Position(7, 3, 123.25)
    worker.set(8, 0, 124.5)
    assert service.get() == Position(8, 0, 124.5)


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
            assert seen.tick == n and seen.done == len(OPS) + 1  # and ended
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
            assert worker.progress.get().done == len(OPS) + 1
        finally:
            fs.release()
            worker.close()



@pytest.mark.timeout(90)
def test_a_hang_after_the_last_op_shows_in_the_page_and_the_end_says_how_long(
        tmp_path: Path) -> None:
    """Every op has returned and the run has not ended: the page says so (all ops done, since
    the last returned), and the end line carries the wait after them. Before, the page read
    "every op done" as "answers on their way": the service showed nothing in flight and
    skipped every tick while the run hung."""
    with FaultFS(tmp_path / "backing", tmp_path / "mnt") as fs:
        worker = Worker(workspace(fs.mountpoint))
        try:
            worker.tick(1)
            assert len(worker.run(20)) == len(OPS) + 1
            fs.set_rules([DEAD_MD_WRITE, HUNG_SAVE])
            worker.tick(2)
            fs.wait_hung(timeout=10)
            fs.set_rules([HUNG_SAVE])
            time.sleep(1.5)
            seen = worker.progress.get()
            assert seen.tick == 2 and seen.done == len(OPS), seen  # all done, not ended
            assert time.monotonic() - seen.since >= 1.5
            fs.release()
            lines = worker.run(20)
            assert [m.get("op") for m in lines] == [*OPS, None], lines
            assert lines[-2]["err"] == "ENOTCONN", lines
            assert lines[-1]["end"] is True and lines[-1]["after"] >= 1.5, lines
            assert worker.progress.get().done == len(OPS) + 1
            worker.tick(3)  # and the next run opens the md probe anew and answers
            ops = {m["op"]: m for m in worker.run(20) if "op" in m}
            assert all("lat" in m and "err" not in m for m in ops.values()), ops
        finally:
            fs.clear()
            worker.close()
