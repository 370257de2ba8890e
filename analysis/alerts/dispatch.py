"""The dispatcher: delivers the outbox without ever blocking the service.

One thread (``slowdown-alerts``) reads due rows from ``alert_outbox`` and starts each
delivery in a short-lived daemon thread of its own, at most :data:`MAX_RUNNING` at a time,
so a receiver that hangs delays nobody else: not the flush, not the next evaluation, not
the other actions. Every attempt is written to ``alert_log``.

- Each action has its own timeout (the command's process group is killed at it); an
  attempt still running :data:`GRACE` seconds after its timeout is recorded as failed and
  abandoned.
- Webhook and e-mail attempts that may succeed later (timeouts, refused connections, 5xx,
  429) are retried after :data:`BACKOFF` (or the receiver's Retry-After, within bounds);
  then the message is given up and logged as such. A command runs once: it may have done
  its work before failing.
- Messages of one (rule, subject, action) go out in order: a resolve never overtakes its
  firing message that is still being retried.
- A claimed row carries a lease (its timeout plus the grace); a process that dies in the
  middle of an attempt leaves a lease that runs out, and the next dispatcher (after a
  restart, or ``slowdown alerts --evaluate``) delivers the message again. At shutdown,
  attempts that do not finish in time are released for the next start, the same way.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import queue
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from slowdown.analysis.alerts.actions import ProcessGroups, Result, deliver, describe
from slowdown.analysis.alerts.notification import Notification
from slowdown.analysis.alerts.state import log_attempt
from slowdown.analysis.config import ActionConfig, AlertRule, Config
from slowdown.analysis.store import Store, StoreError

log = logging.getLogger(__name__)

BACKOFF = (10.0, 30.0, 90.0, 270.0, 810.0)  # seconds before the 2nd, 3rd, ... attempt
GRACE = 5.0  # seconds past an action's timeout before its attempt is abandoned
MAX_RUNNING = 4  # deliveries at once
IDLE_WAKE = 60.0  # look at the outbox at least this often
REOPEN_AFTER = 10.0  # seconds before trying a database that failed again

StoreFactory = Callable[[], Store]

# An outbox row waits for the older open rows of its (rule, subject, action).
_FIRST_IN_LINE = ("NOT EXISTS (SELECT 1 FROM alert_outbox p WHERE p.done_at IS NULL "
                  "AND p.rule = o.rule AND p.subject = o.subject AND p.action = o.action "
                  "AND p.id < o.id)")


@dataclass
class _Row:
    id: int
    rule: str
    subject: str
    event: str
    action: int
    type: str
    message: str
    attempts: int


@dataclass
class _Attempt:
    row: _Row
    label: str
    deadline: float
    token: int


def max_attempts(action_type: str, backoff: tuple[float, ...]) -> int:
    return 1 if action_type == "command" else len(backoff) + 1


def find_action(config: Config, rule_name: str, index: int, action_type: str
                ) -> tuple[AlertRule | None, ActionConfig | None]:
    for rule in config.alerts:
        if rule.name == rule_name:
            if 0 <= index < len(rule.actions) and rule.actions[index].type == action_type:
                return rule, rule.actions[index]
            return rule, None
    return None, None


def deliver_with_deadline(action: ActionConfig, note: Notification, grace: float = GRACE,
                          processes: ProcessGroups | None = None) -> Result:
    """One attempt, waited for in the calling thread at most the action's timeout plus
    ``grace`` (the attempt itself runs in a daemon thread that may be abandoned)."""
    box: list[Result] = []
    thread = threading.Thread(target=lambda: box.append(deliver(action, note,
                                                                processes=processes)),
                              name="slowdown-alert-attempt", daemon=True)
    thread.start()
    limit = float(action.options["timeout"]) + grace
    thread.join(limit)
    if box:
        return box[0]
    return Result(False, f"no answer within {limit:g}s; abandoned")


class Dispatcher:
    """Delivers due outbox rows; :meth:`start` for a service, :meth:`drain` for a command."""

    def __init__(self, config: Config, store_factory: StoreFactory, *,
                 backoff: tuple[float, ...] = BACKOFF, max_running: int = MAX_RUNNING,
                 grace: float = GRACE, clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.store_factory = store_factory
        self.backoff = tuple(backoff)
        self.max_running = max_running
        self.grace = grace
        self.clock = clock
        self.processes = ProcessGroups()
        self._events: queue.Queue = queue.Queue()
        self._running: dict[int, _Attempt] = {}
        self._tokens = itertools.count(1)
        self._stop = threading.Event()
        self._stop_by = 0.0
        self._thread: threading.Thread | None = None
        self._store: Store | None = None
        self._store_failed_at: float | None = None

    # -- control -----------------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._serve_forever, name="slowdown-alerts",
                                            daemon=True)
            self._thread.start()

    def wake(self) -> None:
        """Look at the outbox now (new messages were queued)."""
        self._events.put(("wake", None, None))

    def release_database(self, timeout: float) -> bool:
        """Close the connection to the database now (the file at its path is another, or
        its ``-wal`` went) and open it again only after ``REOPEN_AFTER``; True once closed
        within ``timeout`` seconds (or never open)."""
        if self._thread is None:
            self._close_store(failed=True)
            return True
        closed = threading.Event()
        self._events.put(("release", closed, None))
        return closed.wait(timeout)

    def close(self, timeout: float = 5.0) -> None:
        """Stop within ``timeout`` seconds: attempts still running then are cut off (a
        command's process group killed) and left to the next start."""
        self._stop_by = time.monotonic() + timeout
        self._stop.set()
        self.wake()
        if self._thread is not None:
            self._thread.join(timeout + 1.0)
            self._thread = None
        elif self._store is not None:
            self._close_store()

    def drain(self, timeout: float) -> bool:
        """Deliver in the calling thread, retries included, for at most ``timeout`` seconds;
        what falls due later is left to the service. True when every message went out (or
        was given up)."""
        self._stop_by = time.monotonic() + timeout
        try:
            return self._serve(until_idle=True)
        finally:
            self._close_store()

    # -- the loop ----------------------------------------------------------------------------

    def _serve_forever(self) -> None:
        try:
            while True:
                try:
                    self._serve(until_idle=False)
                    return
                except Exception:  # pragma: no cover - a bug: log it, go on after a pause
                    log.exception("alert dispatcher failure; starting over in %gs",
                                  REOPEN_AFTER)
                    self._close_store()
                    if self._stop.wait(REOPEN_AFTER):
                        return
        finally:
            self._close_store()

    def _serve(self, until_idle: bool) -> bool:
        """The loop; for a drain (``until_idle``), returns whether the outbox is empty."""
        wait = 0.0
        while True:
            self._take_events(wait)
            if (self._stop.is_set() or until_idle) and time.monotonic() >= self._stop_by:
                self._cut_off()
                return False
            self._check_overdue()
            store = self._open()
            waiting, next_due = -1, None
            if store is not None:
                try:
                    if not self._stop.is_set():
                        self._start_due(store)
                    waiting, next_due = self._outlook(store)
                except (sqlite3.Error, StoreError) as exc:
                    log.error("alert outbox: %s", exc)
                    self._close_store(failed=True)
            if self._stop.is_set() and not self._running:
                return True
            if until_idle and not self._running:
                if waiting == 0:
                    return True
                left = self._stop_by - time.monotonic()
                if next_due is not None and next_due - self.clock() > left:
                    return False  # the next attempt is after the deadline
            wait = self._wait_time(next_due, store is None)

    def _wait_time(self, next_due: float | None, no_store: bool) -> float:
        now = self.clock()
        wait = IDLE_WAKE if next_due is None else max(0.0, next_due - now)
        if no_store:
            wait = min(wait, REOPEN_AFTER)
        for attempt in self._running.values():
            wait = min(wait, max(0.0, attempt.deadline - now))
        if self._stop.is_set() or self._stop_by:
            wait = min(wait, max(0.0, self._stop_by - time.monotonic()))
        return max(0.01, min(wait, IDLE_WAKE))

    def _take_events(self, wait: float) -> None:
        try:
            item = self._events.get(timeout=wait) if wait > 0 else self._events.get_nowait()
        except queue.Empty:
            return
        while True:
            kind, token, result = item
            if kind == "done":
                self._finished(token, result)
            elif kind == "release":
                self._close_store(failed=True)
                token.set()
            try:
                item = self._events.get_nowait()
            except queue.Empty:
                return

    # -- the database ------------------------------------------------------------------------

    def _open(self) -> Store | None:
        if self._store is not None and self._store.moved() is not None:
            self._close_store()  # the file at the path is another now: write that one
        if self._store is None:
            if (self._store_failed_at is not None
                    and self.clock() - self._store_failed_at < REOPEN_AFTER):
                return None
            try:
                self._store = self.store_factory()
                self._store_failed_at = None
            except (StoreError, sqlite3.Error, OSError) as exc:
                log.error("alert outbox: cannot open the database: %s", exc)
                self._store_failed_at = self.clock()
        return self._store

    def _close_store(self, failed: bool = False) -> None:
        if self._store is not None:
            with contextlib.suppress(sqlite3.Error):
                self._store.close()
            self._store = None
        if failed:
            self._store_failed_at = self.clock()

    def _outlook(self, store: Store) -> tuple[int, float | None]:
        """(open rows not running here, when the next of them can start)."""
        rows = store.conn.execute(
            "SELECT id, max(next_at, coalesce(lease_until, 0)) FROM alert_outbox o "
            f"WHERE done_at IS NULL AND {_FIRST_IN_LINE}").fetchall()
        pending = [t for i, t in rows if i not in self._running]
        if pending and len(self._running) >= self.max_running:
            return len(pending), None  # woken by a finishing attempt
        return len(pending), min(pending, default=None)

    def _start_due(self, store: Store) -> None:
        free = self.max_running - len(self._running)
        if free <= 0:
            return
        now = self.clock()
        rows = store.conn.execute(
            "SELECT id, rule, subject, event, action, type, message, attempts "
            "FROM alert_outbox o WHERE done_at IS NULL AND next_at <= ? "
            f"AND (lease_until IS NULL OR lease_until < ?) AND {_FIRST_IN_LINE} "
            "ORDER BY id LIMIT ?", (now, now, free + len(self._running))).fetchall()
        for raw in rows:
            row = _Row(*raw)
            if row.id in self._running:
                continue
            if len(self._running) >= self.max_running:
                break
            _, action = find_action(self.config, row.rule, row.action, row.type)
            if action is None:
                self._record(store, row, "-", Result(False, "the rule or this action is no "
                                                     "longer configured; dropped",
                                                     retry=False))
                continue
            try:
                note = Notification.from_json(row.message)
            except (ValueError, TypeError) as exc:
                self._record(store, row, describe(action),
                             Result(False, f"unreadable message: {exc}", retry=False))
                continue
            limit = float(action.options["timeout"]) + self.grace
            claimed = store.conn.execute(
                "UPDATE alert_outbox SET lease_until = ? WHERE id = ? AND done_at IS NULL "
                "AND (lease_until IS NULL OR lease_until < ?)", (now + limit, row.id, now))
            if claimed.rowcount != 1:
                continue  # another process took it
            token = next(self._tokens)
            self._running[row.id] = _Attempt(row, describe(action), now + limit, token)
            threading.Thread(target=self._attempt, args=(action, note, row.id, token),
                             name=f"slowdown-alert-{row.id}", daemon=True).start()

    def _attempt(self, action: ActionConfig, note: Notification, row_id: int,
                 token: int) -> None:
        result = deliver(action, note, processes=self.processes)
        self._events.put(("done", (row_id, token), result))

    def _finished(self, key: tuple[int, int], result: Result) -> None:
        row_id, token = key
        attempt = self._running.get(row_id)
        if attempt is None or attempt.token != token:
            return  # abandoned earlier; its late result changes nothing
        del self._running[row_id]
        self._record_safely(attempt.row, attempt.label, result)

    def _check_overdue(self) -> None:
        now = self.clock()
        for row_id, attempt in list(self._running.items()):
            if now > attempt.deadline:
                del self._running[row_id]
                self._record_safely(attempt.row, attempt.label, Result(
                    False, f"no answer {self.grace:g}s past the timeout; abandoned"))

    def _cut_off(self) -> None:
        """At the stop deadline: kill running commands, release their rows for the next start
        (not counted as an attempt)."""
        if not self._running:
            return
        self.processes.kill_all()
        ids = list(self._running)
        self._running.clear()
        store = self._open()
        if store is None:
            return
        try:
            store.conn.executemany("UPDATE alert_outbox SET lease_until = NULL WHERE id = ?",
                                   [(i,) for i in ids])
        except sqlite3.Error as exc:
            log.error("alert outbox: cannot release %d deliveries: %s", len(ids), exc)
        log.warning("stopping with %d alert deliveries unfinished; they go out at the next "
                    "start", len(ids))

    def _record_safely(self, row: _Row, label: str, result: Result) -> None:
        store = self._open()
        if store is None:
            log.error("alert %s %s via %s: %s (not recorded: no database)", row.rule,
                      row.subject, label, result.message)
            return
        try:
            self._record(store, row, label, result)
        except (sqlite3.Error, StoreError) as exc:
            log.error("alert outbox: cannot record an attempt: %s", exc)
            self._close_store(failed=True)

    def _record(self, store: Store, row: _Row, label: str, result: Result) -> None:
        """Log the attempt and schedule the row's next step, in one transaction."""
        now = self.clock()
        attempts = row.attempts + 1
        limit = max_attempts(row.type, self.backoff)
        message = result.message
        if result.ok:
            update = ("UPDATE alert_outbox SET attempts = ?, done_at = ?, ok = 1, "
                      "lease_until = NULL WHERE id = ?", (attempts, int(now), row.id))
        elif result.retry and attempts < limit:
            delay = self.backoff[min(attempts - 1, len(self.backoff) - 1)]
            if result.retry_after is not None:
                delay = max(delay, min(result.retry_after, self.backoff[-1]))
            message += f"; attempt {attempts} of {limit}, next in {delay:g}s"
            update = ("UPDATE alert_outbox SET attempts = ?, next_at = ?, lease_until = NULL "
                      "WHERE id = ?", (attempts, now + delay, row.id))
        else:
            if result.retry and limit > 1:
                message += f"; gave up after {attempts} attempts"
            update = ("UPDATE alert_outbox SET attempts = ?, done_at = ?, ok = 0, "
                      "lease_until = NULL WHERE id = ?", (attempts, int(now), row.id))
        conn = store.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute(*update)
            log_attempt(conn, now, row.rule, row.subject, row.event, label, result.ok, message)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        level = logging.INFO if result.ok else logging.WARNING
        log.log(level, "alert %s %s %s via %s: %s", row.rule, row.subject, row.event, label,
                message)
