"""Alert rules driven by recorded data: pending -> firing -> resolved, restarts in the
middle, exactly one ticket and one resolve message, through a real program.

Data are written through the store with known distributions (testdata/datakit.py); a baseline
is made from the first hour; the rules are evaluated minute by minute as the service would,
by :class:`ServiceAlerts`, whose dispatcher runs the real command.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from slowdown.analysis.alerts import ServiceAlerts, evaluate, load_states
from slowdown.analysis.alerts.rules import Observation
from slowdown.analysis.alerts.state import AlertState, step
from slowdown.analysis.cli.alerts import alerts as alerts_command
from slowdown.analysis.config import Config, loads
from slowdown.analysis.histogram import Histogram
from slowdown.analysis.stats import baseline
from slowdown.analysis.store import Store
from slowdown.analysis.store.records import Record
from testdata.datakit import fill, lognormal, utc
from tests.kit.alertkit import (
    WebhookReceiver,
    calls,
    recorder_action,
    wait_until,
    webhook_action,
)

T0 = utc(2026, 11, 2, 8)
M = 60
B = T0 + 60 * M  # the baseline hour ends here; the tests' story starts
MEDIAN = 0.002


def configure(tmp_path: Path, rules: str, targets=("work",)) -> Config:
    lines = [f'database = "{tmp_path / "slowdown.db"}"', 'host = "node001"']
    for name in targets:
        lines += ["[[target]]", f'name = "{name}"', f'path = "{tmp_path / name}"',
                  'data_size = "16MiB"']
    return loads("\n".join(lines) + "\n" + rules)


def alert_config(tmp_path: Path, targets=("work",), action: str | None = None,
                 **rule: object) -> Config:
    """``configure`` with one ``[[alert]]`` of the keys and values of ``rule`` (``for_``
    stands for ``for``) and ``action`` (TOML), by default the ticket program."""
    keys = [f"{key.rstrip('_')} = {json.dumps(value)}" for key, value in rule.items()]
    action = action or ticket_action(tmp_path)
    return configure(tmp_path, "\n".join(["", "[[alert]]", *keys, f"action = {action}", ""]),
                     targets)


def ticket_action(tmp_path: Path) -> str:
    """A real program that records each call (argv, SLOWDOWN_* and stdin) as a JSON line."""
    return recorder_action(tmp_path, tmp_path / "tickets.jsonl", "{state}", "{event}",
                           "{target}", "{op}", "{value}", "{severity}")


def tickets(tmp_path: Path) -> list[list[str]]:
    return [c["argv"] for c in calls(tmp_path / "tickets.jsonl")]


def record_baseline(db: Path, ops=("md-stat", "md-read", "md-delete", "md-write")) -> None:
    fill(db, T0, 60, lognormal(MEDIAN, 0.2), ops=ops, seed=1)
    with Store(db) as store:
        baseline.rebaseline(store, B, "test baseline", T0, B)


def record(db: Path, minute: int, minutes: int = 1, factor: float = 1.0, ops=("md-stat",),
           seed: int = 0, **kw) -> None:
    fill(db, minute, minutes, lognormal(MEDIAN * factor, 0.2), ops=ops, seed=seed, **kw)


def settle(alerts: ServiceAlerts, db: Path, timeout: float = 15) -> None:
    """Wait until the dispatcher has delivered everything queued."""
    def empty() -> bool:
        with Store(db, readonly=True) as store:
            return store.conn.execute(
                "SELECT count(*) FROM alert_outbox WHERE done_at IS NULL").fetchone()[0] == 0
    wait_until(empty, timeout, "the outbox to empty")


def evaluate_and_settle(config: Config, *times: float) -> None:
    """A service's alerts evaluated at ``times``, then everything queued delivered."""
    alerts = ServiceAlerts(config)
    try:
        for now in times:
            alerts.evaluate(now)
        settle(alerts, config.database)
    finally:
        alerts.close(5)


def state_of(db: Path, rule: str, subject: str) -> AlertState:
    with Store(db, readonly=True) as store:
        return load_states(store.conn)[(rule, subject)]


# -- the main story ---------------------------------------------------------------------------

