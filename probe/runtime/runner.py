"""One target's probing, seen from the service: dispatch ticks, watch ops in flight, survive hangs.

The service's scheduled job calls ``TargetRunner.tick()`` every interval. The call never
blocks: it writes one line to an idle worker's pipe, or counts the tick as skipped when the
previous run is still going. A reader thread per worker turns the worker's answers (one write
per run) into results for the recorder; which op is in flight, and since when, is read from
the page the worker shares (``probes/worker_position.py``). A worker stuck longer than
``abandon_after`` is abandoned: no more ticks go to it, a fresh worker takes over, and the old
one is still listened to, so the op it is stuck in is recorded whole, in the minute it
completes, when the filesystem lets it go: with the wait before its timed call that showed as
the op stuck (the worker's ``shown``), and one that ends before its run began counts that wait
(``_cut``), never an error.
At most ``max_abandoned`` stuck workers may pile up per target; past that, ticks are skipped.
With an ``owner`` (the service), the worker holds the workspace's lock
(``locks/workspace_lock.py``); a replacement is started as the ``successor`` of the stuck one, which
keeps the lock until its call returns. What the worker says of the lock is kept in ``lock_state``;
``held`` (another service probes the workspace) is handed to ``on_held``.
Each op that returns goes to the recorder with the server that served it, as the worker says
(``server``; ``unknown`` when it does not): its per-server record. The waits of skipped ticks
and the age of an op cut off count per op only: no server is known until an op returns.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from slowdown.analysis.store.server_records import UNKNOWN
from slowdown.probe.locks.lock_file import LockHolder
from slowdown.probe.locks.workspace_lock import holder_text, owner_environ
from slowdown.probe.probes import probe_ops
from slowdown.probe.probes.worker_position import Position, Progress
from slowdown.probe.runtime.recorder import Recorder

log = logging.getLogger(__name__)


@dataclass
class InFlight:
    """A run sent to a worker and not ended yet: its tick, when it was sent (monotonic
    seconds), the ticks it made skip (wall time, the op in flight then, its age) and what each
    op of it gave so far (latency or None, failed)."""

    tick: int
    sent: float
    skips: list[tuple[float, str, float]] = field(default_factory=list)
    done: dict[str, tuple[float | None, bool]] = field(default_factory=dict)


def _worker_env() -> dict[str, str]:
    """The service's environment without systemd's notify and watchdog variables: only the
    service speaks for the unit."""
    hidden = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")
    return {k: v for k, v in os.environ.items() if k not in hidden}


class WorkerHandle:
    """One worker process and the thread that reads its answers."""

    def __init__(self, target: str, workspace: Path, on_message: Callable,
                 env: dict[str, str] | None = None, sync: bool = False) -> None:
        self.target = target
        self.progress, fd = Progress.create()
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "slowdown.probe.probes.worker", str(workspace),
                 "--progress-fd", str(fd), *(["--sync"] if sync else [])],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,
                close_fds=True, pass_fds=(fd,),
                start_new_session=True,  # a terminal's Ctrl-C is the service's
                env={**_worker_env(), **(env or {})},
            )
        finally:
            os.close(fd)
        self.pid = self.process.pid
        self.in_flight: InFlight | None = None
        self.abandoned = False
        self._on_message = on_message
        self._reader = threading.Thread(
            target=self._read, name=f"worker-{target}-{self.pid}", daemon=True)
        self._reader.start()

    @property
    def busy(self) -> bool:
        return self.in_flight is not None

    def position(self) -> tuple[str, float] | None:
        """The op in flight and since when (monotonic seconds), or None when idle."""
        flight = self.in_flight
        if flight is None:
            return None
        seen: Position | None = self.progress.get()
        if seen is None or seen.tick != flight.tick:  # the run has not begun
            return probe_ops()[0], flight.sent
        if seen.done > len(probe_ops()):  # the run has ended; its answers are on their way
            return None
        if seen.done == len(probe_ops()):  # every op done, the run not ended (``ending``)
            return probe_ops()[0], seen.since
        return probe_ops()[seen.done], seen.since

    def ending(self) -> bool:
        """Every op of the run in flight has returned and the run has not ended: the worker
        is in what it does after its last op (the md round's status file, closing descriptors
        the filesystem declared dead, looking for a workspace gone). A call hung there keeps
        the next run from starting, as a hung open before the first op does: it shows as the
        next run's first op in flight since the last op returned (``position``), live and in
        the minutes' stuck age, and the worker is abandoned past ``abandon_after``; no op's
        latency takes the wait (``_ended_late``)."""
        flight = self.in_flight
        seen = self.progress.get() if flight is not None else None
        return seen is not None and seen.tick == flight.tick and seen.done == len(probe_ops())

    def send(self, message: dict) -> bool:
        try:
            self.process.stdin.write(json.dumps(message) + "\n")
            self.process.stdin.flush()
            return True
        except (OSError, ValueError):
            return False

    def _read(self) -> None:
        for line in self.process.stdout:
            try:
                message = json.loads(line)
            except ValueError:
                continue
            self._on_message(self, message)
        self._on_message(self, {"exit": True})

    def abandon(self) -> None:
        """Stop sending ticks; the worker finishes its op in flight, skips the rest, exits."""
        self.abandoned = True
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGUSR1)

    def stop(self) -> None:
        """Let an idle worker end by itself (end of input)."""
        with contextlib.suppress(OSError):
            self.process.stdin.close()

    def kill(self) -> None:
        """SIGKILL without waiting: a worker in uninterruptible sleep is reaped later."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)

    def reap(self) -> bool:
        """True once the process has exited (never blocks)."""
        return self.process.poll() is not None


