"""Logging for a service: one line per event, journald priority prefixes, repeats rate-limited.

Under systemd (``$JOURNAL_STREAM`` set, or stderr not a terminal) each line starts with
``<N>``, the syslog priority journald reads; in a terminal lines carry a time instead.
A warning that repeats (same logger, same message template, same arguments but for the
measured numbers in them) is let through once a minute, with a count of what was held back.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time

_PRIORITY = {logging.DEBUG: 7, logging.INFO: 6, logging.WARNING: 4, logging.ERROR: 3,
             logging.CRITICAL: 2}


class JournalFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record).replace("\n", " | ")
        level = max((lv for lv in _PRIORITY if lv <= record.levelno), default=logging.DEBUG)
        return f"<{_PRIORITY[level]}>{text}"


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
    journal = bool(os.environ.get("JOURNAL_STREAM")) or not stream.isatty()
    if journal:
        handler.setFormatter(JournalFormatter("%(name)s: %(message)s"))
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s",
                                               "%H:%M:%S"))
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
