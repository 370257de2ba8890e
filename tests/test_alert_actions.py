"""The alert actions against real receivers: a real program, a local HTTP server, a local
SMTP server with STARTTLS and a login (aiosmtpd); and the dispatcher's timeouts and retries.

The receivers here are reused by tests/test_alerts.py and tests/long/test_alerts_e2e.py.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from slowdown.analysis.alerts import ServiceAlerts
from slowdown.analysis.alerts.actions import (
    ProcessGroups,
    command_argv,
    deliver,
    message_id,
    post_webhook,
    read_credentials,
    run_command,
    send_email,
)
from slowdown.analysis.alerts.dispatch import Dispatcher
from slowdown.analysis.alerts.notification import Notification, TemplateError, expand
from slowdown.analysis.alerts.state import enqueue
from slowdown.analysis.config import ActionConfig, Config, loads
from slowdown.analysis.store import Store
from tests.kit.alertkit import (
    SmtpReceiver,
    WebhookReceiver,
    calls,
    recorder_action,
    recorder_program,
    wait_until,
    webhook_action,
)
from tests.kit.metricskit import free_port

# -- receivers --------------------------------------------------------------------------------


@pytest.fixture
def webhook():
    with WebhookReceiver() as receiver:
        yield receiver


@pytest.fixture
def smtp(tmp_path, monkeypatch):
    receiver = SmtpReceiver(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(receiver.cafile))
    yield receiver
    receiver.close()


@pytest.fixture
def credentials(tmp_path) -> Path:
    """The credentials file of the receiver's login (user, then password, on their own lines)."""
    path = tmp_path / "smtp.credentials"
    path.write_text("slowdown\ns3cret:pw\n")
    return path


# -- notifications, actions and a program that records how it was called -----------------------


def note(**changes) -> Notification:
    base = dict(rule="work-slow", subject="work", target="work", op="md-stat", event="firing",
                severity="warning", value=12.3456, threshold=10.0, kind="slowdown",
                statistic="q95", window=600.0, host="node001", starts_at=1_800_000_000.0,
                details={"peak": 12.3456, "ops": {"md-stat": {"value": 12.3456, "count": 600}}})
    base.update(changes)
    return Notification(**base)


def command(*argv: str, timeout: float = 10.0) -> ActionConfig:
    return ActionConfig("command", {"argv": tuple(argv), "timeout": timeout})


def recorder(directory: Path, out: Path, *args: str) -> ActionConfig:
    """A command action running the recorder program, which appends to ``out``."""
    return command(sys.executable, str(recorder_program(directory)), str(out), *args)


def hook(url: str, timeout: float = 2.0, token_file=None, token_env=None) -> ActionConfig:
    return ActionConfig("webhook", {"url": url, "timeout": timeout, "token_file": token_file,
                                    "token_env": token_env})


def mail(port: int, credentials_file=None, starttls: bool = True, host: str = "localhost",
         timeout: float = 10.0) -> ActionConfig:
    return ActionConfig("email", {"to": ("storage@example.org", "oncall@example.org"),
                                  "from": "slowdown@node001", "smtp_host": host,
                                  "smtp_port": port, "starttls": starttls,
                                  "credentials_file": credentials_file, "timeout": timeout})


def rules_config(tmp_path: Path, actions: str, **rule: str) -> Config:
    """A configuration with one target and one rule ``r`` with the given actions."""
    keys = {"name": '"r"', "target": '"work"', "op": '"md-stat"', "statistic": '"median"',
            "window": '"1m"', "above": "5.0", "for": '"0s"', "clear_for": '"0s"', **rule}
    text = "\n".join([
        f'database = "{tmp_path / "alerts.db"}"', 'host = "node001"',
        "[[target]]", 'name = "work"', f'path = "{tmp_path / "work"}"', 'data_size = "16MiB"',
        "[[alert]]", *(f"{k} = {v}" for k, v in keys.items()), f"action = {actions}"])
    return loads(text)


def query(path: Path, sql: str) -> list[tuple]:
    with Store(path, readonly=True) as store:
        return store.conn.execute(sql).fetchall()


def outbox(path: Path) -> list[tuple]:
    return query(path, "SELECT id, event, type, attempts, done_at IS NOT NULL, ok "
                       "FROM alert_outbox ORDER BY id")


def alert_log(path: Path) -> list[tuple]:
    return query(path, "SELECT event, action, ok, message FROM alert_log ORDER BY id")


# -- templates --------------------------------------------------------------------------------