def test_pending_firing_resolved_with_restarts_in_the_middle_sends_one_ticket_and_one_resolve(
        tmp_path):
    """md ops 20x slower for 10 minutes. A 1-minute window, for 3m, clear_for 2m. The
    service restarts while pending, twice while firing (once right after the transition,
    before the message went out) and while clearing."""
    config = alert_config(tmp_path, name="work-slow", target="work", op="md-*",
                          statistic="median", window="1m", above=5.0, for_="3m", clear_for="2m")
    db = config.database
    record_baseline(db)
    ops = ("md-stat", "md-read", "md-delete", "md-write")
    record(db, B, 5, ops=ops, seed=2)                    # B .. B+4: normal
    record(db, B + 5 * M, 10, factor=20, ops=ops, seed=3)  # B+5 .. B+14: slow
    record(db, B + 15 * M, 12, ops=ops, seed=4)          # B+15 ..: normal again
    seen: dict[int, tuple[str, str | None]] = {}
    alerts = ServiceAlerts(config)
    try:
        for k in range(1, 27):
            now = B + k * M + 1.5  # just after the minute flush, as the service evaluates
            if k == 9:
                # The service dies right after the transition to firing is committed, before
                # the dispatcher sends anything: the message waits in the outbox.
                alerts.close(0)
                with Store(db) as store:
                    _, moved = evaluate(config, store, now)
                (fired,) = moved
                seen[k] = (fired.after, fired.event)
                assert tickets(tmp_path) == []
                alerts = ServiceAlerts(config)  # the restart delivers it, once
                continue
            for t in alerts.evaluate(now):
                seen[k] = (t.after, t.event)
            settle(alerts, db)
            if k in (7, 12, 17):  # restarts while pending, firing, clearing
                alerts.close(5)
                alerts = ServiceAlerts(config)
                alerts.evaluate(now)  # the same minute again: changes nothing
        settle(alerts, db)
    finally:
        alerts.close(5)
    assert seen == {6: ("pending", None), 9: ("firing", "firing"),
                    18: ("resolved", "resolved"), 19: ("ok", None)}
    sent = tickets(tmp_path)
    assert [t[:4] for t in sent] == [["firing", "firing", "work", sent[0][3]],
                                     ["resolved", "resolved", "work", sent[0][3]]]
    assert sent[0][3] in ops
    assert 15 < float(sent[0][4]) < 30, sent  # the value that fired it: about 20x
    assert float(sent[1][4]) < 5  # back below
    st = state_of(db, "work-slow", "work")
    assert (st.state, st.fired_at, st.resolved_at) == ("ok", B + 9 * M, B + 18 * M)
    assert 15 < st.details["peak"] < 30
    env = calls(tmp_path / "tickets.jsonl")[0]["env"]
    assert env["SLOWDOWN_INCIDENT"] == f"node001/work-slow/work/{B + 9 * M}"
    with Store(db, readonly=True) as store:
        log = store.conn.execute("SELECT event, ok FROM alert_log ORDER BY id").fetchall()
    assert log == [("firing", 1), ("resolved", 1)]


def test_state_and_messages_through_a_webhook_and_the_listing(tmp_path):
    """The same story through a real HTTP receiver, then ``slowdown alerts`` shows it."""
    with WebhookReceiver() as receiver:
        config = alert_config(tmp_path, name="stat-slow", op="md-stat", statistic="median",
                              window="2m", above=4.0, critical=50.0, for_="2m",
                              action=webhook_action(receiver.url))
        db = config.database
        record_baseline(db, ops=("md-stat",))
        record(db, B, 3)
        record(db, B + 3 * M, 6, factor=10, seed=5)
        record(db, B + 9 * M, 8, seed=6)
        evaluate_and_settle(config, *(B + k * M + 1 for k in range(1, 17)))
        bodies = [r["body"] for r in receiver.answered()]
    # Window 2m: its median is slow only when both minutes are, from the evaluation at B+5
    # (pending) to B+9; fires at B+7; clear_for defaults to the window: below from B+10,
    # resolved at B+12.
    assert [b["status"] for b in bodies] == ["firing", "resolved"]
    firing, resolved = (b["alerts"][0] for b in bodies)
    assert firing["labels"] == {"alertname": "stat-slow", "target": "work", "op": "md-stat",
                                "host": "node001", "severity": "warning"}
    assert firing["startsAt"] == resolved["startsAt"] == _iso(B + 7 * M)
    assert resolved["endsAt"] == _iso(B + 12 * M)
    assert bodies[0]["slowdown"]["subject"] == "work/md-stat"
    done = CliRunner().invoke(alerts_command, ["--json"], obj={"config": lambda: config})
    assert done.exit_code == 0, done.output
    doc = json.loads(done.output)
    assert doc["rules"][0]["subjects"] == ["work/md-stat"]
    (st,) = doc["states"]
    assert (st["state"], st["fired_at"], st["resolved_at"]) == ("ok", B + 7 * M, B + 12 * M)
    assert [(a["event"], a["ok"]) for a in doc["log"]] == [("firing", True), ("resolved", True)]
    text = CliRunner().invoke(alerts_command, [], obj={"config": lambda: config})
    assert text.exit_code == 0, text.output
    assert "stat-slow" in text.output and "work/md-stat" in text.output
    assert "webhook http://127.0.0.1" in text.output


