"""The service's stop signals: a SIGTERM that comes at any instant stops it
(runtime/stop_signals.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time

from slowdown.probe.runtime.stop_signals import StopSignals

# A SIGTERM delivered while the main thread holds the stop event's lock, as it does for an
# instant inside the event's own wait: a handler that set the event there waited for that lock
# for ever (the service logged "signal 15: stopping" and never exited).
WHILE_THE_LOCK_IS_HELD = textwrap.dedent("""
    import logging, os, signal, threading
    from slowdown.probe.runtime.stop_signals import StopSignals

    logging.basicConfig(level=logging.INFO)
    event = threading.Event()
    stops = StopSignals(event)
    stops.install()
    with event._cond:  # the lock Event.set takes
        os.kill(os.getpid(), signal.SIGTERM)
        sum(range(1000))  # the handler runs here, between two instructions
    print(stops.wait(5.0), event.is_set(), stops.received)
""")


def test_a_signal_while_the_main_thread_holds_the_events_lock_stops_the_loop():
    done = subprocess.run([sys.executable, "-c", WHILE_THE_LOCK_IS_HELD], capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True", "15"]
    assert "signal 15: stopping" in done.stderr


def test_another_threads_stop_wakes_the_loop_at_once():
    event = threading.Event()
    stops = StopSignals(event)
    stops._read, stops._write = None, None  # as before ``install``: the event's own wait
    threading.Timer(0.1, event.set).start()
    began = time.monotonic()
    assert stops.wait(10.0) and time.monotonic() - began < 5
    event.clear()
    read, write = os.pipe()  # with the pipe, as the service runs: a wake after the event
    stops._read, stops._write = read, write

    def stop() -> None:
        event.set()
        stops.wake()
    threading.Timer(0.1, stop).start()
    began = time.monotonic()
    assert stops.wait(10.0) and time.monotonic() - began < 5
    assert stops.wait(0.05)  # a stop stays a stop
    event.clear()
    began = time.monotonic()
    assert not stops.wait(0.3)  # the wake's byte was read: no stale wake-up of the next wait
    assert time.monotonic() - began >= 0.25
    stops.close()
    assert stops._read is None and stops._write is None
    stops.wake()  # after the end: nothing written anywhere
