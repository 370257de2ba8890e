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
filesystem, one writer: ``database_claim.py``) and, through each target's worker, the
target's workspace (one service per workspace: ``workspace_lock.py``); refused, it exits 2
with one line naming why or who.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import sqlite3
import threading
import time
import zlib
from collections.abc import Callable
from concurrent import futures

from apscheduler.executors.debug import DebugExecutor
from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.interval import IntervalTrigger

from slowdown.analysis.alerts import ServiceAlerts
from slowdown.analysis.config import Config
from slowdown.analysis.stats import baseline
from slowdown.analysis.store import Store, retention, schema
from slowdown.analysis.store.live import live_path
from slowdown.analysis.store.records import MINUTE, minute_of
from slowdown.probe.database_claim import Held, Refused, claim_database, lock_database, release
from slowdown.probe.exports import Exports
from slowdown.probe.node import NodeSampler
from slowdown.probe.notify import MigrationProgress, Notifier
from slowdown.probe.recorder import CLOCK_STEP, Recorder
from slowdown.probe.runner import TargetRunner
from slowdown.probe.stop_signals import StopSignals

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
        self._stops = StopSignals(self.stop_event)  # SIGTERM, SIGINT: stop_signals.py
        self.phase = phase_of(config.host, config.interval)
        self.live_file = live_path(config.database)
        self.started = time.time()
        self.jitter: list[float] = []  # tick start delay behind schedule, seconds
        self._tick_mono = time.monotonic()
        self._clock_offset = self.started - self._tick_mono  # wall minus monotonic
        self._store: Store | None = None
        self._flush_lock = threading.Lock()
        self._last_rollup_hour: int | None = None
        self._live_writer = futures.ThreadPoolExecutor(1, thread_name_prefix="live-state")
        self._live_write: futures.Future | None = None
        self._live_fd: int | None = None  # the live file, open for writing in place
        self._live_size = 0
        self._db_lock = None  # the writer's lock (database_claim.py), held while running
        self._refusal: str | None = None  # another service probes one of the workspaces
        self.alerts: ServiceAlerts | None = None  # rules evaluated after each minute flush
        self.metrics = None  # the Prometheus endpoint, only when configured
        if config.metrics is not None:
            from slowdown.probe.metrics import ServiceMetrics

            self.metrics = ServiceMetrics(config, self.recorder, self.runners, self.started)
        self.exports = Exports(config, self.metrics)  # published copy, metrics textfile
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
        """Write every ended minute (or everything, at exit) in one transaction."""
        with self._flush_lock:
            now = time.time()
            minute = minute_of(now)
            for runner in self.runners:  # in flight at the record's end (at exit: now): stuck
                runner.note_stuck(now if everything else minute - 0.001, at_end=True)
            # The node sample covers the time since the previous one: the minute that just
            # ended, or at exit the current, partial minute.
            self.recorder.node(self.node.sample(minute if everything else minute - MINUTE))
            ok = self.recorder.flush(self.store, now, everything=everything)
            if not ok:  # reopen next time: the volume may come back
                store, self._store = self._store, None
                try:
                    if store is not None:
                        store.close()
                except Exception as exc:
                    log.debug("closing the failed database connection: %s", exc)
                release(self._db_lock)  # with the connection: nothing stays open there
                self._db_lock = None
            elif minute // 3600 != self._last_rollup_hour:
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
                                     self.config.statistics, self.config.baseline.tzinfo())
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

    def publish_live(self, now: float | None = None, stopped: bool = False) -> None:
        """The live state, for ``slowdown watch``: rewritten in place, at most a second old.

        Written half an interval after each tick, on a thread of its own: a slow volume under
        the live file never delays a tick nor the watchdog, and what it shows in flight has
        been running for half an interval.
        """
        now = time.time() if now is None else now
        state = {
            **({"stopped": now} if stopped else {}),  # the last one: readers say so at once
            "host": self.config.host,
            "pid": os.getpid(),
            "started": self.started,
            "updated": now,
            "interval": self.config.interval,
            "database": str(self.config.database),
            "pending_minutes": self.recorder.pending_minutes(),
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
                }
                for r in self.runners
            },
        }
        try:
            self._write_live(json.dumps(state).encode())
        except OSError as exc:
            log.debug("cannot publish the live state: %s", exc)
            self._close_live()  # opened again next time: the volume may come back

    def _write_live(self, data: bytes) -> None:
        """Overwrite the live file in place, in one write.

        A new file renamed over the old one every second made ext4 allocate and write a new
        block each time (a disk write a second, for ever); in place, the page is written back
        with the rest. The text is padded with spaces to whole KiB and never shrinks, so no
        tail of a longer earlier state is left behind it; a reader that meets a write half
        done reads again (``analysis/store/live.py``).
        """
        if self._live_fd is None:
            self._live_fd = os.open(self.live_file, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW
                                    | os.O_CLOEXEC, 0o666)
            os.ftruncate(self._live_fd, 0)
            self._live_size = 0
        self._live_size = max(self._live_size, -(-len(data) // 1024) * 1024)
        os.pwrite(self._live_fd, data.ljust(self._live_size), 0)

    def _close_live(self) -> None:
        fd, self._live_fd = self._live_fd, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError as exc:
                log.debug("closing the live file: %s", exc)

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
            # A long migration extends systemd's start timeout as it goes (notify.py).
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
        if self._live_write is None or self._live_write.done():
            self._live_write = self._live_writer.submit(self.publish_live)

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
        log.warning("wall clock stepped %s by %.1f s, to %s; minutes are taken by the new "
                    "time%s", "back" if step < 0 else "forward", abs(step), _utc(wall),
                    f"; nothing is recorded before {_utc(before)} again" if step < 0 else "")
        if step < 0:
            self.recorder.close_before(before)
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
        # repaired at the next start (md_resume.py).
        finish_by = time.monotonic() + FINISH_WAIT
        for runner in self.runners:
            runner.wait_saved(max(0.0, finish_by - time.monotonic()))
        for runner in self.runners:  # still in flight, never recorded: the last record ends
            runner.note_stuck(at_end=True)  # with it stuck, so windows say so
            runner.close()
        ok = self.flush(everything=True)
        if self.alerts is not None:
            self.alerts.close(2.0)
        self._live_writer.shutdown(wait=False)
        if self._live_write is None or self._live_write.done():
            self.publish_live(time.time(), stopped=True)
            self._close_live()
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
        log.info("stopped; %d records written", self.recorder.written)
        if self._refusal is not None:
            return EXIT_DATABASE
        return 0 if ok else 1


def _utc(wall: float) -> str:
    return dt.datetime.fromtimestamp(wall, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def damaged(exc: BaseException) -> bool:
    """True when opening the database failed because of the file itself (damaged, foreign,
    from a newer slowdown), not because of its volume (full, read-only, I/O errors: SQLite
    reports those as OperationalError, and the service buffers until they pass)."""
    cause = exc.__cause__ or exc.__context__
    if isinstance(cause, schema.SchemaError):
        return True
    return isinstance(cause, sqlite3.DatabaseError) and not isinstance(
        cause, sqlite3.OperationalError)


def _exit_now() -> None:
    log.error("exit deadline passed; leaving without waiting")
    logging.shutdown()
    os._exit(1)


def run_service(config: Config, duration: float | None = None,
                notifier_factory: Callable[[], Notifier] = Notifier) -> int:
    return Service(config, duration=duration, notifier=notifier_factory()).run()