def test_templates_fill_each_argument_separately_and_refuse_anything_but_field_names():
    n = note()
    fields = n.fields()
    assert expand("{target}/{op}", fields) == "work/md-stat"
    assert expand("{value}", fields) == "12.346"
    assert expand("{value:.1f} > {threshold}", fields) == "12.3 > 10"
    assert expand("{window} {statistic} {state} {severity} {host} {rule}", fields) == \
        "10m q95 firing warning node001 work-slow"
    assert expand("{{literal}}", fields) == "{literal}"
    for bad in ("{nope}", "{target.__class__}", "{0}", "{op[0]}", "{value:zz}"):
        with pytest.raises(TemplateError):
            expand(bad, fields)
    assert command_argv(command("/bin/echo", "{target}", "a b {op}"), n) == \
        ["/bin/echo", "work", "a b md-stat"]


def test_a_field_with_shell_metacharacters_reaches_the_program_as_one_literal_argument(tmp_path):
    out, marker = tmp_path / "calls.jsonl", tmp_path / "pwned"
    evil = f"x; touch {marker} && echo $(touch {marker}) `touch {marker}` | cat > {marker} 'q\"*"
    n = note(target=evil, subject=evil)
    result = run_command(recorder(tmp_path, out, "{target}", "pre-{target}-post", "{summary}"), n)
    assert result.ok, result.message
    (call,) = calls(out)
    assert call["argv"][0] == evil
    assert call["argv"][1] == f"pre-{evil}-post"
    assert evil in call["argv"][2] and len(call["argv"]) == 3
    assert call["env"]["SLOWDOWN_TARGET"] == evil
    assert not marker.exists(), "something interpreted the value"


def test_the_command_gets_values_as_environment_and_the_document_on_stdin(tmp_path):
    out = tmp_path / "calls.jsonl"
    result = run_command(recorder(tmp_path, out, "{rule}", "{value}", "{state}"),
                         note(event="resolved", ends_at=1_800_000_600.0))
    assert result.ok and result.message == "exit 0"
    (call,) = calls(out)
    assert call["argv"] == ["work-slow", "12.346", "resolved"]
    env = call["env"]
    assert env["SLOWDOWN_RULE"] == "work-slow" and env["SLOWDOWN_STATE"] == "resolved"
    assert env["SLOWDOWN_VALUE"] == "12.346" and env["SLOWDOWN_THRESHOLD"] == "10"
    assert env["SLOWDOWN_WINDOW"] == "10m" and env["SLOWDOWN_WINDOW_SECONDS"] == "600"
    assert env["SLOWDOWN_STARTS_AT"] == "2027-01-15T08:00:00Z"
    assert env["SLOWDOWN_ENDS_AT_EPOCH"] == "1800000600"
    assert env["SLOWDOWN_INCIDENT"] == "node001/work-slow/work/1800000000"
    doc = json.loads(call["stdin"])
    assert doc["status"] == "resolved" and doc["alerts"][0]["endsAt"] == "2027-01-15T08:10:00Z"


def test_a_failing_or_missing_program_is_a_failed_attempt(tmp_path, monkeypatch):
    out = tmp_path / "calls.jsonl"
    monkeypatch.setenv("RECORDER_EXIT", "3")
    result = run_command(recorder(tmp_path, out), note())
    assert not result.ok and result.message.startswith("exit 3") and not result.retry
    result = run_command(command(str(tmp_path / "no-such-program")), note())
    assert not result.ok and "cannot run" in result.message
    result = run_command(command("/bin/echo", "{nope}"), note())
    assert not result.ok and "argv[2]" in result.message and not result.retry


def test_a_command_past_its_timeout_is_killed_with_its_whole_process_group(tmp_path):
    pids = tmp_path / "pids"
    script = tmp_path / "hang.py"
    script.write_text(
        "import os, subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'])\n"
        f"open({str(pids)!r}, 'w').write(f'{{os.getpid()}} {{child.pid}}')\n"
        "time.sleep(300)\n")
    groups = ProcessGroups()
    t0 = time.monotonic()
    result = run_command(command(sys.executable, str(script), timeout=1.5), note(), groups)
    took = time.monotonic() - t0
    assert not result.ok and "process group killed" in result.message
    assert took < 5, took
    for pid in map(int, pids.read_text().split()):
        wait_until(lambda p=pid: not Path(f"/proc/{p}").exists() or
                   Path(f"/proc/{p}/stat").read_text().split()[2] == "Z", 5, f"pid {pid} to die")
    assert groups.kill_all() == 0  # nothing left registered


