"""SIGTERM and SIGINT, turned into the service's stop without a lock in the signal handler.

Python runs a signal handler in the main thread, between two of its instructions. Setting a
``threading.Event`` there takes the event's lock, which the main thread may hold at that very
instant, inside the same event's ``wait``: the service then hangs for ever, before its exit
deadline is armed (seen as a service that logged "signal 15: stopping" and never exited).
The handler here only notes the signal and writes a byte to a pipe; the main loop waits on
that pipe, and sets the stop event itself.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import threading

log = logging.getLogger("slowdown.probe.daemon.service")  # said as the service says the rest

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopSignals:
    """The stop signals of the service whose stop event is ``event``: ``install`` them in
    the main thread, ``wait`` in its loop, ``wake`` it from another thread that set the
    event, ``close`` at exit."""

    def __init__(self, event: threading.Event) -> None:
        self.event = event
        self.received: int | None = None  # the signal, as the handler noted it
        self._read: int | None = None  # the pipe (while the loop runs): a byte wakes it
        self._write: int | None = None

    def install(self) -> None:
        self._read, self._write = os.pipe()
        for fd in (self._read, self._write):
            os.set_blocking(fd, False)
        for sig in SIGNALS:
            signal.signal(sig, self._handle)

    def _handle(self, signum: int, _frame: object) -> None:
        self.received = signum  # nothing that takes a lock
        self.wake()

    def wake(self) -> None:
        """A byte to the loop's pipe (none before ``install``; a full pipe has one)."""
        if self._write is not None:
            with contextlib.suppress(OSError):
                os.write(self._write, b"\0")

    def wait(self, timeout: float) -> bool:
        """Whether to stop, after waiting up to ``timeout`` for a signal or a ``wake``."""
        if self._read is None:
            return self.event.wait(timeout)
        idle = not self.event.is_set() and self.received is None
        if idle and select.select([self._read], [], [], timeout)[0]:
            with contextlib.suppress(OSError):
                os.read(self._read, 512)
        if self.received is not None and not self.event.is_set():
            log.info("signal %d: stopping", self.received)
            self.event.set()
        return self.event.is_set()

    def close(self) -> None:
        """The pipe closed (a signal from now on stops nothing more: the service is ending)."""
        write, read, self._write, self._read = self._write, self._read, None, None
        for fd in (write, read):
            if fd is not None:
                os.close(fd)


__all__ = ["StopSignals"]
