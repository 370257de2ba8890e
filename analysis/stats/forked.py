"""Tasks run in this process and forked ones at once, their results sent back in order.

A cluster view that folds every file's records (``stats.folded``) spends its time in
SQLite and numpy, one CPU per process: where CPUs are free, the (target, op) pairs are split
between processes, each reading its own pairs from every file. Each child opens its files
anew (connections are released before the fork: a forked process may not use its parent's)
and pickles its result down a pipe; the parent returns the results in the tasks' order.
"""

from __future__ import annotations

import os
import pickle
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import TypeVar

from slowdown.analysis.store import StoreError
from slowdown.analysis.store.open_files import READERS

T = TypeVar("T")
R = TypeVar("R")

MAX_PROCESSES = 8


def free_cpus() -> int:
    """CPUs this process may run on (1 where it cannot fork)."""
    if not hasattr(os, "fork"):
        return 1
    try:
        return max(1, min(len(os.sched_getaffinity(0)), MAX_PROCESSES))
    except AttributeError:  # not Linux
        return max(1, min(os.cpu_count() or 1, MAX_PROCESSES))


def run_all(tasks: Sequence[T], run: Callable[[T], R]) -> list[R]:
    """``[run(t) for t in tasks]``, the first here and each other one in a forked process.
    A child's failure is raised here: a ``StoreError`` as it was, anything else as a
    ``RuntimeError`` with its message (its traceback on stderr)."""
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
            theirs.append(pickle.loads(data) if data else ("error", "RuntimeError",
                                                           "a reading process died"))
    out = [mine]
    for got in theirs:
        if got[0] == "error":
            raise (StoreError if got[1] == "StoreError" else RuntimeError)(got[2])
        out.append(got[1])
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


__all__ = ["MAX_PROCESSES", "free_cpus", "run_all"]