@dataclass
class TargetStatus:
    """What ``slowdown watch`` and the metrics show about a target, live."""

    mode: str | None = None
    last_tick: float | None = None  # wall time of the last dispatched tick
    last_end: float | None = None  # wall time the last complete run ended
    last: dict[str, dict] = field(default_factory=dict)  # op -> {"lat" or "err", "at"}
    ticks: int = 0
    skipped: int = 0
    errors: int = 0
    space: dict | None = None  # the filesystem's free space and inodes, and when seen


class TargetRunner:
    """Dispatches ticks for one target to its worker; never blocks the caller."""

    def __init__(self, name: str, workspace: Path, recorder: Recorder, *,
                 interval: float = 1.0, abandon_after: float = 30.0, max_abandoned: int = 2,
                 wall: Callable[[], float] = time.time, sync: bool = False) -> None:
        self.name = name
        self.sync = sync  # fdatasync in the timed data-write (the target's sync = true)
        self.workspace = workspace
        self.recorder = recorder
        self.interval = interval
        self.abandon_after = abandon_after
        self.max_abandoned = max_abandoned
        self.wall = wall
        self.status = TargetStatus()
        self._lock = threading.Lock()
        self._tick = 0
        self._current: WorkerHandle | None = None
        self._abandoned: list[WorkerHandle] = []
        self._logged_mode = False
        self._closed = False
        # The workspace's lock: set by the service before the first worker starts.
        self.owner: dict | None = None  # host, since, database of the service
        self.on_held: Callable[[TargetRunner], None] | None = None
        self.lock_state: str | None = None  # what the worker last said: ok, wait, held, none
        self.lock_said = threading.Event()
        self.refusal: str | None = None  # the line that says who else probes the workspace
        self._saved = threading.Event()  # the worker answered a save (or is gone)

    # -- the service side --------------------------------------------------------------------

    def tick(self) -> bool:
        """Start one run of the probes; False when it had to be skipped."""
        with self._lock:
            if self._closed:
                return False
            now, wall = time.monotonic(), self.wall()
            self._reap()
            worker = self._current
            if worker is not None and worker.busy:
                op, since = worker.position() or (None, now)
                age = now - since
                if age < self.abandon_after or len(self._abandoned) >= self.max_abandoned:
                    self.status.skipped += 1
                    self.recorder.skipped(self.name, probe_ops(), wall)
                    self._waited(worker.in_flight, wall, op, age, ending=worker.ending())
                    return False
                log.warning("target %s: worker %d stuck in %s for %.0f s; abandoned, starting "
                            "another", self.name, worker.pid, op, age)
                worker.abandon()
                self._abandoned.append(worker)
                worker = self._current = None
            if worker is None:
                worker = self._current = self._new_worker()
            self._tick += 1
            worker.in_flight = InFlight(self._tick, now)
            self.status.ticks += 1
            self.status.last_tick = wall
            if not worker.send({"tick": self._tick, "sent": now}):
                worker.in_flight = None
                self._current = None
                worker.kill()
                self.recorder.skipped(self.name, probe_ops(), wall)
                return False
            return True

    def start(self) -> None:
        """Start the worker now rather than at the first tick: it takes the workspace's lock
        first thing, and the service waits for what it finds."""
        with self._lock:
            if self._current is None and not self._closed:
                self._current = self._new_worker()

    def _new_worker(self) -> WorkerHandle:
        """A worker; with an owner, told whether a stuck one still holds the lock."""
        env = None
        if self.owner is not None:
            env = owner_environ(self.owner["host"], self.owner["since"],
                                self.owner["database"], successor=bool(self._abandoned))
        return WorkerHandle(self.name, self.workspace, self._message, env, sync=self.sync)

    def in_flight(self) -> list[tuple[str, float, int]]:
        """``(op, age seconds, worker pid)`` of every op in flight, current and abandoned."""
        now = time.monotonic()
        flights = []
        with self._lock:
            for handle in [self._current, *self._abandoned]:
                position = handle.position() if handle is not None else None
                if position is not None:
                    flights.append((position[0], now - position[1], handle.pid))
        return flights

    def note_stuck(self, wall: float | None = None, at_end: bool = False) -> None:
        """Record the age of ops in flight longer than the interval (at least once a minute);
        ``at_end``: at the end of what the minute's record covers (the hang not over there)."""
        wall = self.wall() if wall is None else wall
        for op, age, _ in self.in_flight():
            if age > self.interval:
                self.recorder.stuck(self.name, op, age, wall, at_end=at_end)

    def finish_round(self) -> None:
        """A clean stop: ask the worker to end the md round in progress and save the exact
        round, after the run in flight if there is one; `wait_saved` waits for its answer."""
        with self._lock:
            self._saved.clear()
            worker = self._current
            if worker is None or not worker.send({"save": True, "finish": True}):
                self._saved.set()

    def wait_saved(self, timeout: float) -> bool:
        """True once the worker answered the last save (or exited) within `timeout` s."""
        return self._saved.wait(timeout)

    @property
    def abandoned(self) -> int:
        with self._lock:
            return len(self._abandoned)

    def close(self) -> None:
        """Kill every worker without waiting for any (a hung one may never return); an op
        that was stuck in one counts by its age (``_cut``)."""
        with self._lock:
            self._closed = True
            handles = [h for h in [self._current, *self._abandoned] if h is not None]
            for handle in handles:
                self._cut(handle, self.wall())
            self._current = None
            self._abandoned = []
        for handle in handles:
            handle.stop()
            handle.kill()

    # -- the worker side (reader threads) ----------------------------------------------------

    def _message(self, worker: WorkerHandle, message: dict) -> None:
        if "lock" in message:
            self._note_lock(message)
            return
        wall = self.wall()
        with self._lock:
            flight = worker.in_flight
            if "op" in message and flight is not None and message.get("tick") == flight.tick:
                op = message["op"]
                at = message.get("at")
                if isinstance(at, (int, float)):  # when it returned: its answer may be held
                    wall = float(at)
                if message.get("skip"):
                    pass
                elif "err" in message:
                    hung = self._hung(message)
                    self._returned(flight, op, hung, wall, failed=True,
                                   server=_server_of(message))
                    self.status.errors += 1
                    before = self.status.last.get(op) or {}  # failing since: its streak's start
                    since = before.get("since", before.get("at")) if "err" in before else wall
                    self.status.last[op] = {"err": message["err"], "msg": message.get("msg"),
                                            "at": wall, "since": since}
                    self._log_error(op, message, hung)
                else:
                    latency = max(float(message["lat"]), self._shown(message) or 0.0)
                    self._returned(flight, op, latency, wall, server=_server_of(message))
                    self.status.last[op] = {"lat": latency, "at": wall}
            elif message.get("end") and flight is not None and message.get("tick") == flight.tick:
                self._ended_late(worker, message)
                worker.in_flight = None
                self.status.last_end = wall
                self._note_mode(message.get("mode"))
                if isinstance(message.get("space"), dict):
                    self.status.space = {**message["space"], "at": wall}
                if worker.abandoned:
                    worker.stop()  # its late results are in; let it go
            elif message.get("exit"):
                position = worker.position()
                if position is not None and not self._closed and worker.abandoned:
                    log.info("target %s: worker %d, abandoned while stuck before %s, has ended; "
                             "that wait counts as the op's latency", self.name, worker.pid,
                             position[0])
                elif position is not None and not self._closed:
                    log.error("target %s: worker %d exited %s", self.name, worker.pid,
                              "after its run's last op" if worker.ending()
                              else f"during {position[0]}")
                    # Abandoned (told to quit) before its run began, hung in its start (the
                    # workspace's lock, the open): a wait that long, not a failed op.
                    self._cut(worker, wall, failed=not worker.abandoned)
                worker.in_flight = None
                if worker is self._current:
                    self._current = None
                    self._saved.set()
            elif "saved" in message:
                self._saved.set()
                if not message["saved"]:
                    log.warning("target %s: cannot save the md position: %s", self.name,
                                message.get("msg"))

    def _note_lock(self, message: dict) -> None:
        """What a worker found of the workspace's lock (said once per change)."""
        state, note = message.get("lock"), message.get("msg") or ""
        holder = LockHolder.from_dict(message.get("holder"))
        before, self.lock_state = self.lock_state, state
        if state == "held":
            self.refusal = (f"target {self.name}: workspace {self.workspace} is probed by "
                            f"{holder_text(holder)}: one service per workspace; stop that "
                            "service, or give this one another host name")
        elif state == "wait":
            log.warning("target %s: the workspace's lock is %s", self.name, note)
        elif state == "ok" and before == "wait":
            log.info("target %s: the workspace's lock is held again", self.name)
        elif state == "ok" and holder is not None:
            log.debug("target %s: the workspace's lock taken over from %s, which has ended",
                      self.name, holder.describe())
        elif state == "none" and note.startswith("cannot"):
            log.warning("target %s: %s", self.name, note)
        self.lock_said.set()
        if state == "held" and self.on_held is not None:
            self.on_held(self)

    def _note_mode(self, mode: str | None) -> None:
        if mode and mode != self.status.mode:
            self.status.mode = mode
            level = logging.INFO if mode == "direct" else logging.WARNING
            log.log(level, "target %s: data probe in %s mode%s", self.name, mode,
                    "" if mode == "direct" else " (O_DIRECT refused: fadvise and fdatasync)")

    # -- a slow period weighs what it lasted (SPEC section 4) -----------------------------

    def _waited(self, flight: InFlight | None, wall: float, op: str | None, age: float,
                ending: bool = False) -> None:
        """A tick skipped because ``flight`` still runs (``op`` in flight for ``age`` s): the
        wait a user would have had then. Each op of the run counts one more time, by its
        latency in that run, in the minute of the tick; an op that has returned now, the
        others as they return (the one in flight at least at ``age``). The expected-interval
        correction against coordinated omission, as HdrHistogram and wrk2 make it: a
        window's statistics describe the time in it, not only the probes that completed.
        ``ending``: every op has returned and the worker is still at its own work after them
        (``WorkerHandle.ending``): each op counts by its own latency, none by the wait."""
        if flight is None:
            return
        flight.skips.append((wall, "" if ending else op or probe_ops()[0], age))
        for done, (latency, failed) in flight.done.items():
            self.recorder.waited(self.name, done, latency, wall, failed=failed)

    def _ended_late(self, worker: WorkerHandle, message: dict) -> None:
        """A run that ended ``abandon_after`` or more after its last op returned (the end
        line's ``after``): a hang there is over, said in the log (a slow filesystem's shorter
        waits there are not: they would be a line a tick). The wait was shown in flight while
        it lasted (live, in the minutes' stuck age, and by abandoning the worker), but it is
        the probe's own work after its ops (the md round's status file, closing dead
        descriptors), not a user's op: no op's latency takes it."""
        after = message.get("after")
        if isinstance(after, (int, float)) and not isinstance(after, bool) \
                and after >= self.abandon_after:
            log.warning("target %s: worker %d took %.1f s after its run's last op (a call on "
                        "the filesystem hung there)", self.name, worker.pid, after)

    def _returned(self, flight: InFlight, op: str, latency: float | None, wall: float,
                  failed: bool = False, server: str | None = None) -> None:
        """An op of ``flight`` returned: its result (and its server's, when the worker said
        which one served it), and once more for each tick it made skip (``_waited``)."""
        self.recorder.result(self.name, op, latency, wall, failed=failed)
        if server is not None:
            self.recorder.served(self.name, op, server, latency, wall, failed=failed)
        flight.done[op] = (latency, failed)
        for at, stuck_op, age in flight.skips:
            value = latency if latency is None or op != stuck_op else max(latency, age)
            self.recorder.waited(self.name, op, value, at, failed=failed)

    def _cut(self, worker: WorkerHandle, wall: float, failed: bool = False) -> None:
        """The op in flight in ``worker`` will never return (the worker exited, or is killed
        at the stop). One stuck longer than the interval was a wait that long at least: it
        counts by its age (and as an error where the worker died: ``failed``); one cut in a
        quicker moment is left out at a stop and an error otherwise."""
        position, flight = worker.position(), worker.in_flight
        if position is None or flight is None:
            return
        age = time.monotonic() - position[1]
        if worker.ending():  # its ops are in; the wait after them is no op's (``_ended_late``)
            return
        if age > self.interval:
            self._returned(flight, position[0], age, wall, failed=failed)
        elif failed:
            self._returned(flight, position[0], None, wall, failed=True)

    def _hung(self, message: dict) -> float | None:
        """How long a failed op was in flight, when longer than the interval: a hang that
        ended in an error, whose latency is recorded (a quick failure says nothing of how
        slow the filesystem is, and counts as an error only)."""
        lat = message.get("lat")
        lat = float(lat) if isinstance(lat, (int, float)) else 0.0
        lat = max(lat, self._shown(message) or 0.0)
        return lat if lat > self.interval else None

    def _shown(self, message: dict) -> float | None:
        """How long the op was shown in flight, when the worker says it was longer than its
        timed call and that is longer than the interval: a wait before the call (the worker
        stuck in the lock, the open, statvfs; a replacement stuck as it started) shown as the
        op stuck, whose full latency the op then records (SPEC section 4)."""
        shown = message.get("shown")
        if isinstance(shown, (int, float)) and not isinstance(shown, bool) \
                and shown > self.interval:
            return float(shown)
        return None

    def _log_error(self, op: str, message: dict, hung: float | None = None) -> None:
        after = f" after {hung:.1f} s" if hung is not None else ""
        log.warning("target %s: %s failed%s: %s %s", self.name, op, after, message["err"],
                    message.get("msg") or "")

    def _reap(self) -> None:
        """Forget abandoned workers that have exited (called under the lock)."""
        self._abandoned = [h for h in self._abandoned if not h.reap()]


def _server_of(message: dict) -> str:
    """The server a worker's op line names (``unknown`` when it names none)."""
    server = message.get("server")
    return server if isinstance(server, str) and server else UNKNOWN
