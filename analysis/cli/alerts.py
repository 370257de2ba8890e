"""``slowdown alerts``: the rules, their state and the last actions; ``--evaluate`` now;
``--test RULE`` through the real actions."""

from __future__ import annotations

import datetime as dt
import math
import sqlite3
import time
from pathlib import Path
from typing import Any

import click

from slowdown.analysis.alerts import evaluate, send_test
from slowdown.analysis.alerts.actions import describe
from slowdown.analysis.alerts.dispatch import Dispatcher
from slowdown.analysis.alerts.notification import show_value
from slowdown.analysis.alerts.rules import subjects
from slowdown.analysis.alerts.state import load_states
from slowdown.analysis.cli.output import dump_json, table
from slowdown.analysis.cli.read_setup import parse_duration_option
from slowdown.analysis.config import AlertRule, Config
from slowdown.analysis.store import Store, StoreError, expand_paths
from slowdown.analysis.store.live import read_live
from slowdown.analysis.units import format_duration
from slowdown.analysis.view.service_states import fresh

EXIT_FAILED = 1


@click.command("alerts")
@click.option("--db", "db", default=None, metavar="FILE",
              help="Database (default: the configuration's).")
@click.option("--evaluate", "evaluate_now", is_flag=True,
              help="Evaluate every rule now, record the state and send what it owes.")
@click.option("--test", "test_rule", default=None, metavar="RULE",
              help="Send a test message through every action of RULE and report how it went.")
@click.option("--value", "test_value", type=float, default=None,
              help="With --test: the value the test message shows (default: the threshold).")
@click.option("--wait", default="1m", show_default=True, metavar="DURATION",
              help="With --evaluate: how long to wait for the messages to go out (later "
                   "retries are left to the service).")
@click.option("--log", "log_count", type=click.IntRange(0), default=10, show_default=True,
              help="How many of the last actions to show.")
@click.option("--json", "as_json", is_flag=True, help="JSON instead of tables.")
@click.pass_context
def alerts(ctx: click.Context, db: str | None, evaluate_now: bool, test_rule: str | None,
           test_value: float | None, wait: str, log_count: int, as_json: bool) -> None:
    """Alert rules, their state and the last actions taken."""
    config: Config = ctx.obj["config"]()
    path = _database(ctx, db, config)
    if test_rule is not None:
        _test(config, path, test_rule, test_value, as_json)
        return
    doc: dict[str, Any] = {}
    if evaluate_now:
        if not config.alerts:
            raise click.ClickException("no [[alert]] rules in the configuration")
        doc["evaluation"] = _evaluate(config, path, parse_duration_option(wait, "--wait"))
    doc.update(_listing(config, path, log_count))
    if as_json:
        dump_json(doc)
        return
    _show(config, doc)


def _database(ctx: click.Context, db: str | None, config: Config) -> Path:
    given = (ctx.obj or {}).get("read", {}).get("dbs") or ()
    pattern = db or (given[0] if given else None)
    if pattern is None:
        return Path(config.database)
    try:
        return expand_paths([pattern])[0]
    except StoreError as exc:
        raise click.ClickException(str(exc)) from None


def _rule(config: Config, name: str) -> AlertRule:
    for rule in config.alerts:
        if rule.name == name:
            return rule
    known = ", ".join(r.name for r in config.alerts) or "none"
    raise click.BadParameter(f"no alert rule {name!r}; known: {known}", param_hint="--test")


# -- --test -----------------------------------------------------------------------------------

def _test(config: Config, path: Path, name: str, value: float | None, as_json: bool) -> None:
    rule = _rule(config, name)
    store = None
    try:
        if not path.exists():
            raise StoreError(f"{path}: no database yet")
        store = Store(path)
    except StoreError as exc:
        click.echo(f"note: the attempts are not logged: {exc}", err=True)
    try:
        results = send_test(config, rule, store, value)
    finally:
        if store is not None:
            store.close()
    if as_json:
        dump_json({"rule": rule.name, "results": [
            {"action": label, "ok": r.ok, "message": r.message} for label, r in results]})
    else:
        for label, r in results:
            click.echo(f"{'ok    ' if r.ok else 'FAILED'}  {label}: {r.message}")
    if not all(r.ok for _, r in results):
        raise click.exceptions.Exit(EXIT_FAILED)