# -- webhook ----------------------------------------------------------------------------------

def test_the_webhook_posts_an_alertmanager_like_document_with_a_bearer_token(webhook, tmp_path,
                                                                            monkeypatch):
    token = tmp_path / "token"
    token.write_text("tok-from-file\n")
    result = post_webhook(hook(webhook.url, token_file=token), note())
    assert result.ok and result.message.startswith("HTTP 200"), result.message
    monkeypatch.setenv("HOOK_TOKEN", "tok-from-env")
    assert post_webhook(hook(webhook.url, token_env="HOOK_TOKEN"),
                        note(event="resolved", ends_at=1_800_000_600.0)).ok
    first, second = webhook.answered()
    assert first["headers"]["Authorization"] == "Bearer tok-from-file"
    assert second["headers"]["Authorization"] == "Bearer tok-from-env"
    assert first["headers"]["Content-Type"] == "application/json"
    doc = first["body"]
    assert doc["version"] == "4" and doc["status"] == "firing" and doc["receiver"] == "slowdown"
    (alert,) = doc["alerts"]
    assert alert["labels"] == {"alertname": "work-slow", "target": "work", "op": "md-stat",
                               "host": "node001", "severity": "warning"}
    assert alert["annotations"]["summary"] == \
        "work on node001: slowdown of q95 over 10m 12.3 > 10 (warning)"
    assert "md-stat" in alert["annotations"]["description"]
    assert alert["startsAt"] == "2027-01-15T08:00:00Z"
    assert alert["endsAt"] == "0001-01-01T00:00:00Z" and alert["generatorURL"] == ""
    assert doc["slowdown"]["value"] == 12.3456 and doc["slowdown"]["threshold"] == 10.0
    resolved = second["body"]
    assert resolved["status"] == "resolved"
    assert resolved["alerts"][0]["endsAt"] == "2027-01-15T08:10:00Z"
    # One incident: the same group key and fingerprint, the same start.
    assert resolved["groupKey"] == doc["groupKey"]
    assert resolved["alerts"][0]["fingerprint"] == alert["fingerprint"]
    assert resolved["alerts"][0]["startsAt"] == alert["startsAt"]


def test_webhook_failures_say_whether_a_retry_may_help(webhook, tmp_path):
    webhook.script = [503, 400, 302, 429]
    results = [post_webhook(hook(webhook.url), note()) for _ in range(4)]
    assert [(r.ok, r.retry) for r in results] == \
        [(False, True), (False, False), (False, False), (False, True)]
    assert results[0].message.startswith("HTTP 503")
    assert "not retried" in results[1].message
    assert len(webhook.answered()) == 4, "a redirect was followed"
    missing = post_webhook(hook(webhook.url, token_file=tmp_path / "absent"), note())
    assert not missing.ok and "token_file" in missing.message
    closed = post_webhook(hook(f"http://127.0.0.1:{free_port()}/x"), note())
    assert not closed.ok and closed.retry and "cannot reach" in closed.message


def test_a_hanging_webhook_times_out(webhook):
    webhook.script = ["hang"]
    t0 = time.monotonic()
    result = post_webhook(hook(webhook.url, timeout=1.0), note())
    assert not result.ok and result.retry
    assert time.monotonic() - t0 < 3


# -- e-mail -----------------------------------------------------------------------------------

def test_email_goes_through_starttls_with_the_credentials_file(smtp, credentials):
    result = send_email(mail(smtp.port, credentials), note())
    assert result.ok, result.message
    assert send_email(mail(smtp.port, credentials),
                      note(event="resolved", ends_at=1_800_000_600.0)).ok
    first, second = smtp.messages
    assert first["tls"] and first["login"] == "slowdown"
    assert first["to"] == ["storage@example.org", "oncall@example.org"]
    msg = first["message"]
    assert msg["Subject"].startswith("[slowdown FIRING warning] work-slow: work on node001")
    assert msg["From"] == "slowdown@node001"
    assert "slowdown of q95 over 10m" in msg.get_content()
    assert msg["Message-ID"] == message_id(note(), "firing")
    reply = second["message"]
    assert reply["Subject"].startswith("[slowdown RESOLVED warning]")
    assert reply["In-Reply-To"] == msg["Message-ID"] and reply["References"] == msg["Message-ID"]


