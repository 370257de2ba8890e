"""One ticket per incident, end to end: a real Prometheus (Debian's) evaluates the shipped rules
over twenty node endpoints, a real Alertmanager (Debian's prometheus-alertmanager) groups and
inhibits with the shipped example configuration, and a webhook receiver counts what arrives.
Everything on 127.0.0.1.

The nodes are small HTTP endpoints serving the exposition text of `slowdown-probe run`'s
``/metrics`` (the gauges the alerting rules read), with slowdowns the test sets: the real
service computes them once a minute against its baseline, far too slowly to move twenty of
them up and down in seconds. That the rules read what the real service exports is checked by
tests/test_prometheus.py, which evaluates every rule against real services.

Timings are shortened for the test and nothing else: scrapes and evaluations every second,
the alerts' ``for`` divided by 20 (2m -> 6s), Alertmanager's group_wait 1s and group_interval
2s."""

from __future__ import annotations

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.kit.alertmanagerkit import (
    RULES,
    Receiver,
    alertmanager_argv,
    fast_alertmanager,
    query,
    serve,
    start,
    stop,
)
from tests.kit.grafanakit import load_yaml
from tests.kit.metricskit import free_port
from tests.kit.servicekit import wait_for

NODES = tuple(f"node{i:02d}" for i in range(1, 21))
OPS = ("data-read", "data-write", "md-stat", "md-read", "md-delete", "md-write")
FOR_DIVISOR = 20
TARGETS = ("work", "home")
STEP = 0.1  # seconds between two nodes turning slow or fast: the fleet does not move at once
# Seconds to wait for a notification that must not come: after a firing one, over a node
# alert's `for` (6 s) and a group_interval; after a resolve, two group_intervals.
QUIET_FIRING = 9.0
QUIET_RESOLVED = 5.0


class Fleet:
    """The slowdowns the node endpoints serve; set from the test, read by the scrapes."""

    def __init__(self) -> None:
        self.ratio = {(host, target): 1.0 for host in NODES for target in TARGETS}
        self.lock = threading.Lock()

    def set(self, host: str, target: str, ratio: float) -> None:
        with self.lock:
            self.ratio[host, target] = ratio

    def exposition(self, host: str) -> bytes:
        with self.lock:
            ratios = {target: self.ratio[host, target] for target in TARGETS}
        now = time.time()
        ratio, stuck, tick = ([f"# TYPE slowdown_{name} gauge"] for name in (
            "ratio", "stuck_seconds", "last_tick_timestamp_seconds"))
        for target, value in ratios.items():
            for window in ("1m", "10m", "1h"):
                for statistic in ("median", "q95"):
                    ratio.append(f'slowdown_ratio{{host="{host}",target="{target}",'
                                 f'window="{window}",statistic="{statistic}"}} '
                                 f'{value if window != "1h" else 1.0}')
            stuck += [f'slowdown_stuck_seconds{{host="{host}",target="{target}",op="{op}"}} 0'
                      for op in OPS]
            tick.append(f'slowdown_last_tick_timestamp_seconds{{host="{host}",'
                        f'target="{target}"}} {now - 1}')
        lines = [*ratio, *stuck, *tick,
                 "# TYPE slowdown_ratio_timestamp_seconds gauge",
                 f'slowdown_ratio_timestamp_seconds{{host="{host}"}} {now - 20}',
                 "# TYPE slowdown_pending_minutes gauge",
                 f'slowdown_pending_minutes{{host="{host}"}} 0', ""]
        return "\n".join(lines).encode()