# -- --evaluate -------------------------------------------------------------------------------

def live_stuck(path: Path, now: float) -> dict[tuple[str, str], float]:
    """Ages of ops in flight right now, from a running service's live state."""
    state = read_live(path)
    if not fresh(state, now):
        return {}
    interval = state.get("interval", 1.0)
    stuck: dict[tuple[str, str], float] = {}
    for target, info in state.get("targets", {}).items():
        for flight in info.get("in_flight", []):
            age = flight["age"] + (now - state["updated"])
            if age > interval:
                key = (target, flight["op"])
                stuck[key] = max(stuck.get(key, 0.0), age)
    return stuck


def _evaluate(config: Config, path: Path, wait: float) -> dict[str, Any]:
    now = time.time()
    started = int(now)
    if not path.exists():
        raise click.ClickException(f"{path}: no database yet (is the service running?)")
    try:
        with Store(path) as store:
            observations, transitions = evaluate(config, store, now, live_stuck(path, now))
    except (StoreError, sqlite3.Error) as exc:
        raise click.ClickException(f"{path}: {exc}") from None
    moved = {(t.rule, t.subject): t for t in transitions}
    finished = Dispatcher(config, lambda: Store(path)).drain(wait)
    with Store(path) as store:
        attempts = _log(store, 1000, since=started)
    return {
        "time": now,
        "observations": [{
            "rule": o.rule, "subject": o.subject, "value": _clean(o.value), "op": o.op,
            "level": o.level, "threshold": o.threshold,
            "state": moved[(o.rule, o.subject)].after if (o.rule, o.subject) in moved
            else None,
            "event": moved[(o.rule, o.subject)].event if (o.rule, o.subject) in moved
            else None,
        } for o in observations],
        "attempts": attempts,
        "all_sent": finished,
    }


# -- the listing ------------------------------------------------------------------------------

def _listing(config: Config, path: Path, log_count: int) -> dict[str, Any]:
    rules = [_rule_doc(config, r) for r in config.alerts]
    if not path.exists():
        return {"database": str(path), "rules": rules, "states": [], "log": [],
                "outbox": {"waiting": 0, "next_at": None}}
    try:
        with Store(path, readonly=True) as store:
            states = load_states(store.conn)
            log = _log(store, log_count)
            waiting, next_at = store.conn.execute(
                "SELECT count(*), min(next_at) FROM alert_outbox WHERE done_at IS NULL"
            ).fetchone()
    except (StoreError, sqlite3.Error) as exc:
        raise click.ClickException(f"{path}: {exc}") from None
    configured = {r.name for r in config.alerts}
    return {
        "database": str(path),
        "rules": rules,
        "states": [{
            "rule": s.rule, "subject": s.subject, "state": s.state, "since": s.since,
            "severity": s.severity, "value": s.value, "last": s.details.get("last"),
            "op": s.details.get("op") or s.details.get("last_op"),
            "fired_at": s.fired_at, "resolved_at": s.resolved_at, "last_sent": s.last_sent,
            "clear_since": s.clear_since, "evaluated": s.evaluated,
            "peak": s.details.get("peak"), "configured": s.rule in configured,
        } for s in states.values()],
        "log": log,
        "outbox": {"waiting": waiting, "next_at": next_at},
    }


def _rule_doc(config: Config, rule: AlertRule) -> dict[str, Any]:
    return {
        "name": rule.name, "kind": rule.kind, "targets": list(rule.targets),
        "ops": list(rule.ops), "statistic": rule.statistic if rule.kind == "slowdown" else None,
        "window": rule.window, "above": rule.above, "critical": rule.critical,
        "for": rule.for_, "clear_for": rule.clear_for, "repeat": rule.repeat,
        "subjects": [s.name for s in subjects(config, rule)],
        "actions": [describe(a) for a in rule.actions],
    }


