"""Parts of an output rendered in forked processes at once and written in order.

A 30-day history is half a million rows, and Python's sqlite3 makes an object of every value
read: about a microsecond a row that no query shape avoids. Where cores are free, the series
are split between processes: each renders its part while the others render theirs, then waits
for its turn (a byte passed down a chain of pipes) to write. The output is the same bytes, in
the same order, as one process writes.

A part that fails (or a reader that went away) stops the chain: the parts after it are not
written, and the caller is told.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import BinaryIO, TypeVar

from slowdown.analysis.store import StoreError

T = TypeVar("T")

MAX_PROCESSES = 8


class PartFailed(RuntimeError):
    """A forked process could not render or write its part: the message is its error."""


def cpus() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _write_all(fd: int, pieces: Sequence[bytes]) -> None:
    for piece in pieces:
        view = memoryview(piece)
        while view:
            view = view[os.write(fd, view):]


def write_in_order(parts: Sequence[T], render: Callable[[T], Sequence[bytes]],
                   stream: BinaryIO) -> None:
    """Write the pieces ``render(part)`` of each part to ``stream``, in order. When the stream
    is a file descriptor, the first part is rendered here and every other one in a forked
    process of its own; ``render`` must then open what it reads itself (a forked process may
    not use its parent's SQLite connections). Otherwise the parts are rendered here."""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):  # an in-memory stream (io.UnsupportedOperation)
        fd = -1
    if len(parts) <= 1 or fd < 0 or not hasattr(os, "fork"):
        for part in parts:
            for piece in render(part):
                stream.write(piece)
        stream.flush()
        return
    stream.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    # turns[i]: the pipe on which part i + 1 waits for part i to be written; failures: where
    # a forked part that fails says why (one short write each: atomic, never blocks).
    turns = [os.pipe() for _ in parts[1:]]
    failures = os.pipe()
    children = []
    for i in range(1, len(parts)):
        pid = os.fork()
        if pid == 0:  # the child for part i: it never returns
            _child(parts[i], render, fd, turns, failures, i)
        children.append(pid)
    os.close(failures[1])
    for i, (read, write) in enumerate(turns):
        os.close(read)
        if i:
            os.close(write)
    try:
        _write_all(fd, render(parts[0]))
        _pass_turn(turns[0][1])
    finally:
        os.close(turns[0][1])  # without the byte: the rest give up
        failed = [pid for pid in children if os.waitpid(pid, 0)[1] != 0]
        said = _read_failures(failures[0])
    if said:  # the first part that failed, in the order of the output
        _, kind, message = min(said)
        if kind == "pipe":
            raise BrokenPipeError(message)
        raise PartFailed(message)
    if failed:
        raise PartFailed(f"{len(failed)} of {len(parts)} parts ended without a word")


def _pass_turn(fd: int) -> None:
    """Tell the next part to write. If it has already ended, it failed and says so itself:
    the broken turn pipe is not this part's failure (nor the reader's going away)."""
    with contextlib.suppress(BrokenPipeError):
        os.write(fd, b"1")


def _read_failures(fd: int) -> list[tuple[int, str, str]]:
    """(part, kind, message) of every failure said on the pipe (its writers have exited)."""
    with os.fdopen(fd, "rb") as pipe:
        return [tuple(json.loads(line)) for line in pipe.read().splitlines()]


def _child(part, render, fd: int, turns: list[tuple[int, int]], failures: tuple[int, int],
           i: int) -> None:
    """Render part ``i``, wait for part ``i - 1`` to be written, write, pass the turn on.
    A failure is said on the failures pipe for the parent to report (one line, in order)."""
    status = 1
    kind, message = "error", ""
    try:
        os.close(failures[0])
        for j, (read, write) in enumerate(turns):
            if j != i - 1:
                os.close(read)
            if j != i:
                os.close(write)
        data = render(part)
        if os.read(turns[i - 1][0], 1) != b"1":  # an earlier part failed and said so
            status = 2
            return
        _write_all(fd, data)
        if i < len(turns):
            _pass_turn(turns[i][1])
        status = 0
    except BrokenPipeError as exc:  # the reader went away
        kind, message = "pipe", str(exc)
    except Exception as exc:
        if hasattr(exc, "format_message"):  # a command-line error, as click says it
            message = exc.format_message()
        elif isinstance(exc, StoreError):
            message = str(exc)
        else:  # a bug: the whole story on stderr
            traceback.print_exc()
            sys.stderr.flush()
            message = f"{type(exc).__name__}: {exc}"
    except BaseException as exc:  # interrupted: said, then gone
        message = f"part {i} stopped: {type(exc).__name__}"
    finally:
        if status == 1:  # one line of JSON, under PIPE_BUF (4096 bytes): written whole
            os.write(failures[1], json.dumps([i, kind, message[:500]]).encode() + b"\n")
        os._exit(status)


__all__ = ["MAX_PROCESSES", "PartFailed", "cpus", "write_in_order"]
