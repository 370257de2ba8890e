"""Work split between this process and forked ones, one per free CPU: results sent back in
order (``run_all``), or output written in order (``write_in_order``). The one place that forks,
and that counts the CPUs (``cpus``, ``processes``).

A read of many files spends its time in SQLite and numpy, one CPU per process: where CPUs
are free, the work is split between this process and forked ones. Connections are released
before the fork (a forked process may not use its parent's SQLite connections: each child
connects anew to its files, as after a release by the bound on open files), and each child
pickles its result down a pipe; the parent returns the results in the tasks' order. Three
readers share it: the opening of a cluster's files (``view/opened_files.py``), the cluster's
windows (``cluster_windows.py``) and history folded a file at a time (``stats/history_by_file.py``).

A 30-day history is half a million rows, and Python's sqlite3 makes an object of every value
read: about a microsecond a row that no query shape avoids. Where cores are free, the series
are split between processes: each renders its part while the others render theirs, then waits
for its turn (a byte passed down a chain of pipes) to write (``write_in_order``). The output is
the same bytes, in the same order, as one process writes. A part that fails (or a reader that
went away) stops the chain: the parts after it are not written, and the caller is told.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import pickle
import sys
import traceback
from collections.abc import Callable, Iterator, Sequence
from typing import BinaryIO, TypeVar

from slowdown.analysis.store.open_files import READERS
from slowdown.analysis.store.store import StoreError

T = TypeVar("T")
R = TypeVar("R")

_DIED = "a reading process died"
# The most processes that read files, or render parts of an output, at once.
MAX_PROCESSES = 8


def cpus() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def processes() -> int:
    """Processes worth forking to read many files: one per free CPU, at most
    ``MAX_PROCESSES``; one where this system cannot fork."""
    return max(1, min(cpus(), MAX_PROCESSES)) if hasattr(os, "fork") else 1


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cycle collector paused while many files are read. Their rows make millions
    of short-lived tuples and hardly a cycle, yet each few hundred new objects start a
    collection that walks the young ones: about a tenth of the CPU of reading a cluster's
    windows (512 hosts: 1.80 s of user CPU to 1.62 s). Cycles made meanwhile are collected
    afterwards."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def run_all(tasks: Sequence[T], run: Callable[[T], R],
            fallback: Callable[[T], R] | None = None) -> list[R]:
    """``[run(t) for t in tasks]``, the first here and each other one in a forked process.
    A child's failure is raised here (a ``StoreError`` as it was, anything else as a
    ``RuntimeError`` with its message, its traceback on stderr), or, with ``fallback``, its
    task is done again here by ``fallback``."""
    with collector_paused():
        return _run_all(tasks, run, fallback)


def _run_all(tasks: Sequence[T], run: Callable[[T], R],
             fallback: Callable[[T], R] | None) -> list[R]:
    if len(tasks) <= 1 or not hasattr(os, "fork"):
        return [run(t) for t in tasks]
    READERS.release_all()  # the children inherit no connection (nor its descriptors)
    sys.stdout.flush()
    sys.stderr.flush()
    children = []
    try:
        for task in tasks[1:]:
            read_end, write_end = os.pipe()
            pid = os.fork()
            if pid == 0:  # the child: it never returns
                os.close(read_end)
                _run_child(task, run, write_end)
            os.close(write_end)
            children.append((pid, read_end))
        mine = run(tasks[0])
    finally:
        theirs = []
        for pid, read_end in children:
            with os.fdopen(read_end, "rb") as pipe:
                data = pipe.read()
            os.waitpid(pid, 0)
            theirs.append(pickle.loads(data) if data else ("error", "RuntimeError", _DIED))
    out = [mine]
    for task, got in zip(tasks[1:], theirs):
        if got[0] == "done":
            out.append(got[1])
        elif fallback is not None:
            out.append(fallback(task))
        else:
            raise (StoreError if got[1] == "StoreError" else RuntimeError)(got[2])
    return out


def _run_child(task, run, write_end: int) -> None:
    status = 1
    try:
        try:
            got: tuple = ("done", run(task))
        except StoreError as exc:
            got = ("error", "StoreError", str(exc))
        except Exception as exc:  # a bug: the whole story on stderr, one line for the parent
            traceback.print_exc()
            sys.stderr.flush()
            got = ("error", type(exc).__name__, f"{type(exc).__name__}: {exc}")
        data = pickle.dumps(got, protocol=pickle.HIGHEST_PROTOCOL)
        with os.fdopen(write_end, "wb") as pipe:
            pipe.write(data)
        status = 0
    finally:
        os._exit(status)



class PartFailed(RuntimeError):
    """A forked process could not render or write its part: the message is its error."""


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
            _write_child(parts[i], render, fd, turns, failures, i)
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


def _write_child(part, render, fd: int, turns: list[tuple[int, int]], failures: tuple[int, int],
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


__all__ = ["MAX_PROCESSES", "PartFailed", "collector_paused", "cpus", "processes", "run_all",
           "write_in_order"]