def _log(store: Store, count: int, since: int | None = None) -> list[dict[str, Any]]:
    rows = store.conn.execute(
        "SELECT at, rule, subject, event, action, ok, message FROM alert_log "
        + ("WHERE at >= ? " if since is not None else "")
        + "ORDER BY id DESC LIMIT ?", (*((since,) if since is not None else ()), count))
    return [{"at": at, "rule": rule, "subject": subject, "event": event, "action": action,
             "ok": bool(ok), "message": message}
            for at, rule, subject, event, action, ok, message in reversed(rows.fetchall())]


# -- text -------------------------------------------------------------------------------------

def _when(t: float | None) -> str:
    if t is None:
        return "-"
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%d %H:%MZ")


def _clean(value: float | None) -> float | None:
    return None if value is None or math.isnan(value) else value


def _shown(kind: str, value: float | None) -> str:
    return show_value(kind, value, missing="-")


def _show(config: Config, doc: dict[str, Any]) -> None:
    kinds = {r.name: r.kind for r in config.alerts}
    evaluation = doc.get("evaluation")
    if evaluation:
        rows = [[o["rule"], o["subject"], _shown(kinds.get(o["rule"], ""), o["value"]),
                 o["op"] or "-", o["level"] or "below", o["state"] or "",
                 o["event"] or ""] for o in evaluation["observations"]]
        table(rows, ["rule", "subject", "value", "op", "level", "moved to", "sends"],
              title=f"evaluated at {_when(evaluation['time'])}")
        for a in evaluation["attempts"]:
            click.echo(f"  {'sent  ' if a['ok'] else 'FAILED'}  {a['rule']} {a['subject']} "
                       f"{a['event']} via {a['action']}: {a['message']}")
        if not evaluation["all_sent"]:
            click.echo("  some messages are still waiting; the service retries them")
        click.echo()
    if not doc["rules"]:
        click.echo("no [[alert]] rules in the configuration")
    else:
        rows = []
        for r in doc["rules"]:
            what = r["kind"] if r["kind"] != "slowdown" else f"slowdown {r['statistic']}"
            levels = " / ".join(_shown(r["kind"], v) for v in (r["above"], r["critical"])
                                if v is not None)
            rows.append([r["name"], f"{what} over {format_duration(r['window'])}", levels,
                         format_duration(r["for"]), format_duration(r["clear_for"]),
                         format_duration(r["repeat"]) if r["repeat"] else "-",
                         ", ".join(r["subjects"]) or "-", "; ".join(r["actions"])])
        table(rows, ["rule", "watches", "above / critical", "for", "clear", "repeat",
                     "subjects", "actions"], title="rules")
    if doc["states"]:
        click.echo()
        rows = [[s["rule"] + ("" if s["configured"] else " (not configured)"), s["subject"],
                 s["state"] + (f" ({s['severity']})" if s["state"] in ("pending", "firing")
                               and s["severity"] else ""),
                 _when(s["since"]), _shown(kinds.get(s["rule"], ""), s["last"]),
                 s["op"] or "-", _when(s["fired_at"]), _when(s["resolved_at"]),
                 _when(s["last_sent"])] for s in doc["states"]]
        table(rows, ["rule", "subject", "state", "since", "value", "op", "fired", "resolved",
                     "last sent"], title="state")
    if doc["log"]:
        click.echo()
        rows = [[_when(a["at"]), a["rule"], a["subject"], a["event"], a["action"],
                 "ok" if a["ok"] else "FAILED", a["message"]] for a in doc["log"]]
        table(rows, ["at", "rule", "subject", "event", "action", "result", "message"],
              title="last actions")
    waiting = doc["outbox"]["waiting"]
    if waiting:
        click.echo(f"\n{waiting} message(s) waiting to be sent; next attempt "
                   f"{_when(doc['outbox']['next_at'])}")
