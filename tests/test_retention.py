"""Retention of every table that grows: the service removes old node context, alert log
entries, delivered outbox messages and (where asked) hourly records once an hour, and a read
of a moment before what is kept says so instead of answering from no data."""

from __future__ import annotations

import json

import numpy as np
import pytest

from slowdown.analysis.alerts.state import log_attempt
from slowdown.analysis.cli.main import main
from slowdown.analysis.config import ConfigError, loads
from slowdown.analysis.histogram import Histogram
from slowdown.analysis.store import Store
from slowdown.analysis.store.records import HOUR, NODE_FIELDS, NodeContext, Record
from slowdown.analysis.store.retention import KEPT_FROM
from slowdown.probe.daemon.service import Service
from testdata.datakit import utc
from tests.kit.cli_runner import runner

DAY = 86400
T0 = utc(2026, 1, 1)
NOW = T0 + 400 * DAY


def config_text(tmp_path, keep: str = "") -> str:
    return (f'database = "{tmp_path / "n1.db"}"\nhost = "n1"\nretention = "30d"\n{keep}'
            f'[[target]]\nname = "work"\npath = "{tmp_path}"\ndata_size = "16MiB"\n')


def fill(db) -> None:
    """400 days of hours, node context each day, an alert log line each day and an outbox
    message each day (delivered, but the oldest one still open); the last 30 days in
    minutes."""
    rng = np.random.default_rng(0)
    with Store(db) as store:
        records, node = [], []
        for day in range(400):
            t = T0 + day * DAY
            h = Histogram()
            h.record_many(rng.lognormal(-6, 0.3, 100))
            records.append(Record("n1", "work", "md-stat", t, h, span=HOUR))
            node.append(NodeContext("n1", t, dict.fromkeys(NODE_FIELDS, 1)))
        for m in range(0, 30 * DAY, 3600):
            h = Histogram()
            h.record_many(rng.lognormal(-6, 0.3, 10))
            records.append(Record("n1", "work", "md-stat", NOW - 30 * DAY + m, h))
        store.write(records, node)
        for day in range(400):
            t = T0 + day * DAY
            log_attempt(store.conn, t, "slow", "work", "firing", "command", True, "ok")
            store.conn.execute(
                "INSERT INTO alert_outbox (created, rule, subject, event, action, type, message,"
                " next_at, done_at, ok) VALUES (?, 'slow', 'work', 'firing', 0, 'command', '{}',"
                " ?, ?, 1)", (t, t, None if day == 0 else t + 60))


def count(db, sql: str) -> int:
    with Store(db, readonly=True) as store:
        return store.conn.execute(sql).fetchone()[0]


def test_the_hourly_maintenance_prunes_every_growing_table(tmp_path):
    db = tmp_path / "n1.db"
    fill(db)
    keep = '[keep]\nnode = "60d"\nalert_log = "100d"\nsent_alerts = "10d"\nhours = "200d"\n'
    Service(loads(config_text(tmp_path, keep), tmp_path / "slowdown.toml"))._hourly(NOW)
    assert count(db, "SELECT min(start) FROM node") >= NOW - 60 * DAY
    assert count(db, "SELECT count(*) FROM node") == 60
    assert count(db, "SELECT count(*) FROM alert_log") == 100
    # Delivered messages of the last 10 days, and the open one however old it is.
    assert count(db, "SELECT count(*) FROM alert_outbox WHERE done_at IS NOT NULL") == 10
    assert count(db, "SELECT count(*) FROM alert_outbox WHERE done_at IS NULL") == 1
    assert count(db, "SELECT min(start) FROM hours") >= NOW - 200 * DAY
    assert count(db, "SELECT count(*) FROM minutes") > 0  # younger than `retention`
    with Store(db, readonly=True) as store:
        kept = store.state(KEPT_FROM)
    assert kept["hours"] == NOW - 200 * DAY and kept["node"] == NOW - 60 * DAY


def test_defaults_keep_hours_and_follow_retention_for_node_context(tmp_path):
    db = tmp_path / "n1.db"
    fill(db)
    config = loads(config_text(tmp_path), tmp_path / "slowdown.toml")
    assert (config.keep.node, config.keep.hours) == (30 * DAY, None)
    Service(config)._hourly(NOW)
    assert count(db, "SELECT count(*) FROM hours") >= 400  # kept for good
    assert count(db, "SELECT count(*) FROM node") == 30
    assert count(db, "SELECT count(*) FROM alert_log") == 365


def run(*args: str):
    return runner().invoke(main, list(args), catch_exceptions=False)


def test_a_read_before_what_is_kept_says_so(tmp_path):
    db = tmp_path / "n1.db"
    fill(db)
    keep = '[keep]\nhours = "200d"\n'
    Service(loads(config_text(tmp_path, keep), tmp_path / "slowdown.toml"))._hourly(NOW)
    old = f"@{NOW - 300 * DAY}"
    for args in (["--at", old], ["history", "--since", f"@{NOW - 301 * DAY}", "--until", old],
                 ["stats", "--since", f"@{NOW - 301 * DAY}", "--until", old]):
        result = run("--db", str(db), *args)
        assert result.exit_code == 1, (args, result.output)
        assert "are removed ([keep] hours)" in result.stderr and str(db) in result.stderr
    # A range that begins before: a note on stderr, and the rows that are kept.
    result = run("history", "--db", str(db), "--since", f"@{NOW - 210 * DAY}", "--until",
                 f"@{NOW - 190 * DAY}", "--every", "1d", "--format", "json")
    assert result.exit_code == 0
    assert "begins before" in result.stderr
    rows = json.loads(result.stdout)["rows"]
    assert rows and min(r["count"] for r in rows) > 0
    # Older than the minutes but kept as hours: a 1-minute window is a share of its hour.
    result = run("--db", str(db), "--at", f"@{NOW - 100 * DAY + 1800}", "--json")
    assert result.exit_code == 0
    (work,) = json.loads(result.stdout)["targets"]
    one = next(w for w in work["windows"] if w["window"] == 60)
    assert one["ops"][0]["observed"] is not None


@pytest.mark.parametrize("keep, message", [
    ('hours = "10d"', "keep.hours: must be longer than retention (30d)"),
    ('node = "10s"', "keep.node: must be at least 1h"),
    ('sent_alerts = "soon"', 'keep.sent_alerts: expected a duration like "90d" or "forever"'),
    ("logs = 1", "keep.logs: unknown key"),
])
def test_bad_keep_values_are_named(tmp_path, keep, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        loads(config_text(tmp_path, f"[keep]\n{keep}\n"), tmp_path / "slowdown.toml")
