"""Logging for a service: one line per event, dated where no journal dates it, repeats
rate-limited.

Where stderr is the journal (systemd's ``$JOURNAL_STREAM`` names stderr's device and inode)
each line starts with ``<N>``, the syslog priority journald reads, and carries no time: the
journal adds its own. Anywhere else (a terminal, a file, a pipe; under systemd too when
stderr was sent elsewhere) each line starts with its ISO time, with the zone, and its level,
so that an incident can be dated from the file alone. A warning that repeats (same logger,
same message template, same arguments but for the measured numbers in them) is let through
once a minute, with a count of what was held back.
"""

from __future__ import annotations

import datetime as dt
import io
import logging
import os
import sys
import threading
import time

_PRIORITY = {logging.DEBUG: 7, logging.INFO: 6, logging.WARNING: 4, logging.ERROR: 3,
             logging.CRITICAL: 2}


class JournalFormatter(logging.Formatter):
    """``<N>name: message``, on one line: journald reads the priority and adds the time."""

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record).replace("\n", " | ")
        level = max((lv for lv in _PRIORITY if lv <= record.levelno), default=logging.DEBUG)
        return f"<{_PRIORITY[level]}>{text}"


class DatedFormatter(logging.Formatter):
    """``2026-11-27T17:42:07.123+01:00 WARNING name: message``, on one line: the local time
    with its zone, as nothing else dates the line."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        moment = dt.datetime.fromtimestamp(record.created, dt.timezone.utc).astimezone()
        return moment.isoformat(timespec="milliseconds")

    def format(self, record: logging.LogRecord) -> str:
        return super().format(record).replace("\n", " | ")


def to_journal(stream, environ=os.environ) -> bool:
    """Whether ``stream`` is systemd's journal stream: ``$JOURNAL_STREAM`` is the device and
    inode of the journal's socket as systemd connected it, inherited by every child whether
    or not its stderr still goes there; only a stream that is that very socket is."""
    given = environ.get("JOURNAL_STREAM", "")
    try:
        device, inode = (int(part) for part in given.split(":"))
        st = os.fstat(stream.fileno())
    except (ValueError, OSError, AttributeError, io.UnsupportedOperation):
        return False
    return (st.st_dev, st.st_ino) == (device, inode)


class RateLimit(logging.Filter):
    """At most one record per ``period`` for each (logger, template, non-float arguments)."""

    def __init__(self, period: float = 60.0, clock=time.monotonic) -> None:
        super().__init__()
        self.period = period
        self.clock = clock
        self._seen: dict[tuple, tuple[float, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        args = record.args if isinstance(record.args, tuple) else ()
        key = (record.name, record.msg, tuple(str(a) for a in args if not isinstance(a, float)))
        now = self.clock()
        last, held = self._seen.get(key, (None, 0))
        if last is not None and now - last < self.period:
            self._seen[key] = (last, held + 1)
            return False
        self._seen[key] = (now, 0)
        if held:
            record.msg = f"{record.msg} ({held} similar messages held back)"
        if len(self._seen) > 10_000:
            self._seen.clear()
        return True


def setup(verbose: bool = False, stream=None) -> None:
    stream = stream or sys.stderr
    handler = logging.StreamHandler(stream)
    if to_journal(stream):
        handler.setFormatter(JournalFormatter("%(name)s: %(message)s"))
    else:
        handler.setFormatter(DatedFormatter())
    handler.addFilter(RateLimit())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    logging.getLogger("apscheduler").setLevel(logging.WARNING)
    # Warnings and uncaught exceptions, of any thread, as log lines with their priority.
    logging.captureWarnings(True)
    sys.excepthook = _uncaught
    threading.excepthook = lambda a: _uncaught(a.exc_type, a.exc_value, a.exc_traceback,
                                               a.thread.name if a.thread else None)


def _uncaught(kind, value, traceback, thread: str | None = None) -> None:
    if issubclass(kind, KeyboardInterrupt):
        sys.__excepthook__(kind, value, traceback)
        return
    where = f" in thread {thread}" if thread else ""
    logging.getLogger("slowdown").critical("uncaught exception%s", where,
                                           exc_info=(kind, value, traceback))
