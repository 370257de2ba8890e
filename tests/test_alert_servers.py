"""An alert's message names the slow server the per-server records name, in the verdict's words.

A real database holds an hour of quiet data-reads over four bricks (the baseline) and ten
minutes in which brick 3 serves them 12x slower, minutes and per-server records as a node's
service writes them (testdata/serverkit.py); the service's alerts fire a rule on the q95, and
the real local receivers (an HTTP server, an SMTP server with STARTTLS and a login) get the
message. Without per-server records, or with every brick slow alike (none stands out), the
text is what it was before servers were named.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from slowdown.analysis.alerts import ServiceAlerts
from slowdown.analysis.config import Config, loads
from slowdown.analysis.stats import baseline
from slowdown.analysis.store import Store
from testdata.datakit import fill, lognormal
from testdata.serverkit import server_names, write_fleet
from tests.kit.alertkit import SmtpReceiver, WebhookReceiver, wait_until

T0 = 1_790_000_400  # a multiple of 600
HOUR = 6  # tens of quiet data before the slow ten
NOW = T0 + (HOUR + 1) * 600 + 1.5  # just after the slow ten's last minute was flushed
SLOW = "h3:/bricks/b3"
BEFORE = re.compile(r"work data-read on node001: slowdown of q95 over 10m [\d.]+ > 3 "
                    r"\(warning\)")


@pytest.fixture
def receivers(tmp_path, monkeypatch):
    smtp = SmtpReceiver(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(smtp.cafile))
    (tmp_path / "smtp.credentials").write_text("slowdown\ns3cret:pw\n")
    with WebhookReceiver() as hook:
        yield hook, smtp
    smtp.close()


def configure(tmp_path: Path, hook: WebhookReceiver, smtp: SmtpReceiver) -> Config:
    return loads("\n".join([
        f'database = "{tmp_path / "n1.db"}"', 'host = "node001"',
        "[[target]]", 'name = "work"', f'path = "{tmp_path / "work"}"', 'data_size = "16MiB"',
        "[[alert]]", 'name = "work-slow"', 'target = "work"', 'op = "data-read"',
        'statistic = "q95"', 'window = "10m"', "above = 3.0", 'for = "0s"',
        f'action = [{{ type = "webhook", url = "{hook.url}", timeout = "5s" }}, '
        f'{{ type = "email", to = ["storage@example.org"], from = "slowdown@node001", '
        f'smtp_host = "localhost", smtp_port = {smtp.port}, starttls = true, '
        f'credentials_file = "{tmp_path / "smtp.credentials"}", timeout = "10s" }}]', ""]))


def with_baseline(db: Path) -> None:
    with Store(db) as store:
        baseline.rebaseline(store, T0 + HOUR * 600, "quiet hour", T0, T0 + HOUR * 600)


def fire(config: Config, hook: WebhookReceiver, smtp: SmtpReceiver) -> tuple[dict, object]:
    """Evaluate as the service does after the flush; the webhook's document and the mail."""
    alerts = ServiceAlerts(config)
    try:
        (fired,) = [t for t in alerts.evaluate(NOW) if t.event]
        assert fired.event == "firing"
        wait_until(lambda: hook.answered() and smtp.messages, 20, "both receivers")
    finally:
        alerts.close(5)
    (request,) = hook.answered()
    (mail,) = smtp.messages
    return request["body"], mail["message"]


def test_the_message_names_the_slow_brick_in_the_verdicts_words(tmp_path, receivers):
    hook, smtp = receivers
    config = configure(tmp_path, hook, smtp)
    write_fleet(tmp_path, 1, 4, T0, HOUR + 1, slow={SLOW: 12.0}, slow_tens=[HOUR], seed=3)
    with_baseline(config.database)
    doc, mail = fire(config, hook, smtp)
    summary = doc["alerts"][0]["annotations"]["summary"]
    match = re.fullmatch(BEFORE.pattern + r"; filesystem: (.+)", summary)
    assert match, summary
    note = match.group(1)
    named = re.fullmatch(r"h3:/bricks/b3 (\d+)x, the others (\d\.\d)x", note)
    assert named and 9 <= int(named.group(1)) <= 16 and 0.7 <= float(named.group(2)) <= 1.4, \
        note
    description = doc["alerts"][0]["annotations"]["description"]
    assert re.search(r"\n  h3:/bricks/b3  \d+x expected, \d+x the others, \d+ probes "
                     r"\(data-read\)\n", description), description
    (server,) = doc["slowdown"]["servers"]
    assert server["server"] == SLOW and server["word"] == "slow" and server["probes"] >= 100
    assert server["ops"] == ["data-read"] and 9 <= server["slowdown"] <= 16
    assert "servers" not in doc["slowdown"]["details"]
    # The mail: its subject carries the summary, its body the description.
    assert mail["Subject"] == f"[slowdown FIRING warning] work-slow: {summary}"
    body = mail.get_body(("plain",)).get_content()
    assert f"filesystem: {note}" in body and "Slow servers" in body
    # The quiet bricks are not named.
    others = [b for b in server_names(4) if b != SLOW]
    assert not any(b in summary or b in description for b in others)


def test_without_per_server_records_the_text_is_as_before(tmp_path, receivers):
    hook, smtp = receivers
    config = configure(tmp_path, hook, smtp)
    db = config.database
    fill(db, T0, HOUR * 10, lognormal(0.004, 0.5), ops=("data-read",), seed=1, host="n1",
         targets=("work",))
    fill(db, T0 + HOUR * 600, 10, lognormal(0.04, 0.5), ops=("data-read",), seed=2,
         host="n1", targets=("work",))
    with_baseline(db)
    doc, mail = fire(config, hook, smtp)
    summary = doc["alerts"][0]["annotations"]["summary"]
    assert BEFORE.fullmatch(summary), summary
    description = doc["alerts"][0]["annotations"]["description"]
    assert "Slow servers" not in description and "filesystem" not in description
    assert doc["slowdown"]["servers"] == []
    assert mail["Subject"] == f"[slowdown FIRING warning] work-slow: {summary}"


def test_every_brick_slow_alike_names_none(tmp_path, receivers):
    """The filesystem slow as a whole: the records name no server, the text is as before."""
    hook, smtp = receivers
    config = configure(tmp_path, hook, smtp)
    write_fleet(tmp_path, 1, 4, T0, HOUR + 1, slow=dict.fromkeys(server_names(4), 12.0),
                slow_tens=[HOUR], seed=4)
    with_baseline(config.database)
    doc, _ = fire(config, hook, smtp)
    summary = doc["alerts"][0]["annotations"]["summary"]
    assert BEFORE.fullmatch(summary), summary
    assert doc["slowdown"]["servers"] == []
    assert "Slow servers" not in doc["alerts"][0]["annotations"]["description"]

