"""A filesystem read that may hang, run in a forked child with a deadline.

A call into a hung FUSE or network filesystem blocks in the kernel, often where not even
SIGKILL ends it until the server answers. Whatever runs it must be a process of its own:
a thread stuck there keeps its process from exiting, and ``multiprocessing`` joins its
children at exit. So the work runs in a child made with ``os.fork`` that sends its result
down a pipe; the parent waits for it until the deadline, then kills the child with SIGKILL
and goes on without waiting for it (a child stuck in the kernel is reaped later, with
``WNOHANG``, by the next call). While a child of the same ``key`` is still stuck, a new
call does not fork another behind it: it fails at once, saying since when the read hangs,
so a service that reads every minute keeps one stuck child per source, not one a minute.

The child closes every descriptor it inherited but its pipe (standard input and output go
to /dev/null): a child stuck in the kernel must not hold the caller's standard output (a
monitoring system reading a check's output to its end), a listening socket or the pipes of
the parent's other children. It uses none of the parent's SQLite connections (it opens its
own, as a forked reader of ``forking.py`` does, and leaves the files the parent has open to
the parent: ``inherited_paths``) and ends with ``os._exit``.
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import os
import pickle
import select
import signal
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")
Note = Callable[[str], None]  # the child says what it is doing: named by a time-out

DYING = 0.05  # seconds a killed child is given to end before it counts as stuck
_HEADER = struct.Struct(">I")  # each message: its length, then its pickle


class Unanswered(Exception):
    """The child gave no result: timed out (``timed_out``), or it failed (the message)."""

    def __init__(self, message: str, timed_out: bool = False) -> None:
        super().__init__(message)
        self.timed_out = timed_out


@dataclass
class _Stuck:
    key: str | None  # None: done, only not reaped yet
    since: float  # wall clock, when its read began
    doing: str


_CHILDREN: dict[int, _Stuck] = {}  # forked and not reaped yet
_INHERITED: frozenset[str] = frozenset()  # in a child: the files its parent had open


def call_bounded(key: str, run: Callable[[Note], T], timeout: float) -> T:
    """``run(note)`` in a forked child, its result within ``timeout`` seconds, else
    ``Unanswered`` (``timed out after 2 s listing /shared/pub``). ``note(text)`` tells
    what the child is doing now; a time-out names the last one."""
    reap()
    for stuck in _CHILDREN.values():
        if stuck.key == key:
            raise Unanswered(f"timed out after {timeout:g} s{_doing(stuck.doing)} (hung since "
                             f"{time.strftime('%H:%M:%S UTC', time.gmtime(stuck.since))})",
                             timed_out=True)
    if not hasattr(os, "fork"):
        return run(lambda text: None)
    since = time.time()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: it never returns
        os.close(read_end)
        _child(run, write_end)
    os.close(write_end)
    try:
        got, doing = _receive(read_end, time.monotonic() + timeout)
    finally:
        os.close(read_end)
    if got is None:  # the deadline: killed, reaped later if it does not die at once
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        _CHILDREN[pid] = _Stuck(key, since, doing)
        _reap_soon(pid)
        raise Unanswered(f"timed out after {timeout:g} s{_doing(doing)}", timed_out=True)
    _CHILDREN[pid] = _Stuck(None, since, doing)  # it has answered; its exit may still wait
    reap()
    if got[0] == "done":
        return got[1]
    raise Unanswered(got[1])


def inherited_paths() -> frozenset[str]:
    """In the child: the files the parent had open at the fork (their paths as the kernel
    names them). SQLite keeps per process what it knows of each open file (its locks, the
    WAL's shared memory): a child that opened one of them too would take the parent's state
    for its own, so such a file is for the parent to read."""
    return _INHERITED


def reap() -> None:
    """Collect the children that have ended (never waiting for one)."""
    for pid in list(_CHILDREN):
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:  # reaped elsewhere
            done = pid
        if done:
            del _CHILDREN[pid]


def _reap_soon(pid: int) -> None:
    """Reap a child just killed, giving it ``DYING`` seconds to end (one blocked in the
    kernel by a hung filesystem does not: it stays, to be reaped later)."""
    deadline = time.monotonic() + DYING
    while pid in _CHILDREN and time.monotonic() < deadline:
        reap()
        time.sleep(0.005)
    reap()


def stuck_children() -> list[int]:
    """The children still not reaped (for tests)."""
    reap()
    return sorted(_CHILDREN)


def _doing(text: str) -> str:
    return f" {text}" if text else ""


def _receive(fd: int, deadline: float) -> tuple[tuple | None, str]:
    """The child's final message (None at the deadline) and the last thing it said it did."""
    buffer = b""
    doing = ""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    while True:
        while len(buffer) >= _HEADER.size:
            (length,) = _HEADER.unpack_from(buffer)
            if len(buffer) < _HEADER.size + length:
                break
            message = pickle.loads(buffer[_HEADER.size:_HEADER.size + length])
            buffer = buffer[_HEADER.size + length:]
            if message[0] == "note":
                doing = message[1]
            else:
                return message, doing
        left = deadline - time.monotonic()
        if left <= 0 or not poller.poll(max(1, int(left * 1000))):
            if time.monotonic() >= deadline:
                return None, doing
            continue
        chunk = os.read(fd, 1 << 16)
        if not chunk:  # ended without a result
            return ("error", "the reading process died"), doing
        buffer += chunk


def _child(run: Callable[[Note], object], write_end: int) -> None:
    status = 1
    try:
        write_end = _detach(write_end)

        def note(text: str) -> None:
            _send(write_end, ("note", text))

        try:
            got: tuple = ("done", run(note))
        except Exception as exc:
            got = ("error", f"{type(exc).__name__}: {exc}")
        _send(write_end, got)
        status = 0
    finally:
        os._exit(status)


def _detach(keep: int) -> int:
    """Nothing of the parent's but the pipe ``keep`` (returned, moved above 2): signals as
    by default, no collector run on the parent's objects, every other descriptor closed,
    0-2 on /dev/null."""
    if keep <= 2:  # the parent had closed a standard descriptor
        keep = fcntl.fcntl(keep, fcntl.F_DUPFD, 3)
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        with contextlib.suppress(ValueError, OSError):
            signal.signal(signum, signal.SIG_DFL)
    with contextlib.suppress(ValueError, OSError):
        signal.set_wakeup_fd(-1)
    gc.disable()
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        if fd != keep:
            os.dup2(null, fd)
    try:
        fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        fds = list(range(3, 1024))
    names = set()
    for fd in fds:
        if fd > 2 and fd != keep:
            with contextlib.suppress(OSError):
                names.add(os.readlink(f"/proc/self/fd/{fd}"))  # procfs: no call on the file
            with contextlib.suppress(OSError):
                os.close(fd)
    global _INHERITED
    _INHERITED = frozenset(names)
    return keep


def _send(fd: int, message: tuple) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(_HEADER.pack(len(data)) + data)
    while view:
        view = view[os.write(fd, view):]


__all__ = ["Note", "Unanswered", "call_bounded", "inherited_paths", "reap", "stuck_children"]
