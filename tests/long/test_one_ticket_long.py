"""One ticket per incident with real services: three `slowdown-probe run` nodes probe two
targets on a FUSE filesystem; Debian's Prometheus evaluates the shipped rules unchanged
(their `for` of 2 minutes, the 10-minute window) over the nodes' real /metrics endpoints, and
Debian's Alertmanager runs the shipped example configuration (group_wait and group_interval
shortened to 10 s and 30 s). Everything on 127.0.0.1.

After three healthy minutes and a baseline taken from them, at the same moment:
- target "shared" turns slow for every node (20 ms more on every filesystem call under it):
  the filesystem. Exactly one notification reaches the storage team, none the node owners.
- target "own" turns slow for node3 only (the same delay, on node3's own workspace): that
  node's own. Exactly one notification reaches the node owners, for node3.
Then the delays end; each incident resolves with exactly one "resolved" notification.

Opt-in (tests/long, `--long`); about 20 minutes; needs root (a FUSE mount):

    python -m pytest --long -s tests/long/test_one_ticket_long.py

The result of a run is recorded in docs/ALERTS-e2e.md.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.kit.alertmanagerkit import (
    RULES,
    Receiver,
    alertmanager_argv,
    fast_alertmanager,
    query,
    start,
    stop,
)
from tests.kit.faultfs import FaultFS
from tests.kit.fixtures_fs import require_root
from tests.kit.metricskit import config_text, free_port
from tests.kit.servicekit import probe_cli, start_service, unclean_stop, wait_for

HOSTS = ("node1", "node2", "node3")
HEALTHY_MINUTES = 3
DELAY = 0.02  # seconds added to every filesystem call of a slow target


def say(t0: float, text: str) -> None:
    now = time.time()
    print(f"[{now - t0:6.0f}s {time.strftime('%H:%M:%SZ', time.gmtime(now))}] {text}",
          flush=True)


def sleep_until(when: float) -> None:
    time.sleep(max(0.0, when - time.time()))


def show(t0: float, receiver: Receiver) -> None:
    """Every notification so far: receiver, status, group, and its alerts."""
    with receiver.lock:
        got = list(receiver.got)
    for path, doc in got:
        alerts = ", ".join(f"{a['labels']['alertname']}"
                           f"{'/' + a['labels']['host'] if 'host' in a['labels'] else ''}"
                           f"/{a['status']}" for a in doc["alerts"])
        say(t0, f"  {path} {doc['status']} {doc['groupLabels']}: {alerts}")
        for a in doc["alerts"][:1]:
            say(t0, f"    {a['annotations'].get('summary')}")


def rebaseline(config: Path, since: int) -> None:
    done = subprocess.run([sys.executable, "-m", "slowdown.analysis.cli", "--config",
                           str(config), "rebaseline", "--reason", "healthy FUSE passthrough",
                           "--from", f"@{since}"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def ratios(prom_url: str) -> dict[str, dict[str, float]]:
    """target -> host -> the node's worst 10-minute slowdown, as the rules see it."""
    got: dict[str, dict[str, float]] = {}
    for s in query(prom_url, "target_host:slowdown_ratio:max10m"):
        got.setdefault(s["metric"]["target"], {})[s["metric"]["host"]] = \
            round(float(s["value"][1]), 1)
    return got