def _iso(t: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


# -- other kinds ------------------------------------------------------------------------------

def write_errors(db: Path, minute: int, minutes: int, ok: int, errors: int,
                 op: str = "data-write") -> None:
    with Store(db) as store:
        batch = []
        for m in range(minutes):
            h = Histogram()
            h.record_many([MEDIAN] * ok)
            batch.append(Record("node001", "work", op, minute + m * M, h, errors=errors))
        store.write(batch)


def test_error_rate_rule(tmp_path):
    config = alert_config(tmp_path, name="write-errors", op="data-write", kind="error_rate",
                          window="5m", above=0.2, for_="0s", clear_for="0s")
    db = config.database
    write_errors(db, B, 10, ok=60, errors=0)
    write_errors(db, B + 10 * M, 2, ok=30, errors=30)  # 50 % of attempts fail
    write_errors(db, B + 12 * M, 10, ok=60, errors=0)
    values = {}
    with Store(db) as store:
        for k in range(10, 20):
            (obs,), _ = evaluate(config, store, B + k * M + 1)
            values[k] = obs.value
    # errors / (count + errors) over the 5 minutes before each evaluation
    assert values[10] == 0
    assert values[11] == pytest.approx(30 / 300)
    assert values[12] == pytest.approx(60 / 300)  # at the threshold: not above
    assert values[13] == pytest.approx(60 / 300)
    st = state_of(db, "write-errors", "work/data-write")
    assert st.state == "ok" and st.fired_at is None
    # A sharper burst fires and resolves.
    write_errors(db, B + 30 * M, 1, ok=0, errors=60)
    write_errors(db, B + 31 * M, 10, ok=60, errors=0)
    with Store(db) as store:
        (obs,), moved = evaluate(config, store, B + 31 * M + 1)
    assert obs.value == 1.0 and [t.event for t in moved] == ["firing"]
    evaluate_and_settle(config, B + 36 * M + 1)  # the burst has left the window
    assert [t[:2] for t in tickets(tmp_path)] == [["firing", "firing"], ["resolved", "resolved"]]


def test_stuck_rule_from_records_and_from_the_live_state(tmp_path):
    config = alert_config(tmp_path, name="stuck", kind="stuck", window="1m", above="30s",
                          critical="2m", for_="0s", clear_for="1m")
    db = config.database
    record(db, B, 10, ops=("data-read",), stuck={B + 3 * M: 45.0})
    record(db, B, 10, ops=("md-stat",))
    with Store(db) as store:
        (obs,), moved = evaluate(config, store, B + 3 * M + 1)
        assert obs.value == 0 and not moved
        (obs,), moved = evaluate(config, store, B + 4 * M + 1)
        assert (obs.value, obs.level, obs.op) == (45.0, "warning", "data-read")
        assert [(t.after, t.event) for t in moved] == [("firing", "firing")]
        # The live state (a service passes what is in flight now) escalates it.
        (obs,), moved = evaluate(config, store, B + 5 * M + 1,
                                 live_stuck={("work", "md-stat"): 150.0})
        assert (obs.value, obs.level, obs.op) == (150.0, "critical", "md-stat")
        assert [t.event for t in moved] == ["escalated"]
        for k in (6, 7):
            _, moved = evaluate(config, store, B + k * M + 1)
        assert [(t.after, t.event) for t in moved] == [("resolved", "resolved")]
    evaluate_and_settle(config)
    sent = tickets(tmp_path)
    assert [(t[1], t[5]) for t in sent] == [("firing", "warning"), ("escalated", "critical"),
                                            ("resolved", "critical")]
    assert sent[0][3] == "data-read" and sent[2][3] == "data-read"  # labels fixed at firing


def test_live_stuck_raises_a_slowdown_rule(tmp_path):
    """A hung filesystem reads as slow: an op in flight for 40 s is a huge slowdown."""
    config = alert_config(tmp_path, name="slow", op="md-stat", statistic="q95", window="1m",
                          above=10.0)
    record_baseline(config.database, ops=("md-stat",))
    record(config.database, B, 3)
    with Store(config.database) as store:
        (obs,), _ = evaluate(config, store, B + 2 * M + 1)
        assert obs.value < 3
        (obs,), moved = evaluate(config, store, B + 3 * M + 1,
                                 live_stuck={("work", "md-stat"): 40.0})
    assert obs.value > 1000 and obs.ops["md-stat"]["raised"]
    assert [t.event for t in moved] == ["firing"]


# -- rules of the state machine ---------------------------------------------------------------

def test_repeat_and_a_new_incident_after_resolve(tmp_path):
    config = alert_config(tmp_path, name="r", op="md-stat", statistic="median", window="1m",
                          above=5.0, critical=15.0, for_="0s", clear_for="0s", repeat="3m")
    db = config.database
    record_baseline(db, ops=("md-stat",))
    for k, factor in enumerate([1, 8, 8, 8, 8, 8, 8, 1, 8, 1]):
        record(db, B + k * M, factor=factor, seed=10 + k)
    events = []
    with Store(db) as store:
        for k in range(1, 11):
            _, moved = evaluate(config, store, B + k * M + 1)
            events += [(k, t.event) for t in moved if t.event]
    assert events == [(2, "firing"), (5, "repeat"), (8, "resolved"), (9, "firing"),
                      (10, "resolved")]
    with Store(db, readonly=True) as store:
        incidents = store.conn.execute(
            "SELECT DISTINCT json_extract(message, '$.starts_at') FROM alert_outbox"
        ).fetchall()
    assert sorted(i[0] for i in incidents) == [B + 2 * M, B + 9 * M]  # two incidents


def obs(value: float | None, minute: int, level: str | None = None) -> Observation:
    if level is None and value is not None and value > 5:
        level = "critical" if value > 15 else "warning"
    return Observation("r", "work", "work", "md-stat", value, level, 5.0, minute)


def rule(**kw):
    config = loads('[[target]]\nname = "work"\npath = "/srv/work"\n[[alert]]\nname = "r"\n'
                   'statistic = "median"\nwindow = "1m"\nabove = 5.0\ncritical = 15.0\n'
                   + "".join(f"{k} = {v}\n" for k, v in kw.items())
                   + 'action = { type = "command", argv = ["/bin/true"] }\n')
    return config.alerts[0]


def run(r, values, start=B, every=M, st=None):
    st = st or AlertState("r", "work", since=start)
    out = []
    for i, v in enumerate(values):
        out.append((step(r, st, obs(v, start + i * every)), st.state))
    return out, st


def test_for_and_clear_for_count_evaluation_minutes():
    r = rule(**{"for": '"2m"', "clear_for": '"2m"'})
    out, st = run(r, [9, 9, 9, 9, 1, 9, 1, 1, 1, 1])
    assert [s for _, s in out] == ["pending", "pending", "firing", "firing", "firing", "firing",
                                   "firing", "firing", "resolved", "ok"]
    assert [e for e, _ in out if e] == ["firing", "resolved"]
    assert st.fired_at == B + 2 * M and st.resolved_at == B + 8 * M


def test_a_dip_resets_pending_and_missing_data_never_resolves():
    r = rule(**{"for": '"2m"', "clear_for": '"1m"'})
    out, _ = run(r, [9, 1, 9, 9, None, 9, 9])
    assert [s for _, s in out] == ["pending", "ok", "pending", "pending", "ok", "pending",
                                   "pending"]
    out, _ = run(r, [9, 9, 9, None, None, None, 1, 1])
    assert [s for _, s in out] == ["pending", "pending", "firing", "firing", "firing", "firing",
                                   "firing", "resolved"]


def test_a_gap_in_evaluation_restarts_the_clocks():
    r = rule(**{"for": '"5m"', "clear_for": '"5m"'})
    _, st = run(r, [9], start=B)
    _, st = run(r, [9, 9], start=B + 20 * M, st=st)  # nobody watched for 20 minutes
    assert st.state == "pending" and st.since == B + 20 * M
    _, st = run(r, [9, 9, 9, 9], start=B + 22 * M, st=st)
    assert st.state == "firing" and st.fired_at == B + 25 * M
    _, st = run(r, [1], start=B + 26 * M, st=st)
    _, st = run(r, [1], start=B + 40 * M, st=st)
    assert st.state == "firing" and st.clear_since == B + 40 * M


def test_evaluating_a_minute_twice_changes_nothing(tmp_path):
    config = alert_config(tmp_path, name="r", op="md-stat", statistic="median", window="1m",
                          above=5.0, for_="1m")
    record_baseline(config.database, ops=("md-stat",))
    record(config.database, B, 5, factor=9)
    with Store(config.database) as store:
        moves = [evaluate(config, store, B + M + s)[1] for s in (1, 20, 59)]
        assert [len(m) for m in moves] == [1, 0, 0]
        moves = [evaluate(config, store, B + 2 * M + s)[1] for s in (1, 30)]
        assert [[t.event for t in m] for m in moves] == [["firing"], []]
        queued = store.conn.execute("SELECT count(*) FROM alert_outbox").fetchone()[0]
    assert queued == 1


def test_a_subject_the_rule_no_longer_covers_is_resolved(tmp_path):
    def covering(target: str) -> Config:
        return alert_config(tmp_path, ("a", "b"), name="r", target=target, op="md-stat",
                            statistic="median", window="1m", above=5.0)

    both = covering("*")
    record(both.database, B, 3, factor=1, targets=("a", "b"))
    with Store(both.database) as store:
        baseline.rebaseline(store, B + 3 * M, "test", B, B + 3 * M)
    record(both.database, B + 3 * M, 3, factor=9, targets=("a", "b"), seed=9)
    with Store(both.database) as store:
        _, moved = evaluate(both, store, B + 4 * M + 1)
        assert sorted((t.subject, t.event) for t in moved) == [("a/md-stat", "firing"),
                                                               ("b/md-stat", "firing")]
        only_a = covering("a")
        _, moved = evaluate(only_a, store, B + 5 * M + 1)
        assert [(t.subject, t.after, t.event) for t in moved] == [
            ("b/md-stat", "resolved", "resolved")]
        (message,) = store.conn.execute(
            "SELECT message FROM alert_outbox WHERE event = 'resolved'").fetchone()
    assert "no longer covers" in json.loads(message)["details"]["note"]


def test_evaluate_from_the_command_line_sends_what_it_owes(tmp_path):
    config = alert_config(tmp_path, name="stuck-now", kind="stuck", window="1m", above="10s")
    minute = int(time.time() // 60 * 60)
    # Stuck in this minute and the two before: whichever minute the evaluation falls in, its
    # window holds a stuck minute.
    fill(config.database, minute - 120, 3, lognormal(MEDIAN), ops=("md-stat",),
         host="node001", stuck={minute - 120: 25.0, minute - 60: 25.0, minute: 25.0})
    done = CliRunner().invoke(alerts_command, ["--evaluate"], obj={"config": lambda: config})
    assert done.exit_code == 0, done.output
    assert "sent" in done.output and "stuck-now" in done.output, done.output
    assert [t[:2] for t in tickets(tmp_path)] == [["firing", "firing"]]
    again = CliRunner().invoke(alerts_command, ["--evaluate", "--json"],
                               obj={"config": lambda: config})
    assert again.exit_code == 0, again.output
    (seen,) = json.loads(again.output)["evaluation"]["observations"]
    assert seen["value"] == 25.0 and seen["level"] == "warning"
    assert [t[:2] for t in tickets(tmp_path)] == [["firing", "firing"]], "sent twice"
