"""Alert rules that raise tickets: evaluation, state, actions and their delivery.

- :mod:`.rules` computes each rule's value over its window (read-side functions only);
- :mod:`.state` runs the state machine per (rule, subject) in the database and queues the
  messages it owes in the outbox, in the same transaction;
- :mod:`.dispatch` delivers the outbox from a thread of its own, with timeouts and retries;
- :mod:`.actions` are the command, webhook and e-mail deliveries.

``slowdown alerts`` (the rules, their state, ``--test``) is ``slowdown.analysis.cli.alerts``.

The service holds one :class:`ServiceAlerts` and calls :meth:`ServiceAlerts.evaluate` after
each successful minute flush; it only reads and writes the database and wakes the
dispatcher, so a receiver that hangs never delays the flush or the next evaluation.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping

from slowdown.analysis.alerts.actions import Result, describe
from slowdown.analysis.alerts.dispatch import (
    BACKOFF,
    MAX_RUNNING,
    Dispatcher,
    deliver_with_deadline,
)
from slowdown.analysis.alerts.notification import Notification
from slowdown.analysis.alerts.rules import (
    Evaluator,
    Observation,
    level_of,
    lowest_threshold,
    subjects,
)
from slowdown.analysis.alerts.state import AlertState, Transition, apply, load_states, log_attempt
from slowdown.analysis.config import AlertRule, Config
from slowdown.analysis.store import Store
from slowdown.analysis.store.records import minute_of

__all__ = [
    "AlertState",
    "Dispatcher",
    "Notification",
    "Observation",
    "Result",
    "ServiceAlerts",
    "Transition",
    "evaluate",
    "load_states",
    "send_test",
    "trial_notification",
]

log = logging.getLogger(__name__)
log.addHandler(logging.NullHandler())  # a command line shows its own output, not our log


def evaluate(config: Config, store: Store, now: float,
             live_stuck: Mapping[tuple[str, str], float] | None = None
             ) -> tuple[list[Observation], list[Transition]]:
    """Evaluate every rule at ``now`` on a writable store: values, state, queued messages."""
    observations = Evaluator(config, [store], now, live_stuck).observe_all()
    transitions = apply(store.conn, config, observations, minute_of(now))
    return observations, transitions


class ServiceAlerts:
    """Alert evaluation inside the service, and its dispatcher thread.

    ``store_factory()`` must return a new, open :class:`Store` of the service's database on
    each call, usable from any thread (``check_same_thread=False``); ServiceAlerts closes
    what it gets. Default: ``Store(config.database, check_same_thread=False)``.
    """

    def __init__(self, config: Config, store_factory: Callable[[], Store] | None = None, *,
                 backoff: tuple[float, ...] = BACKOFF, max_running: int = MAX_RUNNING) -> None:
        self.config = config
        self.store_factory = store_factory or (
            lambda: Store(config.database, check_same_thread=False))
        self.dispatcher = Dispatcher(config, self.store_factory, backoff=backoff,
                                     max_running=max_running)
        if config.alerts:
            try:  # migrated here, before two threads could race to create the file
                self.store_factory().close()
            except Exception as exc:
                log.error("alerts: cannot open the database: %s", exc)
            self.dispatcher.start()  # delivers what a previous run left in the outbox

    def evaluate(self, now: float | None = None,
                 live_stuck: Mapping[tuple[str, str], float] | None = None
                 ) -> list[Transition]:
        """Evaluate every rule at ``now`` (default: the current time); never raises."""
        if not self.config.alerts:
            return []
        now = time.time() if now is None else now
        try:
            store = self.store_factory()
            try:
                _, transitions = evaluate(self.config, store, now, live_stuck)
            finally:
                store.close()
        except Exception as exc:
            log.error("alert evaluation failed: %s", exc)
            return []
        for t in transitions:
            value = "no data" if t.value is None else f"{t.value:.4g}"
            log.log(logging.WARNING if t.event in ("firing", "escalated") else logging.INFO,
                    "alert %s %s: %s -> %s (value %s)%s", t.rule, t.subject, t.before, t.after,
                    value, f", sending {t.event}" if t.event else "")
        if any(t.event for t in transitions):
            self.dispatcher.wake()
        return transitions

    def close(self, timeout: float = 5.0) -> None:
        """Stop the dispatcher within ``timeout`` seconds; unfinished deliveries are kept in
        the outbox for the next start."""
        self.dispatcher.close(timeout)


def trial_notification(config: Config, rule: AlertRule, value: float | None = None,
                      subject: str | None = None) -> Notification:
    """A message like the rule's firing one, marked as a test."""
    found = subjects(config, rule)
    name = subject or (found[0].name if found else "test")
    target, _, op = name.partition("/")
    if not op:
        op = found[0].ops[0] if found else "*"
    threshold = lowest_threshold(rule)
    shown = value if value is not None else threshold
    level, crossed = level_of(rule, shown)
    now = float(int(time.time()))
    return Notification(
        rule=rule.name, subject=name, target=target, op=op, event="test",
        severity=level or "warning", value=shown, threshold=crossed if level else threshold,
        kind=rule.kind, statistic=rule.statistic, window=rule.window, host=config.host,
        starts_at=now, details={"note": "This is a test of the rule's actions."})


def send_test(config: Config, rule: AlertRule, store: Store | None = None,
              value: float | None = None) -> list[tuple[str, Result]]:
    """Send a test message through every action of ``rule`` now, one after the other, each
    within its timeout; each attempt is logged in ``alert_log`` when ``store`` is given."""
    note = trial_notification(config, rule, value)
    results = []
    for action in rule.actions:
        result = deliver_with_deadline(action, note)
        results.append((describe(action), result))
        if store is not None:
            log_attempt(store.conn, time.time(), rule.name, note.subject, "test",
                        describe(action), result.ok, result.message)
    return results

