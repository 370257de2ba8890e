"""The live state: a small JSON file the service rewrites in place once a second beside its
database (ticks, ops in flight, errors), read by ``slowdown``, ``watch`` and ``alerts``. This
module owns its format, both ways: ``state_of`` and ``LiveFile`` (the service's writer, on a
thread of its own) and ``read_live`` (every reader).

In place, not a new file renamed over the old one: that made ext4 allocate and write a new
block every second, for ever; in place, the page is written back with the rest. The text is
padded with spaces to whole KiB and never shrinks, so no tail of a longer earlier state is left
behind it; a reader that meets a write half done reads again. A file deleted or replaced under
the service (``rm slowdown.db*``) is written anew at its path at the next write; a write that
fails closes it, to be opened again the next time (the volume may come back). A slow volume
holds the writing thread only: a write still going is not queued behind.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from concurrent import futures
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC


class LiveFile:
    """Writes the state ``make()`` returns to ``path``, in place."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None
        self._size = 0
        self._thread = futures.ThreadPoolExecutor(1, thread_name_prefix="live-state")
        self._pending: futures.Future | None = None

    def hand(self, make: Callable[[], dict]) -> None:
        """Write ``make()`` on the live file's thread, unless the last write is still going."""
        if self._pending is None or self._pending.done():
            self._pending = self._thread.submit(lambda: self.write(make()))

    def write(self, state: dict) -> None:
        """Write ``state`` now, in the calling thread; a failure is logged (debug) only."""
        try:
            self._write(json.dumps(state).encode())
        except OSError as exc:
            log.debug("cannot publish the live state: %s", exc)
            self._close()

    def close(self, last: Callable[[], dict]) -> None:
        """Write the ``last`` state (unless a write is stuck) and let go of the file."""
        self._thread.shutdown(wait=False)
        if self._pending is None or self._pending.done():
            self.write(last())
            self._close()

    def _write(self, data: bytes) -> None:
        if self._fd is not None and not same_file(self._fd, self.path):
            self._close()
        if self._fd is None:
            self._fd = os.open(self.path, _FLAGS, 0o666)
            os.ftruncate(self._fd, 0)
            self._size = 0
        self._size = max(self._size, -(-len(data) // 1024) * 1024)
        os.pwrite(self._fd, data.ljust(self._size), 0)

    def _close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError as exc:
                log.debug("closing the live file: %s", exc)


def same_file(fd: int, path: os.PathLike | str) -> bool:
    """Whether the file open as ``fd`` is the one at ``path``."""
    try:
        mine, there = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (mine.st_dev, mine.st_ino) == (there.st_dev, there.st_ino)


def state_of(service: Any, now: float, stopped: bool = False) -> dict:
    """The live state of a running service (``slowdown.probe.daemon.service.Service``, read
    here by its attributes only) at ``now``: who and where, the records' way to the database
    (``store/landing.py``), and per target its ticks, errors and ops in flight. ``stopped``:
    the last one, written as the service stops (readers say so at once). Read by
    ``read_live``, through ``analysis/view/reader.py``."""
    return {
        **({"stopped": now} if stopped else {}),
        "host": service.config.host,
        "pid": os.getpid(),
        "started": service.started,
        "updated": now,
        "interval": service.config.interval,
        "database": str(service.config.database),
        "pending_minutes": service.recorder.pending_minutes(),
        "records": service.landing.json(),
        "targets": {
            r.name: {
                "mode": r.status.mode,
                "last_tick": r.status.last_tick,
                "ticks": r.status.ticks,
                "skipped": r.status.skipped,
                "errors": r.status.errors,
                "abandoned_workers": r.abandoned,
                "in_flight": [{"op": op, "age": age, "pid": pid}
                              for op, age, pid in r.in_flight()],
                "last": r.status.last,
                "space": r.status.space,
            }
            for r in service.runners
        },
    }


def probes_state(runners: Any) -> dict:
    """What readers of the database (without the live state: a published copy, a later
    look) learn of each target's probing at every minute's write: its filesystem's free
    space and inodes, and each op's last error (``{"err", "msg", "at"}``)."""
    return {r.name: {"space": r.status.space,
                     "errors": {op: v for op, v in r.status.last.items() if "err" in v}}
            for r in runners}


def live_path(database: Path) -> Path:
    """Where the live state of the service writing ``database`` is: beside it."""
    return database.with_name(database.name + ".live.json")


def read_live(database: Path, tries: int = 5) -> dict | None:
    """The live state the service publishes beside ``database``, or None. The service
    overwrites it in place once a second: a read that meets a write half done reads again."""
    path = live_path(database)
    for attempt in range(tries):
        try:
            return json.loads(path.read_bytes())
        except OSError:
            return None
        except ValueError:
            if attempt + 1 < tries:
                time.sleep(0.01)
    return None
