"""Parts rendered in forked processes come out whole and in order; a failed part stops the
rest and is reported."""

from __future__ import annotations

import io
import os
import time

import pytest

from slowdown.analysis.store import StoreError
from slowdown.analysis.store import forking as forked


def render(part: int) -> list[bytes]:
    """Part i: its pid and enough bytes to fill a pipe several times, in pieces."""
    head = f"part {part} pid {os.getpid()}\n".encode()
    return [head, bytes([65 + part]) * 300_000, b"\n"]


def parse(data: bytes) -> list[tuple[int, int, int]]:
    """(part, pid, body length) of each part in the output."""
    out = []
    lines = data.split(b"\n")
    for head, body in zip(lines[::2], lines[1::2]):
        _, part, _, pid = head.split()
        assert body == bytes([65 + int(part)]) * len(body)
        out.append((int(part), int(pid), len(body)))
    return out


def test_parts_are_written_in_order_each_rendered_by_its_own_process(tmp_path):
    path = tmp_path / "out"
    with open(path, "wb") as stream:
        forked.write_in_order(list(range(5)), render, stream)
    parts = parse(path.read_bytes())
    assert [p for p, _, _ in parts] == [0, 1, 2, 3, 4]
    assert all(n == 300_000 for _, _, n in parts)
    pids = [pid for _, pid, _ in parts]
    assert pids[0] == os.getpid() and len(set(pids)) == 5


def test_through_a_pipe_the_reader_gets_the_same_bytes():
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the writer
        os.close(read)
        with os.fdopen(write, "wb") as stream:
            forked.write_in_order([0, 1, 2], render, stream)
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as stream:
        data = stream.read()
    assert os.waitpid(pid, 0)[1] == 0
    assert [p for p, _, _ in parse(data)] == [0, 1, 2]


def test_an_in_memory_stream_gets_every_part_from_this_process():
    stream = io.BytesIO()
    forked.write_in_order([0, 1, 2], render, stream)
    parts = parse(stream.getvalue())
    assert [p for p, _, _ in parts] == [0, 1, 2]
    assert {pid for _, pid, _ in parts} == {os.getpid()}


def failing(part: int) -> list[bytes]:
    if part == 2:
        raise ValueError("part two cannot be read")
    if part == 3:
        raise StoreError("/x/y.db: database disk image is malformed")
    return render(part)


def test_a_failed_part_stops_the_rest_and_the_first_failure_is_told(tmp_path, capfd):
    path = tmp_path / "out"
    with open(path, "wb") as stream, pytest.raises(forked.PartFailed) as failure:
        forked.write_in_order([0, 1, 2, 3, 4], failing, stream)
    assert str(failure.value) == "ValueError: part two cannot be read"
    assert [p for p, _, _ in parse(path.read_bytes())] == [0, 1]
    assert "Traceback" in capfd.readouterr().err  # an unexpected error: the whole story


def test_a_database_error_of_a_forked_part_is_told_as_it_is(tmp_path, capfd):
    path = tmp_path / "out"
    with open(path, "wb") as stream, pytest.raises(forked.PartFailed) as failure:
        forked.write_in_order([0, 1, 3], failing, stream)
    assert str(failure.value) == "/x/y.db: database disk image is malformed"
    assert [p for p, _, _ in parse(path.read_bytes())] == [0, 1]
    assert capfd.readouterr().err == ""  # said once, by the caller


def test_a_reader_gone_is_a_broken_pipe_here_too():
    read, write = os.pipe()
    os.close(read)
    with os.fdopen(write, "wb") as stream, pytest.raises(BrokenPipeError):
        forked.write_in_order([0, 1, 2], lambda part: [b"x"] if part == 0 else render(part),
                              stream)


def test_a_failure_here_stops_every_forked_part(tmp_path):
    def first_fails(part: int) -> list[bytes]:
        if part == 0:
            raise OSError("the first part's file is gone")
        return render(part)

    path = tmp_path / "out"
    with open(path, "wb") as stream, pytest.raises(OSError, match="file is gone"):
        forked.write_in_order([0, 1, 2], first_fails, stream)
    assert path.read_bytes() == b""


def test_a_part_that_fails_before_its_turn_is_told_not_a_broken_pipe(tmp_path):
    """The part before it passes the turn to a process already gone: that is the failed
    part's story, not a reader that went away."""
    def slow_then_failing(part: int) -> list[bytes]:
        if part == 1:
            time.sleep(0.3)
        if part == 2:
            raise StoreError("/x/y.db: database disk image is malformed")
        return render(part)

    path = tmp_path / "out"
    with open(path, "wb") as stream, pytest.raises(forked.PartFailed, match="malformed"):
        forked.write_in_order([0, 1, 2], slow_then_failing, stream)
    assert [p for p, _, _ in parse(path.read_bytes())] == [0, 1]
