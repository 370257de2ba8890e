"""systemd's notify protocol (READY, WATCHDOG, STOPPING, STATUS, EXTEND_TIMEOUT_USEC) without
a library.

A datagram to the socket named by ``$NOTIFY_SOCKET``; silently nothing when it is unset, so
the same code runs under systemd, in a terminal and in tests with a private socket.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from slowdown.analysis.store.schema import Progress

log = logging.getLogger(__name__)


class Notifier:
    def __init__(self, environ: dict[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        address = env.get("NOTIFY_SOCKET", "")
        if address.startswith("@"):  # abstract namespace
            address = "\0" + address[1:]
        self.address = address or None
        self._socket: socket.socket | None = None
        usec = env.get("WATCHDOG_USEC", "")
        pid = env.get("WATCHDOG_PID", "")
        wanted = usec.isdigit() and (not pid or pid == str(os.getpid()))
        self.watchdog_interval = int(usec) / 1e6 if wanted else None

    def send(self, *fields: str) -> bool:
        """Send ``KEY=value`` lines; True when a socket took them."""
        if self.address is None:
            return False
        try:
            if self._socket is None:
                kind = socket.SOCK_DGRAM | socket.SOCK_CLOEXEC
                self._socket = socket.socket(socket.AF_UNIX, kind)
            self._socket.sendto("\n".join(fields).encode(), self.address)
            return True
        except OSError:
            return False

    def ready(self, status: str = "") -> bool:
        return self.send("READY=1", *([f"STATUS={status}"] if status else []))

    def watchdog(self) -> bool:
        return self.send("WATCHDOG=1")

    def stopping(self) -> bool:
        return self.send("STOPPING=1")

    def status(self, text: str) -> bool:
        return self.send(f"STATUS={text}")

    def extend_timeout(self, seconds: float, status: str = "") -> bool:
        """The timeout of the state the unit is in (starting: TimeoutStartSec) runs out no
        sooner than ``seconds`` from now; systemd only ever lengthens it."""
        return self.send(f"EXTEND_TIMEOUT_USEC={int(seconds * 1e6)}",
                         *([f"STATUS={status}"] if status else []))


class MigrationProgress:
    """Keeps systemd's start timeout from killing a migration that moves, and only one that
    moves: each report of ``schema.migrate`` (every few thousand records, and before the
    COMMIT) extends the timeout by ``extend`` seconds and tells how far it is (STATUS).

    At most one message every ``every`` seconds (the reports come ~10 a second); ``extend``
    is 15 of those periods, so a disk many times slower than the one measured still reports
    in time, while a migration stuck on a hung disk stops reporting and the unit's timeout
    ends it ``extend`` seconds later (the transaction rolls back, the file stays as it was).
    The COMMIT reports nothing while it runs: it syncs the WAL, then its checkpoint copies
    the WAL into the database; it gets the time to write twice the WAL at ``slow_write``
    bytes a second, ``extend`` at least (90 days of records: a WAL of ~540 MiB, committed in
    3 to 4 s here, granted ~110 s).
    """

    def __init__(self, notifier: Notifier, every: float = 2.0, extend: float = 30.0,
                 slow_write: float = 10e6, clock: Callable[[], float] = time.monotonic) -> None:
        self.notifier = notifier
        self.every = every
        self.extend = extend
        self.slow_write = slow_write
        self._clock = clock
        self._last: float | None = None
        self._version: int | None = None
        self._started = 0.0

    def __call__(self, progress: Progress) -> None:
        now = self._clock()
        if progress.version != self._version:  # each migration that rewrites records
            self._version, self._started = progress.version, now
            log.info("migrating the database to schema %d: %d records to rewrite",
                     progress.version, progress.total)
        elif not progress.committing and now - self._last < self.every:
            return
        self._last = now
        extend = self.extend
        if progress.committing:
            log.info("migrated %d records in %.1f s; committing %.0f MiB", progress.total,
                     now - self._started, progress.wal_bytes / 2**20)
            where = f"committing, {progress.total:,} records, "
            extend = max(extend, 2 * progress.wal_bytes / self.slow_write)
        else:
            where = f"{progress.percent:.0f} % ({progress.done:,} of {progress.total:,} records, "
        where += f"schema {progress.version - 1} to {progress.version}"
        where += ")" if not progress.committing else ""
        self.notifier.extend_timeout(extend, f"migrating the database: {where}")