@pytest.mark.timeout(2400)
def test_a_slow_filesystem_is_one_ticket_with_real_services(tmp_path):
    require_root("a FUSE mount")
    t0 = time.time()
    receiver = Receiver()
    fast_alertmanager(tmp_path / "alertmanager.yml", receiver, group_wait="10s",
                      group_interval="30s")
    procs: list[subprocess.Popen] = []
    services: dict[str, subprocess.Popen] = {}
    with FaultFS(tmp_path / "backing", tmp_path / "mnt") as fs:
        try:
            dirs = {t: fs.mountpoint / t for t in ("shared", "own")}
            for d in dirs.values():
                d.mkdir()
            configs, ports = {}, {}
            for host in HOSTS:
                ports[host] = free_port()
                configs[host] = tmp_path / f"{host}.toml"
                configs[host].write_text(config_text(
                    tmp_path / host / "slowdown.db", host, dirs, f"127.0.0.1:{ports[host]}"))
                done = probe_cli(configs[host], "prepare", "--no-progress")
                assert done.returncode == 0, done.stderr
            am_port, prom_port = free_port(), free_port()
            am_url, prom_url = f"http://127.0.0.1:{am_port}", f"http://127.0.0.1:{prom_port}"
            procs.append(start(alertmanager_argv(tmp_path / "alertmanager.yml",
                                                 tmp_path / "am-data", am_port),
                               tmp_path / "alertmanager.log", am_url, "Alertmanager"))
            (tmp_path / "prometheus.yml").write_text(json.dumps({
                "global": {"scrape_interval": "5s", "evaluation_interval": "5s"},
                "rule_files": [str(RULES)],
                "alerting": {"alertmanagers": [
                    {"static_configs": [{"targets": [f"127.0.0.1:{am_port}"]}]}]},
                "scrape_configs": [{"job_name": "slowdown", "static_configs": [
                    {"targets": [f"127.0.0.1:{ports[h]}" for h in HOSTS]}]}],
            }))
            procs.append(start(["prometheus", f"--config.file={tmp_path / 'prometheus.yml'}",
                                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                                f"--web.listen-address=127.0.0.1:{prom_port}"],
                               tmp_path / "prometheus.log", prom_url, "Prometheus"))
            services = {h: start_service(configs[h]) for h in HOSTS}
            started = time.time()
            say(t0, f"{len(HOSTS)} services, Prometheus and Alertmanager started")

            # 1. Healthy minutes, then a baseline from them on every node.
            first_whole = (int(started) // 60 + 1) * 60
            sleep_until(first_whole + HEALTHY_MINUTES * 60 + 5)
            for host in HOSTS:
                assert services[host].poll() is None, host
                rebaseline(configs[host], first_whole)
            sleep_until((int(time.time()) // 60 + 1) * 60 + 15)  # gauges on the baseline
            say(t0, f"baseline from {HEALTHY_MINUTES} healthy minutes; {ratios(prom_url)}")
            counts = {s["metric"]["target"]: float(s["value"][1])
                      for s in query(prom_url, "target:slowdown_nodes:count")}
            assert counts == {"shared": 3.0, "own": 3.0}, counts
            assert receiver.got == []

            # 2. "shared" slow for every node, "own" for node3 alone.
            fs.delay("*", DELAY, path="shared/*")
            fs.delay("*", DELAY, path="own/.slowdown/node3/*")
            slowed = time.time()
            say(t0, f"delay {DELAY * 1000:.0f} ms on shared/ (all) and own/ (node3)")
            wait_for(lambda: receiver.at("/storage-team"), 360, step=1,
                     what="the storage team's notification")
            say(t0, f"storage team notified after {time.time() - slowed:.0f} s; "
                    f"{ratios(prom_url)}")
            wait_for(lambda: receiver.at("/node-owners"), 360, step=1,
                     what="the node owners' notification")
            say(t0, f"node owners notified after {time.time() - slowed:.0f} s")
            time.sleep(180)  # over a node alert's `for`, six group intervals
            say(t0, f"after 3 more minutes; {ratios(prom_url)}")
            show(t0, receiver)
            (storage,) = receiver.at("/storage-team")
            assert storage["groupLabels"] == {"target": "shared"}
            assert {a["labels"]["verdict"] for a in storage["alerts"]} == {"filesystem"}
            # One group for node3's alert on "own": its first notification and, if the
            # node's slowdown escalated from warning to critical meanwhile, its update.
            nodes = receiver.at("/node-owners")
            assert len({d["groupKey"] for d in nodes}) == 1, nodes
            assert all(d["status"] == "firing" for d in nodes), nodes
            assert nodes[0]["groupLabels"] == {"target": "own"}
            assert {a["labels"]["host"] for d in nodes for a in d["alerts"]} == {"node3"}
            assert {a["labels"]["verdict"] for d in nodes for a in d["alerts"]} == {"node"}
            firing_notifications = len(nodes)

            # 3. The delays end: one resolve each, once the 10-minute windows are healthy.
            fs.clear()
            cleared = time.time()
            say(t0, "delays cleared")
            wait_for(lambda: all(receiver.at(path)[-1]["status"] == "resolved"
                                 for path in ("/storage-team", "/node-owners")), 900, step=1,
                     what="both resolves")
            say(t0, f"both resolved after {time.time() - cleared:.0f} s; {ratios(prom_url)}")
            time.sleep(120)
            show(t0, receiver)
            docs = receiver.at("/storage-team")
            assert [d["status"] for d in docs] == ["firing", "resolved"], docs
            assert docs[0]["groupKey"] == docs[1]["groupKey"]
            docs = receiver.at("/node-owners")
            assert [d["status"] for d in docs] == \
                ["firing"] * firing_notifications + ["resolved"], docs
            assert len({d["groupKey"] for d in docs}) == 1, docs
            assert {a["labels"]["host"] for d in docs for a in d["alerts"]} == {"node3"}
            say(t0, f"done: {len(receiver.got)} notifications in all")
        finally:
            unclean = {host: unclean_stop(proc) for host, proc in services.items()}
            for proc in reversed(procs):
                stop(proc)
            receiver.server.shutdown()
        assert not any(unclean.values()), unclean  # each service stops cleanly on SIGTERM
