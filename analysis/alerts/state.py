"""Alert state in the database: the state machine per (rule, subject), and the outbox.

    ok -> pending        the value is above a threshold
    pending -> firing    it stayed above for ``for``        (sends "firing")
    pending -> ok        it fell back (or the data stopped) before that
    firing -> resolved   it stayed below for ``clear_for``  (sends "resolved")
    resolved -> ok       at the next evaluation below; above again opens a new incident

While firing: above ``critical`` for the first time sends "escalated"; every ``repeat``
sends "repeat"; a window without data neither resolves nor counts towards ``clear_for``.

Clocks count evaluation minutes. Each evaluation applies once per minute (a second one for
the same minute, from a restart or from ``slowdown alerts --evaluate``, changes nothing), and
a gap of more than :data:`GAP` between evaluations restarts the ``for`` and ``clear_for``
clocks: nobody watched in between.

A transition and the messages it owes are written in one transaction: the messages wait
in ``alert_outbox`` until the dispatcher has delivered them. So a restart neither loses a
firing incident (its message is still in the outbox) nor raises it twice (its state says
firing).
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from slowdown.analysis.alerts.notification import Notification
from slowdown.analysis.alerts.rules import Observation, lowest_threshold
from slowdown.analysis.config import AlertRule, Config

STATES = ("ok", "pending", "firing", "resolved")
GAP = 180  # seconds between evaluations beyond which the for/clear_for clocks restart

_COLUMNS = ("rule, subject, state, since, fired_at, resolved_at, last_sent, value, details, "
            "severity, clear_since, evaluated")


@dataclass
class AlertState:
    rule: str
    subject: str
    state: str = "ok"
    since: int = 0
    fired_at: int | None = None
    resolved_at: int | None = None
    last_sent: int | None = None
    value: float | None = None  # the value that moved it into this state
    details: dict[str, Any] = field(default_factory=dict)
    severity: str | None = None
    clear_since: int | None = None
    evaluated: int | None = None

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> AlertState:
        (rule, subject, state, since, fired_at, resolved_at, last_sent, value, details,
         severity, clear_since, evaluated) = row
        try:
            parsed = json.loads(details) if details else {}
        except ValueError:
            parsed = {}
        return cls(rule, subject, state, since, fired_at, resolved_at, last_sent, value,
                   parsed if isinstance(parsed, dict) else {}, severity, clear_since, evaluated)

    def row(self) -> tuple:
        return (self.rule, self.subject, self.state, self.since, self.fired_at,
                self.resolved_at, self.last_sent, self.value,
                json.dumps(self.details, sort_keys=True), self.severity, self.clear_since,
                self.evaluated)


@dataclass(frozen=True)
class Transition:
    """What one evaluation did to one (rule, subject)."""

    rule: str
    subject: str
    before: str
    after: str
    event: str | None  # the message it sends: firing, resolved, repeat, escalated
    value: float | None
    minute: int


def step(rule: AlertRule, st: AlertState, obs: Observation) -> str | None:
    """Apply one evaluation to ``st`` in place; returns the message to send, if any.

    The caller has checked that ``obs.minute`` is newer than ``st.evaluated``.
    """
    minute, value, level = obs.minute, obs.value, obs.level
    watched = st.evaluated is not None and minute - st.evaluated <= GAP
    st.evaluated = minute
    if value is not None:
        st.details["last"] = value
        st.details["last_op"] = obs.op
    if st.state in ("ok", "resolved"):
        if level is None:
            if st.state == "resolved":
                st.state, st.since = "ok", minute
            return None
        st.state, st.since, st.value, st.severity = "pending", minute, value, level
        watched = True  # the clock starts now
    if st.state == "pending":
        if level is None:
            st.state, st.since, st.value, st.severity = "ok", minute, value, None
            return None
        if not watched:
            st.since = minute
        st.value, st.severity = value, level
        if minute - st.since < rule.for_:
            return None
        st.state, st.since, st.fired_at, st.resolved_at = "firing", minute, minute, None
        st.last_sent, st.clear_since = minute, None
        st.details.update(op=obs.op, peak=value, fired=_numbers(obs), threshold=obs.threshold)
        if obs.verdict is not None:
            st.details["verdict"] = obs.verdict
        st.details.pop("note", None)
        return "firing"
    if st.state == "firing":
        if value is None:
            return None  # no data: neither resolves nor counts towards clear_for
        st.details["peak"] = max(value, st.details.get("peak") or value)
        if level is not None:
            st.clear_since = None
            if level == "critical" and st.severity != "critical":
                st.severity, st.last_sent = "critical", minute
                st.details["threshold"] = obs.threshold
                return "escalated"
            if rule.repeat is not None and minute - (st.last_sent or minute) >= rule.repeat:
                st.last_sent = minute
                return "repeat"
            return None
        if st.clear_since is None or not watched:
            st.clear_since = minute
        if minute - st.clear_since < rule.clear_for:
            return None
        st.state, st.since, st.resolved_at, st.clear_since = "resolved", minute, minute, None
        return "resolved"
    return None


def _numbers(obs: Observation) -> dict[str, Any]:
    return {op: {k: v for k, v in info.items() if k in ("value", "count", "errors")}
            for op, info in obs.ops.items()}


# -- the database -----------------------------------------------------------------------------

def load_states(conn: sqlite3.Connection) -> dict[tuple[str, str], AlertState]:
    rows = conn.execute(f"SELECT {_COLUMNS} FROM alert_state ORDER BY rule, subject")
    return {(r[0], r[1]): AlertState.from_row(r) for r in rows}


def save_state(conn: sqlite3.Connection, st: AlertState) -> None:
    conn.execute(f"INSERT OR REPLACE INTO alert_state ({_COLUMNS}) VALUES "
                 f"({', '.join('?' * 12)})", st.row())


def notification(config: Config, rule: AlertRule, st: AlertState, event: str,
                 obs: Observation | None) -> Notification:
    """The message an incident owes, from its state (labels fixed at firing)."""
    target, _, op = st.subject.partition("/")
    op = op or st.details.get("op") or (obs.op if obs else None) or "*"
    ops = (obs.ops if obs is not None else {}) or st.details.get("fired", {})
    if event == "firing":
        value = st.value  # the value that fired it
    elif obs is not None and obs.value is not None:
        value = obs.value
    else:
        value = st.details.get("last")
    return Notification(
        rule=rule.name, subject=st.subject, target=target, op=op, event=event,
        severity=st.severity or "warning", value=value,
        threshold=st.details.get("threshold", lowest_threshold(rule)),
        kind=rule.kind, statistic=rule.statistic, window=rule.window, host=config.host,
        starts_at=float(st.fired_at if st.fired_at is not None else st.since),
        ends_at=float(st.resolved_at) if event == "resolved" and st.resolved_at else None,
        details={"peak": st.details.get("peak"),
                 "ops": {k: {"value": v.get("value"), "count": v.get("count"),
                             "errors": v.get("errors")} for k, v in ops.items()},
                 **({"note": st.details["note"]} if st.details.get("note") else {}),
                 **({"verdict": _verdict_now(st, obs, event)}
                    if st.details.get("verdict") else {}),
                 **_servers_now(obs, event)},
    )


def _servers_now(obs: Observation | None, event: str) -> dict[str, Any]:
    """The slow servers the message names: those the records name now, while the value is
    above its level (a resolve names none)."""
    if event == "resolved" or obs is None or obs.servers is None:
        return {}
    return {"servers_note": obs.servers.note, "servers": list(obs.servers.servers)}


def _verdict_now(st: AlertState, obs: Observation | None, event: str) -> str:
    """The verdict the message shows: at firing, the one that fired it; later, the newest
    (a resolved incident's: the one it fired with)."""
    if event != "resolved" and obs is not None and obs.verdict is not None:
        return obs.verdict
    return st.details["verdict"]


def enqueue(conn: sqlite3.Connection, rule: AlertRule, note: Notification, now: float) -> int:
    """One outbox row per action of the rule; returns how many."""
    for index, action in enumerate(rule.actions):
        conn.execute(
            "INSERT INTO alert_outbox (created, rule, subject, event, action, type, message,"
            " next_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (int(now), rule.name, note.subject, note.event, index, action.type,
             note.to_json(), now))
    return len(rule.actions)