def test_email_failures_wrong_password_and_no_tls(smtp, credentials):
    credentials.write_text("slowdown:wrong\n")
    assert read_credentials(credentials) == ("slowdown", "wrong")
    result = send_email(mail(smtp.port, credentials), note())
    assert not result.ok and not result.retry and "login refused" in result.message
    credentials.write_text("slowdown\ns3cret:pw\n")
    plain = send_email(mail(smtp.port, credentials, starttls=False, host="smtp.invalid"), note())
    assert not plain.ok and "unencrypted" in plain.message
    smtp.fail_next = 1
    busy = send_email(mail(smtp.port, credentials), note())
    assert not busy.ok and busy.retry and "451" in busy.message
    down = send_email(mail(free_port(), credentials), note())
    assert not down.ok and down.retry
    assert smtp.messages == []


# -- the dispatcher: retries, timeouts, order, shutdown ------------------------------------------

def queue_messages(config: Config, *events: str) -> None:
    rule = config.alerts[0]
    with Store(config.database) as store:
        store.conn.execute("BEGIN IMMEDIATE")
        for event in events:
            enqueue(store.conn, rule, note(rule=rule.name, subject="work/md-stat", event=event,
                                           ends_at=1_800_000_600.0 if event == "resolved"
                                           else None), time.time())
        store.conn.execute("COMMIT")


def test_a_failing_receiver_is_retried_with_backoff_and_messages_keep_their_order(webhook,
                                                                                  tmp_path):
    config = rules_config(tmp_path, webhook_action(webhook.url))
    queue_messages(config, "firing", "resolved")
    webhook.script = [503, 500]
    dispatcher = Dispatcher(config, lambda: Store(config.database), backoff=(0.3, 0.6))
    dispatcher.start()
    try:
        wait_until(lambda: all(r[4] for r in outbox(config.database)), 15, "the deliveries")
    finally:
        dispatcher.close(2)
    statuses = [(r["answer"], r["body"]["status"]) for r in webhook.answered()]
    assert statuses == [(503, "firing"), (500, "firing"), (200, "firing"), (200, "resolved")]
    gaps = [b["at"] - a["at"] for a, b in zip(webhook.requests, webhook.requests[1:3])]
    assert gaps[0] >= 0.3 and gaps[1] >= 0.6, gaps
    assert [r[3:] for r in outbox(config.database)] == [(3, 1, 1), (1, 1, 1)]
    log = alert_log(config.database)
    assert [(e, ok) for e, _, ok, _ in log] == [("firing", 0), ("firing", 0), ("firing", 1),
                                                ("resolved", 1)]
    assert "attempt 1 of 3, next in 0.3s" in log[0][3]


def test_a_receiver_that_never_succeeds_is_given_up(tmp_path):
    with WebhookReceiver(default=502) as receiver:
        config = rules_config(tmp_path, webhook_action(receiver.url))
        queue_messages(config, "firing")
        assert Dispatcher(config, lambda: Store(config.database), backoff=(0.1, 0.1)).drain(10)
        assert len(receiver.answered()) == 3
    assert outbox(config.database)[0][3:] == (3, 1, 0)
    assert "gave up after 3 attempts" in alert_log(config.database)[-1][3]


def test_a_hanging_receiver_blocks_neither_evaluation_nor_other_actions(tmp_path):
    """Two actions: a webhook that hangs, and a command. The command's message goes out at
    once, evaluation returns at once, the webhook times out and is retried."""
    out = tmp_path / "calls.jsonl"
    with WebhookReceiver() as receiver:
        receiver.script = ["hang", "hang"]
        command_action = recorder_action(tmp_path, out, "{state}")
        actions = f"[{webhook_action(receiver.url, '1s')}, {command_action}]"
        config = rules_config(tmp_path, actions, kind='"stuck"', above='"10s"')
        alerts = ServiceAlerts(config, backoff=(0.5, 0.5, 0.5))
        try:
            now = time.time()
            t0 = time.monotonic()
            transitions = alerts.evaluate(now, live_stuck={("work", "md-stat"): 42.0})
            took = time.monotonic() - t0
            assert [t.event for t in transitions] == ["firing"]
            assert took < 0.5, f"evaluation took {took:.2f} s"
            wait_until(lambda: calls(out), 5, "the command")
            assert receiver.answered() == receiver.answered("hang"), "the webhook answered"
            t0 = time.monotonic()
            alerts.evaluate(now + 60, live_stuck={("work", "md-stat"): 102.0})
            assert time.monotonic() - t0 < 0.5
            wait_until(lambda: receiver.answered(200), 15, "the webhook's retry")
        finally:
            alerts.close(2)
    assert [r["answer"] for r in receiver.answered()] == ["hang", "hang", 200]
    log = alert_log(config.database)
    assert sum(1 for e, a, ok, _ in log if ok and a.startswith("webhook")) == 1
    assert sum(1 for e, a, ok, _ in log if ok and a.startswith("command")) == 1