def node_endpoint(fleet: Fleet, host: str) -> ThreadingHTTPServer:
    class Metrics(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = fleet.exposition(host)
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    return serve(Metrics)


def fast_rules(path: Path) -> dict:
    """The shipped rules with every alert's `for` divided by FOR_DIVISOR."""
    rules = load_yaml(RULES)
    for group in rules["groups"]:
        for rule in group["rules"]:
            if "for" in rule:
                m = re.fullmatch(r"(\d+)([sm])", rule["for"])
                assert m, rule["for"]
                seconds = int(m[1]) * (60 if m[2] == "m" else 1)
                rule["for"] = f"{seconds // FOR_DIVISOR}s"
    path.write_text(json.dumps(rules))  # JSON is YAML
    return rules


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    base = tmp_path_factory.mktemp("alerting")
    fleet, receiver = Fleet(), Receiver()
    endpoints = [node_endpoint(fleet, host) for host in NODES]
    fast_rules(base / "rules.yml")
    fast_alertmanager(base / "alertmanager.yml", receiver)
    am_port, prom_port = free_port(), free_port()
    procs = []
    try:
        am_url = f"http://127.0.0.1:{am_port}"
        procs.append(start(alertmanager_argv(base / "alertmanager.yml", base / "am-data",
                                             am_port),
                           base / "alertmanager.log", am_url, "Alertmanager"))
        (base / "prometheus.yml").write_text(json.dumps({
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(base / "rules.yml")],
            "alerting": {"alertmanagers": [
                {"static_configs": [{"targets": [f"127.0.0.1:{am_port}"]}]}]},
            "scrape_configs": [{"job_name": "slowdown", "static_configs": [{"targets": [
                f"127.0.0.1:{e.server_address[1]}" for e in endpoints]}]}],
        }))
        prom_url = f"http://127.0.0.1:{prom_port}"
        procs.append(start(
            ["prometheus", f"--config.file={base / 'prometheus.yml'}",
             f"--storage.tsdb.path={base / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{prom_port}"],
            base / "prometheus.log", prom_url, "Prometheus"))
        wait_for(lambda: len(query(prom_url, "target:slowdown_nodes:count == 20")) == 2,
                 30, what="every node scraped and counted")
        yield fleet, receiver, prom_url
    finally:
        for proc in reversed(procs):
            stop(proc)
        for e in endpoints:
            e.shutdown()
        receiver.server.shutdown()


def turn(fleet: Fleet, target: str, ratio: float) -> None:
    """The nodes change one after the other, as a fleet's nodes do (never all at once)."""
    for host in NODES:
        fleet.set(host, target, ratio)
        time.sleep(STEP)


def statuses(docs: list[dict]) -> list[str]:
    return [d["status"] for d in docs]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_slow_filesystem_is_one_ticket_a_slow_node_another(stack):
    """At once: "work" slow on all twenty nodes (the filesystem) and "home" slow on node07
    only (that node's own); one notification each, to different receivers; one resolve
    each."""
    fleet, receiver, prom_url = stack
    fleet.set("node07", "home", 15.0)
    turn(fleet, "work", 12.0)
    wait_for(lambda: receiver.at("/storage-team") and receiver.at("/node-owners"), 30,
             what="the storage team's and the node owners' notifications")
    time.sleep(QUIET_FIRING)

    (fired,) = receiver.at("/storage-team")
    assert fired["status"] == "firing" and fired["groupLabels"] == {"target": "work"}
    # One alert for twenty nodes; its warning is inhibited by the critical alert.
    (alert,) = fired["alerts"]
    assert alert["labels"]["alertname"] == "SlowdownFilesystemCritical", alert
    assert alert["labels"]["verdict"] == "filesystem"
    m = re.fullmatch(r"work is slow for the filesystem: (\d+) of 20 nodes see it more than "
                     r"10 times slower than usual", alert["annotations"]["summary"])
    assert m and 10 <= int(m[1]) <= 20, alert["annotations"]
    # Prometheus holds back the node alerts of "work": the verdict is the filesystem's.
    assert query(prom_url, 'target:slowdown_filesystem:verdict{target="work"} == 1')
    assert not query(prom_url, 'ALERTS{verdict="node", target="work"}')

    (fired,) = receiver.at("/node-owners")
    assert fired["status"] == "firing" and fired["groupLabels"] == {"target": "home"}
    # Both statistics are slow on node07: one alert per host and target (the worst
    # statistic), its warning inhibited by the critical alert.
    labels = [(a["labels"]["alertname"], a["labels"]["host"]) for a in fired["alerts"]]
    assert labels == [("SlowdownCritical", "node07")], labels
    assert all(a["labels"]["verdict"] == "node" for a in fired["alerts"])
    assert "1 of 20 nodes see home slow: this node's own" in \
        fired["alerts"][0]["annotations"]["description"]

    # They recover, the nodes one after the other: one resolve each, and nothing for the
    # nodes of "work" still slow after the others (fewer than half: their own verdict).
    fleet.set("node07", "home", 1.0)
    turn(fleet, "work", 1.0)
    wait_for(lambda: len(receiver.at("/storage-team")) == 2
             and len(receiver.at("/node-owners")) == 2, 30, what="the resolves")
    time.sleep(QUIET_RESOLVED)
    for path in ("/storage-team", "/node-owners"):
        fired, resolved = receiver.at(path)
        assert statuses([fired, resolved]) == ["firing", "resolved"], path
        assert resolved["groupKey"] == fired["groupKey"]
        assert all(a["status"] == "resolved" for a in resolved["alerts"])
