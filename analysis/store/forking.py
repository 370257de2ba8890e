"""Tasks run in this process and forked ones at once, their results sent back in order.

A read of many files spends its time in SQLite and numpy, one CPU per process: where CPUs
are free, the work is split between this process and forked ones. Connections are released
before the fork (a forked process may not use its parent's SQLite connections: each child
connects anew to its files, as after a release by the bound on open files), and each child
pickles its result down a pipe; the parent returns the results in the tasks' order. Three
readers share it: the opening of a cluster's files (``cli/opening.py``), the cluster's
windows (``cluster_windows.py``) and history folded a file at a time (``stats/folded.py``).
"""

from __future__ import annotations

import contextlib
import gc
import os
import pickle
import sys
import traceback
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

from slowdown.analysis.store.open_files import READERS, processes
from slowdown.analysis.store.store import StoreError

T = TypeVar("T")
R = TypeVar("R")

_DIED = "a reading process died"


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
                _child(task, run, write_end)
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


def _child(task, run, write_end: int) -> None:
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


__all__ = ["collector_paused", "processes", "run_all"]
