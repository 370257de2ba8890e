"""Loaded (through PYTHONPATH) only by processes that tests run under libfaketime.

libfaketime 0.9.10 with DONT_FAKE_MONOTONIC=1 breaks clock_nanosleep(CLOCK_MONOTONIC,
TIMER_ABSTIME), which time.sleep uses from Python 3.11 on: every sleep fails with EINVAL
(wolfcw/libfaketime#426). Sleep the same time through a condition wait instead, which
libfaketime leaves alone. Nothing else changes: the wall clock stays faked, the monotonic
clock stays real.
"""

import threading
import time

_wait = threading.Event().wait


def _sleep(seconds: float) -> None:
    if seconds < 0:
        raise ValueError("sleep length must be non-negative")
    _wait(seconds)


time.sleep = _sleep