def test_a_stop_during_a_hanging_delivery_is_quick_and_the_message_goes_out_after_restart(
        tmp_path):
    with WebhookReceiver() as receiver:
        receiver.script = ["hang"]
        config = rules_config(tmp_path, webhook_action(receiver.url, "30s"))
        queue_messages(config, "firing")
        first = Dispatcher(config, lambda: Store(config.database))
        first.start()
        wait_until(lambda: receiver.answered("hang"), 5, "the hanging attempt")
        t0 = time.monotonic()
        first.close(0.5)
        assert time.monotonic() - t0 < 2
        assert outbox(config.database)[0][3:] == (0, 0, None), "the cut-off counted"
        assert Dispatcher(config, lambda: Store(config.database)).drain(10)
        assert [r["answer"] for r in receiver.answered()] == ["hang", 200]
    assert outbox(config.database)[0][3:] == (1, 1, 1)


def test_a_crash_mid_delivery_leaves_a_lease_that_runs_out(tmp_path, webhook):
    """A process killed mid-attempt cannot release its row: the lease expires and the next
    dispatcher sends the message; before that, nobody else takes it."""
    config = rules_config(tmp_path, webhook_action(webhook.url, "1s"))
    queue_messages(config, "firing")
    with Store(config.database) as store:
        store.conn.execute("UPDATE alert_outbox SET lease_until = ?", (time.time() + 2,))
    dispatcher = Dispatcher(config, lambda: Store(config.database))
    assert not dispatcher.drain(0.5)
    assert webhook.answered() == []
    time.sleep(2)
    assert Dispatcher(config, lambda: Store(config.database)).drain(5)
    assert len(webhook.answered()) == 1


def test_email_through_the_dispatcher_is_retried(smtp, credentials, tmp_path):
    config = rules_config(tmp_path, f'{{ type = "email", to = "ops@example.org", smtp_host = '
                                    f'"localhost", smtp_port = {smtp.port}, starttls = true, '
                                    f'credentials_file = "{credentials}" }}')
    queue_messages(config, "firing")
    smtp.fail_next = 1
    assert Dispatcher(config, lambda: Store(config.database), backoff=(0.2,)).drain(15)
    assert len(smtp.messages) == 1 and smtp.messages[0]["to"] == ["ops@example.org"]
    assert [(e, ok) for e, _, ok, _ in alert_log(config.database)] == [("firing", 0),
                                                                       ("firing", 1)]


def test_deliver_never_raises(tmp_path):
    bogus = ActionConfig("pager", {"timeout": 1.0})
    result = deliver(bogus, note())
    assert not result.ok and not result.retry


def test_the_test_message_goes_through_the_real_actions_from_the_command_line(webhook,
                                                                             tmp_path):
    from click.testing import CliRunner

    from slowdown.analysis.cli.alerts import alerts

    out = tmp_path / "calls.jsonl"
    actions = recorder_action(tmp_path, out, "{event}", "{value}")
    config = rules_config(tmp_path, f"[{webhook_action(webhook.url)}, {actions}]")
    runner = CliRunner()
    no_db = runner.invoke(alerts, ["--test", "r"], obj={"config": lambda: config})
    assert no_db.exit_code == 0 and "not logged" in no_db.output
    assert not config.database.exists(), "a test message created a database"
    webhook.requests.clear()
    (tmp_path / "calls.jsonl").unlink()
    Store(config.database).close()  # as the service leaves it
    done = runner.invoke(alerts, ["--test", "r"], obj={"config": lambda: config})
    assert done.exit_code == 0, done.output
    assert done.output.count("ok    ") == 2
    (call,) = calls(out)
    assert call["argv"] == ["test", "5"]
    (request,) = webhook.answered()
    assert request["body"]["slowdown"]["event"] == "test"
    assert request["body"]["alerts"][0]["annotations"]["summary"].startswith("TEST: ")
    assert [(e, ok) for e, _, ok, _ in alert_log(config.database)] == [("test", 1), ("test", 1)]
    webhook.default = 500
    failed = runner.invoke(alerts, ["--test", "r"], obj={"config": lambda: config})
    assert failed.exit_code == 1 and "FAILED" in failed.output
    unknown = runner.invoke(alerts, ["--test", "nope"], obj={"config": lambda: config})
    assert unknown.exit_code == 2 and "known: r" in unknown.output