def apply(conn: sqlite3.Connection, config: Config, observations: Iterable[Observation],
          minute: int, now: float | None = None) -> list[Transition]:
    """Run the state machine for one evaluation minute and queue its messages, in one
    transaction. Subjects a configured rule no longer covers are resolved (firing) or
    dropped (pending)."""
    now = time.time() if now is None else now
    rules = {r.name: r for r in config.alerts}
    transitions: list[Transition] = []
    conn.execute("BEGIN IMMEDIATE")
    try:
        states = load_states(conn)
        seen = set()
        for obs in observations:
            rule = rules[obs.rule]
            key = (obs.rule, obs.subject)
            seen.add(key)
            st = states.get(key) or AlertState(obs.rule, obs.subject, since=minute)
            if st.evaluated is not None and st.evaluated >= minute:
                continue  # this minute was applied already
            before = st.state
            event = step(rule, st, obs)
            save_state(conn, st)
            if event is not None:
                enqueue(conn, rule, notification(config, rule, st, event, obs), now)
            if event is not None or before != st.state:
                transitions.append(Transition(obs.rule, obs.subject, before, st.state, event,
                                              obs.value, minute))
        for key, st in states.items():
            rule = rules.get(key[0])
            if rule is None or key in seen or st.state not in ("pending", "firing"):
                continue
            before = st.state
            st.evaluated = minute
            event = None
            if st.state == "firing":
                st.state, st.since, st.resolved_at = "resolved", minute, minute
                st.details["note"] = "The rule no longer covers this subject."
                event = "resolved"
                enqueue(conn, rule, notification(config, rule, st, event, None), now)
            else:
                st.state, st.since, st.severity = "ok", minute, None
            save_state(conn, st)
            transitions.append(Transition(key[0], key[1], before, st.state, event, None,
                                          minute))
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return transitions


def log_attempt(conn: sqlite3.Connection, at: float, rule: str, subject: str, event: str,
                action: str, ok: bool, message: str) -> None:
    conn.execute("INSERT INTO alert_log (at, rule, subject, event, action, ok, message)"
                 " VALUES (?, ?, ?, ?, ?, ?, ?)",
                 (int(at), rule, subject, event, action, int(ok), message))
