"""The probing service: ticks every interval, one minute flush, live state, systemd notify.

Threads and who may block:
- APScheduler's scheduler thread fires the jobs and runs the tick job itself: it only
  dispatches (never blocks), and handing it to a pool thread would put a second thread
  wake-up on the path of every tick (tick start delay: docs/BENCHMARKS-probe.md);
- the minute job writes the database (may be slow on a sick volume: it blocks nothing else);
- the main thread sends the systemd watchdog, watches the clock and the scheduler, never a
  probe; at each beat, half an interval after a tick, it hands the live state (a small JSON
  file beside the database) to a thread of its own to write, unless the last write is still
  going (a hung volume there holds that thread only). The beat is a wake-up the main thread
  has anyway: the live state costs no wake-up of the scheduler's thread.

Before anything is written the service claims what it writes: its database (on a local
filesystem, one writer: ``locks/database_lock.py``) and, through each target's worker, the
target's workspace (one service per workspace: ``locks/workspace_lock.py``); refused, it exits 2
with one line naming why or who.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import threading
import time
import zlib
from collections.abc import Callable

from apscheduler.executors.debug import DebugExecutor
from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.interval import IntervalTrigger

from slowdown.analysis.alerts import ServiceAlerts
from slowdown.analysis.config import Config
from slowdown.analysis.stats import baseline
from slowdown.analysis.store import Store, retention
from slowdown.analysis.store.landing import PROBES, Landing
from slowdown.analysis.store.landing import STATE_KEY as LANDING
from slowdown.analysis.store.live import LiveFile, live_path, probes_state, state_of
from slowdown.analysis.store.records import MINUTE, minute_of
from slowdown.probe.exporters.jobs import ExportJobs
from slowdown.probe.locks.database_lock import (
    Held,
    Refused,
    claim_database,
    damaged,
    lock_database,
    release,
)
from slowdown.probe.runtime.node_context import NodeSampler
from slowdown.probe.runtime.recorder import CLOCK_STEP, Recorder
from slowdown.probe.runtime.runner import TargetRunner
from slowdown.probe.runtime.stop_signals import StopSignals
from slowdown.probe.runtime.systemd_notify import MigrationProgress, Notifier

log = logging.getLogger(__name__)

EXIT_DEADLINE = 9.0  # seconds after SIGTERM before the process exits whatever is stuck
FINISH_WAIT = 3.0  # seconds the stop waits for the workers to end their md round
EXIT_DATABASE = 2  # the database file is damaged, foreign or newer: not touched, not started
LOCK_WAIT = 5.0  # seconds the start waits for the workers to lock their workspaces


def phase_of(host: str, interval: float) -> float:
    """A fixed per-host offset in [0, interval): a thousand nodes do not all probe at :00.000."""
    return (zlib.crc32(host.encode()) % 1000) / 1000.0 * interval


class Service:
    def __init__(self, config: Config, *, duration: float | None = None,
                 notifier: Notifier | None = None) -> None:
        self.config = config
        self.duration = duration
        self.notifier = notifier or Notifier()
        self.recorder = Recorder(config.host, config.scale, database=str(config.database))
        self.runners = [
            TargetRunner(t.name, config.workspace(t), self.recorder, interval=config.interval,
                         abandon_after=config.abandon_after, sync=t.sync)
            for t in config.targets
        ]
        self.node = NodeSampler(config.host)
        self.stop_event = threading.Event()
        self._stops = StopSignals(self.stop_event)  # SIGTERM, SIGINT: runtime/stop_signals.py
        self.phase = phase_of(config.host, config.interval)
        self.live_file = live_path(config.database)
        self.started = time.time()
        self.jitter: list[float] = []  # tick start delay behind schedule, seconds
        self._tick_mono = time.monotonic()
        self._clock_offset = self.started - self._tick_mono  # wall minus monotonic
        self._store: Store | None = None
        self.landing = Landing(str(config.database))  # do the records reach the file?
        self._flush_lock = threading.Lock()
        self._last_rollup_hour: int | None = None
        self.live = LiveFile(self.live_file)
        self._db_lock = None  # the writer's lock (locks/database_lock.py), held while running
        self._refusal: str | None = None  # another service probes one of the workspaces
        self.alerts: ServiceAlerts | None = None  # rules evaluated after each minute flush
        self.metrics = None  # the Prometheus endpoint, only when configured
        if config.metrics is not None:
            from slowdown.probe.exporters.metrics import ServiceMetrics

            self.metrics = ServiceMetrics(config, self.recorder, self.runners, self.started)
        self.exports = ExportJobs(config, self.metrics)  # published copy, metrics textfile
        self.scheduler = BackgroundScheduler(
            timezone=dt.timezone.utc,
            # "direct": run in the scheduler thread itself (the tick job only)
            executors={"default": ThreadPoolExecutor(4), "direct": DebugExecutor()},
            job_defaults={"coalesce": True, "max_instances": 1,
                          "misfire_grace_time": max(1, int(config.interval))},
        )

    # -- jobs --------------------------------------------------------------------------------

    def _first_tick(self) -> dt.datetime:
        now = time.time()
        first = (now // self.config.interval + 1) * self.config.interval + self.phase
        return dt.datetime.fromtimestamp(first, dt.timezone.utc)

    def tick(self) -> None:
        now = time.time()
        interval = self.config.interval
        late = (now - self.phase) % interval
        self.jitter.append(late if late < interval / 2 else late - interval)
        if len(self.jitter) > 100_000:
            del self.jitter[:50_000]
        self._tick_mono = time.monotonic()
        for runner in self.runners:
            runner.note_stuck(now)  # memory only: what the last tick left running
        for runner in self.runners:
            runner.tick()
        if self.metrics is not None:
            self.metrics.tick(now, self.jitter[-1])

    def store(self, migration_progress: MigrationProgress | None = None) -> Store:
        if self._store is None:
            if self._db_lock is None:  # released with a failed connection: lock again first
                self._db_lock = self._lock_again()
            self._store = Store(self.config.database, check_same_thread=False,
                                migration_progress=migration_progress)
        return self._store

    def flush(self, everything: bool = False) -> bool:
        """Write every ended minute (or everything, at exit) in one transaction, and see that
        it landed in the file at the database's path (``store/landing.py``)."""
        with self._flush_lock:
            now = time.time()
            minute = minute_of(now)
            for runner in self.runners:  # in flight at the record's end (at exit: now): stuck
                runner.note_stuck(now if everything else minute - 0.001, at_end=True)
            # The node sample covers the time since the previous one: the minute that just
            # ended, or at exit the current, partial minute.
            self.recorder.node(self.node.sample(minute if everything else minute - MINUTE))
            ok, again = self._write(now, everything)
            if again or (not ok and everything and self.recorder.not_landed is not None):
                ok, _ = self._write(now, everything)  # into the file at the path now
            if ok:
                self.landing.landed(now)
                self._check_lock()
                if self._store is not None:  # a cp of the file alone holds every minute
                    self._store.checkpoint()
            if ok and not everything and minute // 3600 != self._last_rollup_hour:
                self._last_rollup_hour = minute // 3600
                self._hourly(now)
        if ok and not everything and self.alerts is not None:
            try:
                self.alerts.evaluate(now, self.live_stuck())
            except Exception as exc:
                log.error("alert evaluation failed: %s", exc)
        if self.metrics is not None:  # outside the lock: reads the database, writes nothing
            self.metrics.flushed(ok, now, everything)
        return ok

    def _write(self, now: float, everything: bool) -> tuple[bool, bool]:
        """One write: (landed, write again at once). On failure the database and its lock
        are let go, to be opened at the path again: at once when the write committed into a
        file no longer there (what it wrote checkpointed into that file first, moved away),
        once this process's other connections to it have closed."""
        landing = self.landing.closed(now)  # as it is once this write lands
        state = {PROBES: probes_state(self.runners),
                 **({LANDING: landing.json()} if landing.episodes else {})}
        ok = self.recorder.flush(self.store, now, everything=everything, state=state)
        if ok:
            return True, False
        moved = self.recorder.not_landed
        self.landing.failed(now, moved or self.recorder.failure or "cannot write",
                            moved is not None)
        store, self._store = self._store, None
        try:
            if store is not None and moved is not None and not store.files.same_database():
                store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # into the file moved
            if store is not None:
                store.close()
        except Exception as exc:
            log.debug("closing the failed database connection: %s", exc)
        release(self._db_lock)  # with the connection: nothing stays open there
        self._db_lock = None
        if moved is None:
            return False, False
        if self.metrics is not None:
            self.metrics.drop_reader()  # it reads the file at the path from now on
        # Every connection of this process to the old file closed first: SQLite shares what
        # it keeps of a file (its -wal, -shm) between a process's connections.
        return False, self.alerts is None or self.alerts.dispatcher.release_database(2.0)

    def _count_kept(self, ok: bool) -> str:
        """The stop's count: this run's minute records in the file at the path (counted
        there, not by what was sent), and what never reached it."""
        where, pending = self.config.database, self.recorder.pending_minutes()
        lost = (f"; {pending} minute(s) of records never reached it ({self.landing.reason})"
                if not ok and pending else "")
        if self._store is None:
            return f"no file open at {where} at the end{lost}"
        try:
            count = self._store.minute_records(self.config.host, minute_of(self.started))
        except Exception as exc:
            return f"cannot count the records in {where}: {exc}{lost}"
        return f"{count} minute records of this run in {where}{lost}"

    def _check_lock(self) -> None:
        """A lock file deleted under the service (``rm slowdown.db*``) would let a second
        service start: taken again at its path (held by another by then: stop, exit 2)."""
        if self._db_lock is not None and not self._db_lock.still_here():
            log.error("the lock file of %s was deleted or replaced under the service; taking "
                      "it again", self.config.database)
            release(self._db_lock)
            self._db_lock = None
            try:
                self._db_lock = self._lock_again()
            except Refused as exc:  # held by another: it stops; else the next write tries
                log.error("%s", exc)

    def live_stuck(self) -> dict[tuple[str, str], float]:
        """Longest age per (target, op) of ops in flight longer than the interval."""
        stuck: dict[tuple[str, str], float] = {}
        for r in self.runners:
            for op, age, _ in r.in_flight():
                if age > self.config.interval:
                    stuck[(r.name, op)] = max(stuck.get((r.name, op), 0.0), age)
        return stuck

    def _hourly(self, now: float) -> None:
        """Rollup past the retention, and the baselines that are due (monthly, initial)."""
        try:
            moved = self.store().rollup(int(now - self.config.retention))
            if moved:
                log.info("merged %d minute records older than the retention into hours", moved)
            keep = self.config.keep
            removed = retention.prune(self.store(), now, retention.Kept(
                keep.node, keep.alert_log, keep.sent_alerts, keep.hours))
            for table, n in sorted(removed.items()):
                if n:
                    log.info("removed %d rows of %s older than their retention ([keep])", n,
                             table)
            made = baseline.maintain(self.store(), now, self.config.baseline.provisional_after,
                                     self.config.statistics, self.config.baseline.tzinfo(),
                                     self.config.baseline.weekly_zone())
            for reason in sorted({b.reason for b in made}):
                log.info("new %s baselines for %d target/op pairs", reason,
                         len({(b.target, b.op) for b in made if b.reason == reason}))
        except Exception as exc:
            log.error("hourly maintenance failed: %s", exc)

    def tick_delays(self) -> dict[str, float]:
        """How late ticks started behind their schedule: median, p99, max (seconds)."""
        delays = sorted(self.jitter)
        if not delays:
            return {}
        at = lambda q: delays[min(len(delays) - 1, int(q * len(delays)))]  # noqa: E731
        return {"ticks": len(delays), "p50": at(0.5), "p99": at(0.99), "max": delays[-1]}

    def live_state(self, now: float | None = None, stopped: bool = False) -> dict:
        """The live state now (``state_of``, in ``analysis/store/live.py`` with its reader);
        ``stopped``: the last one."""
        return state_of(self, time.time() if now is None else now, stopped)

    # -- lifecycle ---------------------------------------------------------------------------

    def _claim(self) -> int | None:
        """Before anything is written: the database's place and its writer's lock, then each
        workspace's lock, taken by the target's worker (started now for that; a hung target
        is not waited for beyond LOCK_WAIT). The exit status when refused, else None."""
        try:
            self._db_lock = claim_database(self.config, self.started)
        except Refused as exc:
            log.error("%s", exc)
            return exc.code
        owner = {"host": self.config.host, "since": self.started,
                 "database": str(self.config.database)}
        for runner in self.runners:
            runner.owner, runner.on_held = owner, self._workspace_held
            runner.start()
        deadline = time.monotonic() + LOCK_WAIT
        for runner in self.runners:
            if self._refusal is None:
                runner.lock_said.wait(max(0.0, deadline - time.monotonic()))
        if self._refusal is None:
            return None
        self._unclaim()
        return EXIT_DATABASE

    def _unclaim(self) -> None:
        """Not starting after all: end the workers (their workspace locks go with them) and
        release the database."""
        for runner in self.runners:
            runner.close()
        release(self._db_lock)
        self._db_lock = None

    def _workspace_held(self, runner: TargetRunner) -> None:
        """A worker found its workspace probed by another service: stop, exit 2 (said once)."""
        self._stop_refused(runner.refusal or "")

    def _stop_refused(self, text: str) -> None:
        if self._refusal is None:
            self._refusal = text
            log.error("%s", text)
        self.stop_event.set()
        self._stops.wake()

    def _lock_again(self):
        """The database's lock, taken again after the volume failed: held by another service
        meanwhile, this one stops (exit 2); any other failure is the volume's (buffered on)."""
        try:
            return lock_database(self.config.database, self.config.host, self.started)
        except Held as exc:
            self._stop_refused(str(exc))
            raise

    def run(self) -> int:
        cfg = self.config
        refused = self._claim()
        if refused is not None:
            return refused
        try:  # early, so readers find the file; if it fails, minutes are buffered
            # A long migration extends systemd's start timeout as it goes
            # (runtime/systemd_notify.py).
            self.store(MigrationProgress(self.notifier))
        except Exception as exc:
            if damaged(exc):  # writing on would overwrite what is there: refuse to start
                log.error("%s; not starting (move the file away or set another database)", exc)
                self._unclaim()
                return EXIT_DATABASE
            log.error("cannot open the database %s: %s", cfg.database, exc)
            release(self._db_lock)  # taken again when the database opens
            self._db_lock = None
        self._tick_mono = time.monotonic()  # a long migration is not a scheduler that stalled
        if cfg.alerts:  # its own connections: never inside the flush's transactions
            self.alerts = ServiceAlerts(cfg, lambda: Store(cfg.database, check_same_thread=False))
        self._stops.install()
        if self.metrics is not None:
            self.metrics.start()
        self.scheduler.add_job(
            self.tick, IntervalTrigger(seconds=cfg.interval, start_date=self._first_tick()),
            id="tick", name="tick", executor="direct")
        # At the minute's first instant: a crash loses the minute in progress, not the one
        # before it as well (the recorder files a result under the minute it completed in).
        self.scheduler.add_job(self.flush, "cron", second=0, id="flush", name="minute flush")
        self.exports.add_jobs(self.scheduler, time.time())
        self.scheduler.start()
        log.info("probing %d target(s) every %gs (phase %.3fs) into %s",
                 len(self.runners), cfg.interval, self.phase, cfg.database)
        self.notifier.ready(f"probing {', '.join(r.name for r in self.runners)}")
        deadline = None if self.duration is None else time.monotonic() + self.duration
        beat = min(1.0, cfg.interval, (self.notifier.watchdog_interval or 2.0) / 2)
        while not self._stops.wait(self._until_beat(beat)):
            self.notifier.watchdog()
            self._check_clock()
            self._watch_scheduler()
            self._hand_live_state()
            if deadline is not None and time.monotonic() >= deadline:
                break
        return self.shutdown()

    def _until_beat(self, beat: float) -> float:
        """Seconds to the next beat: every ``beat`` seconds, on the moments half an interval
        after a tick (the live state's moments)."""
        interval = self.config.interval
        offset = (time.time() - self.phase - interval / 2) % interval
        return beat - offset % beat or beat

    def _hand_live_state(self) -> None:
        if not self.jitter:
            return  # no tick yet: the live state appears with the first
        self.live.hand(self.live_state)

    def _watch_scheduler(self) -> None:
        """A wall-clock step can leave the scheduler waiting for a time long gone or far off."""
        if time.monotonic() - self._tick_mono > 5 * self.config.interval + 5:
            log.warning("no tick for %.0f s (clock step?); rescheduling",
                        time.monotonic() - self._tick_mono)
            self._tick_mono = time.monotonic()
            self._reschedule()

    def _check_clock(self) -> None:
        """Notice a step of the wall clock (the monotonic clock never steps) within a beat.

        Back: the time up to where the clock was is closed, so that the time lived again is
        not added to minutes already measured; forward: nothing to close (the minutes skipped
        had no ticks). Either way the jobs are put on the new time at once, instead of waiting
        for a moment an hour away.
        """
        wall, mono = time.time(), time.monotonic()
        step = (wall - mono) - self._clock_offset
        if abs(step) < CLOCK_STEP:
            return
        before = mono + self._clock_offset  # where the wall clock would be without the step
        self._clock_offset = wall - mono
        if step < 0:  # closed up to the furthest the clock has been (an earlier step's too)
            self.recorder.close_before(before)
        log.warning("wall clock stepped %s by %.1f s, to %s; minutes are taken by the new "
                    "time%s", "back" if step < 0 else "forward", abs(step), _utc(wall),
                    f"; nothing is recorded before {_utc(self.recorder.floor)} again"
                    if step < 0 else "")
        self._tick_mono = mono
        self._reschedule()

    def _reschedule(self) -> None:
        """Put the tick and flush jobs on the wall clock as it is now."""
        first = self._first_tick()
        interval = self.config.interval
        self.scheduler.reschedule_job(
            "tick", trigger=IntervalTrigger(seconds=interval, start_date=first))
        self.scheduler.reschedule_job("flush", trigger="cron", second=0)
        self.exports.reschedule(self.scheduler, time.time())

    def shutdown(self) -> int:
        """Flush and exit within seconds even while a probe hangs."""
        self.notifier.stopping()
        killer = threading.Timer(EXIT_DEADLINE, _exit_now)
        killer.daemon = True
        killer.start()
        self.scheduler.shutdown(wait=False)
        for runner in self.runners:
            runner.note_stuck()
            runner.finish_round()
        # Each worker ends its md round and saves it (md-workbench continues from the exact
        # round); one stuck in a hung call is killed as it is, and the round it left is
        # repaired at the next start (probes/md_resume.py).
        finish_by = time.monotonic() + FINISH_WAIT
        for runner in self.runners:
            runner.wait_saved(max(0.0, finish_by - time.monotonic()))
        for runner in self.runners:  # still in flight, never recorded: the last record ends
            runner.note_stuck(at_end=True)  # with it stuck, so windows say so
            runner.close()
        ok = self.flush(everything=True)
        if self.alerts is not None:
            self.alerts.close(2.0)
        self.live.close(lambda: self.live_state(time.time(), stopped=True))
        kept = self._count_kept(ok)
        if self._store is not None:
            self._store.close()
        release(self._db_lock)
        self._db_lock = None
        self.exports.stop()
        if self.metrics is not None:
            self.metrics.stop()
        killer.cancel()
        self._stops.close()
        delays = self.tick_delays()
        if delays:
            log.info("tick start delay over %d ticks: median %.2f ms, p99 %.2f ms, max %.2f ms",
                     delays["ticks"], delays["p50"] * 1e3, delays["p99"] * 1e3,
                     delays["max"] * 1e3)
        log.log(logging.INFO if ok else logging.ERROR, "stopped; %s", kept)
        if self._refusal is not None:
            return EXIT_DATABASE
        return 0 if ok else 1


def _utc(wall: float) -> str:
    return dt.datetime.fromtimestamp(wall, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _exit_now() -> None:
    log.error("exit deadline passed; leaving without waiting")
    logging.shutdown()
    os._exit(1)


def run_service(config: Config, duration: float | None = None,
                notifier_factory: Callable[[], Notifier] = Notifier) -> int:
    return Service(config, duration=duration, notifier=notifier_factory()).run()
