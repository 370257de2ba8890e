"""Killing a process at a chosen moment of its work."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable


def kill_when(proc: subprocess.Popen, ready: Callable[[], bool], timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    try:
        while not ready():
            assert proc.poll() is None, "prepare finished before it could be interrupted"
            assert time.monotonic() < deadline, "prepare made no progress"
            time.sleep(0.001)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
