"""Where a worker is in its run, shared with the service through memory instead of the pipe.

A worker answers once per run (all its lines in one write), so the service's reader thread
wakes once per tick rather than once per op: on a virtual machine each thread wake-up costs
more CPU than the probes' own work (docs/BENCHMARKS-probe.md). What the service still needs
between answers, which op is in flight and since when, the worker stores in a page both
processes map: a store to memory after each op, no system call, no thread to wake.

Times are ``time.monotonic()`` seconds: CLOCK_MONOTONIC, one clock for every process of the
machine, so the service can take an age from a time the worker wrote.
"""

from __future__ import annotations

import mmap
import os
import struct
import tempfile
from dataclasses import dataclass

# A sequence number at both ends: a read that races a write sees them differ and reads again.
_SLOT = struct.Struct("<qqqdq")  # sequence, tick, ops done, since, sequence


@dataclass(frozen=True)
class Position:
    """A worker's run ``tick`` has finished ``done`` ops; the next one started at ``since``.
    One more than the run's ops: the run has ended (its end line written) at ``since``."""

    tick: int
    done: int
    since: float


class Progress:
    """One worker's position, in a shared page."""

    def __init__(self, page: mmap.mmap) -> None:
        self._page = page
        self._sequence = 0

    @classmethod
    def create(cls) -> tuple[Progress, int]:
        """A new page (service side) and a file descriptor the worker maps it from; the
        caller closes the descriptor once the worker has it."""
        try:
            fd = os.memfd_create("slowdown-progress", os.MFD_CLOEXEC)
        except (AttributeError, OSError):  # no memfd: an unlinked temporary file does
            with tempfile.TemporaryFile() as handle:
                fd = os.dup(handle.fileno())
        os.ftruncate(fd, _SLOT.size)
        return cls(mmap.mmap(fd, _SLOT.size)), fd

    @classmethod
    def attach(cls, fd: int) -> Progress:
        """The page the service created (worker side)."""
        try:
            return cls(mmap.mmap(fd, _SLOT.size))
        finally:
            os.close(fd)

    def set(self, tick: int, done: int, since: float) -> None:
        self._sequence += 1
        _SLOT.pack_into(self._page, 0, self._sequence, tick, done, since, self._sequence)

    def get(self) -> Position | None:
        """The last position written, or None before the first."""
        for _ in range(100):
            first, tick, done, since, last = _SLOT.unpack_from(self._page, 0)
            if first == last:
                return Position(tick, done, since) if first else None
        return None  # written to all the while: the caller falls back on what it knows

    def close(self) -> None:
        self._page.close()
