"""Prometheus: the rules under promtool, then a real Prometheus (Debian's, on 127.0.0.1)
scraping two real services, with every rule and every PromQL panel query of the fleet
dashboard run against it, and the fleet quantile checked against the hosts' databases."""

from __future__ import annotations

import json
import math
import subprocess
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from slowdown.analysis.histogram import mapping_for, rank
from slowdown.analysis.store import Selection, Store, aggregate
from slowdown.probe.exporters.metrics import EXPORT_SCALE, bucket_bounds
from tests.kit.alertmanagerkit import is_ready, stop
from tests.kit.grafanakit import (
    FLEET,
    grafana_reader,
    interpolate,
    load_yaml,
    node_values,
    queries,
    run,
    run_node_dashboard,
)
from tests.kit.metricskit import config_text, free_port
from tests.kit.servicekit import (
    output,
    probe_cli,
    start_service,
    stop_service,
    unclean_stop,
    wait_for,
)

ROOT = Path(__file__).resolve().parents[1]
RULES = ROOT / "prometheus" / "slowdown.rules.yml"
OPS = ("data-read", "data-write", "md-stat", "md-read", "md-delete", "md-write")
HOSTS = ("alpha", "beta")
TARGETS = ("home", "work")
# Grafana's own variables, as Grafana would fill them for a short range.
BUILTINS = {"$__rate_interval": "1m", "$__interval": "15s", "$__range": "2m"}
# Recorded from the hourly group only: empty until a whole hour of data exists.
HOURLY_ONLY = {"target_op_le:slowdown_op_latency_seconds_bucket:increase30d"}


def test_rules_pass_promtool_check_and_their_unit_tests(tmp_path):
    done = subprocess.run(["promtool", "check", "rules", str(RULES)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and "SUCCESS" in done.stdout, done.stdout + done.stderr
    tests = sorted((ROOT / "prometheus" / "tests").glob("*.yml"))
    assert tests
    done = subprocess.run(["promtool", "test", "rules", *map(str, tests)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    example = (ROOT / "prometheus" / "prometheus.example.yml").read_text()
    config = tmp_path / "prometheus.yml"
    config.write_text(example.replace("/etc/prometheus/slowdown.rules.yml", str(RULES)))
    done = subprocess.run(["promtool", "check", "config", str(config)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_alertmanager_example_routes_each_alert_by_its_verdict():
    """The filesystem's alerts go to the storage team, the nodes' and the service's health
    to the nodes' owners (tests/test_alertmanager.py runs it for real)."""
    example = ROOT / "prometheus" / "alertmanager.example.yml"
    done = subprocess.run(["amtool", "check-config", str(example)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and "SUCCESS" in done.stdout, done.stdout + done.stderr
    alerts = [r for g in load_yaml(RULES)["groups"] for r in g["rules"] if "alert" in r]
    verdicts = {r["alert"]: r["labels"].get("verdict") for r in alerts}
    assert set(verdicts.values()) == {"filesystem", "node", None}, verdicts
    for name, verdict in verdicts.items():
        receiver = "storage-team" if verdict == "filesystem" else "node-owners"
        labels = [f"alertname={name}", "target=work", "host=node001",
                  *([f"verdict={verdict}"] if verdict else [])]
        done = subprocess.run(["amtool", "config", "routes", "test", f"--config.file={example}",
                               f"--verify.receivers={receiver}", *labels],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, (name, done.stdout + done.stderr)


# -- a fleet of two services and a Prometheus ---------------------------------------------------

@dataclass
class Fleet:
    url: str
    databases: dict[str, Path]
    ports: dict[str, int]
    services: dict[str, subprocess.Popen]
    started: float
    stopped: float | None = None
    logs: list[str] = field(default_factory=list)

    def api(self, path: str, **params) -> object:
        query = urllib.parse.urlencode(params, doseq=True)
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=30) as r:
            doc = json.loads(r.read())
        assert doc["status"] == "success", doc
        return doc["data"]

    def query(self, expr: str, at: float | None = None) -> list[dict]:
        data = self.api("query", query=expr, **({"time": at} if at else {}))
        assert data["resultType"] in ("vector", "scalar"), data
        return data["result"] if data["resultType"] == "vector" else [data["result"]]

    def stop(self) -> None:
        """Stop both services (once): their exit flush writes the last minute."""
        if self.stopped is None:
            for host, proc in self.services.items():
                _, out = stop_service(proc)
                assert proc.returncode == 0, out
                self.logs.append(f"{host}: {out}")
            self.stopped = time.time()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    base = tmp_path_factory.mktemp("fleet")
    dirs = {t: base / t for t in TARGETS}
    for d in dirs.values():
        d.mkdir()
    databases, ports, configs = {}, {}, {}
    for host in HOSTS:  # both hosts probe the same directories, each in its own workspace
        databases[host] = base / host / "slowdown.db"
        ports[host] = free_port()
        configs[host] = base / f"{host}.toml"
        configs[host].write_text(config_text(databases[host], host, dirs,
                                             f"127.0.0.1:{ports[host]}"))
        done = probe_cli(configs[host], "prepare", "--no-progress")
        assert done.returncode == 0, done.stderr
    prom_port = free_port()
    # The nodes as docs/DEPLOY.md lists them: a file for Prometheus's file-based discovery.
    (base / "slowdown-nodes.json").write_text(json.dumps(
        [{"targets": [f"127.0.0.1:{ports[h]}" for h in HOSTS]}]))
    (base / "prometheus.yml").write_text(json.dumps({  # JSON is YAML
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(RULES)],
        "scrape_configs": [{"job_name": "slowdown", "file_sd_configs": [
            {"files": [str(base / "slowdown-nodes.json")], "refresh_interval": "5s"}]}],
    }))
    log = (base / "prometheus.log").open("w")
    prometheus = subprocess.Popen(
        ["prometheus", f"--config.file={base / 'prometheus.yml'}",
         f"--storage.tsdb.path={base / 'tsdb'}", f"--web.listen-address=127.0.0.1:{prom_port}"],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    services = {}
    try:
        url = f"http://127.0.0.1:{prom_port}"
        wait_for(lambda: is_ready(url), 30, what="Prometheus")
        started = time.time()
        services = {h: start_service(configs[h]) for h in HOSTS}
        f = Fleet(url, databases, ports, services, started)
        # A minute flush has fed the slowdown gauges, and the fleet rules have evaluated.
        wait_for(lambda: len(f.query('slowdown_ratio{window="1m", statistic="median"}')) == 4,
                 130, step=1, what="the slowdown gauges of both hosts")
        wait_for(lambda: f.query('target:slowdown_ratio:fleet{window="1m"}'), 70, step=1,
                 what="the fleet recording rules")
        # The per-server group evaluates once a minute: its first evaluation may come before
        # the services' first ops, and the next one a minute later.
        wait_for(lambda: f.query("target_probe_server:slowdown_server_op_seconds:over_median10m"),
                 130, step=1, what="the per-server recording rules")
        time.sleep(2)  # a few more scrapes after the flush
        yield f
    finally:
        unclean = {host: unclean_stop(proc) for host, proc in services.items()}
        stop(prometheus)
        log.close()
    # The services a test left running stop cleanly on SIGTERM too.
    assert not any(unclean.values()), unclean


def fleet_values() -> dict[str, object]:
    return {"host": list(HOSTS), "target": list(TARGETS), "op": list(OPS),
            "statistic": "median"}


def promql(text: str, values: dict[str, object]) -> str:
    for name, value in BUILTINS.items():
        text = text.replace(name, value)
    text = interpolate(text, values)
    assert "$" not in text, text
    return text


def finite(sample: dict) -> bool:
    values = [sample["value"]] if "value" in sample else sample["values"]
    return any(math.isfinite(float(v)) for _, v in values)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_every_promql_panel_query_and_rule_runs(fleet):
    values = fleet_values()
    for variable in FLEET["templating"]["list"]:
        if variable["type"] != "query":
            continue
        match = variable["definition"]
        name = match[len("label_values("):-1].rsplit(",", 1)
        got = fleet.api(f"label/{name[1].strip()}/values",
                        **{"match[]": promql(name[0], values)})
        assert got == sorted(values[variable["name"]]), (variable["name"], got)
    now = time.time()
    for panel, target in queries(FLEET, "slowdown-prometheus"):
        for op in (OPS if panel.get("repeat") == "op" else [None]):
            scoped = dict(values, op=op) if op else values
            expr = promql(target["expr"], scoped)
            what = (panel["title"], target["refId"], op, expr)
            if target["instant"]:
                result = fleet.query(expr, now)
            else:
                data = fleet.api("query_range", query=expr, start=now - 120, end=now, step=5)
                result = data["result"]
            assert result and any(finite(s) for s in result), what
            if target["format"] == "heatmap":
                les = {s["metric"]["le"] for s in result}
                assert les == {*map(_le, bucket_bounds()), "+Inf"}, what
            if panel["type"] == "trend":
                points = sorted((float(s["metric"]["le"]), float(s["value"][1])) for s in result)
                shares = [v for _, v in points]
                # A cumulative share in percent, from a ratio of two floating sums: equal
                # sums may give 100.00000000000001.
                slack = 1e-9
                assert all(b >= a - slack for a, b in zip(shares, shares[1:])), what
                assert shares[0] >= 0 and shares[-1] <= 100 + slack, what
    # Every rule's expression runs now, and the evaluated rules are healthy.
    for group in load_yaml(RULES)["groups"]:
        for rule in group["rules"]:
            result = fleet.query(rule["expr"], now)
            if "record" in rule and rule["record"] not in HOURLY_ONLY:
                assert result, rule
    # The fleet's verdict counts both services for each target (their gauges are fresh).
    for record in ("target:slowdown_nodes:count", "target:slowdown_nodes_probing:count"):
        got = {s["metric"]["target"]: float(s["value"][1]) for s in fleet.query(record, now)}
        assert got == dict.fromkeys(TARGETS, 2.0), (record, got)
    verdicts = fleet.query("target:slowdown_filesystem:verdict", now)
    assert sorted(s["metric"]["target"] for s in verdicts) == sorted(TARGETS), verdicts
    for group in fleet.api("rules")["groups"]:
        for rule in group["rules"]:
            assert rule["health"] in ("ok", "unknown") and not rule.get("lastError"), rule
        if group["name"] == "slowdown-fleet":
            assert all(r["health"] == "ok" for r in group["rules"]), group
    # The SQL dashboard reads a live database (WAL, written once a minute) as Grafana does.
    with grafana_reader(fleet.databases["alpha"]) as conn:
        assert node_values(conn)["host"] == "alpha"
        assert run(conn, "SELECT count(*) FROM minutes")[1][0][0] > 0
    run_node_dashboard(fleet.databases["alpha"], fleet.started - 60, time.time() + 60)


def _le(bound: float) -> str:
    from prometheus_client.utils import floatToGoString

    return floatToGoString(bound)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_fleet_quantile_is_the_merged_histograms_within_one_bucket(fleet):
    """histogram_quantile over both hosts' buckets (sum by le) against the quantile of the
    two databases' histograms merged: the same bucket of the exported scale, or the next."""
    fleet.stop()
    mapping = mapping_for(EXPORT_SCALE)
    stores = [Store(fleet.databases[h], readonly=True) for h in HOSTS]
    try:
        for op in OPS:
            merged = aggregate(stores, Selection(targets=("work",), ops=(op,))).histogram
            sel = f'slowdown_op_latency_seconds_bucket{{target="work", op="{op}"}}'
            hosts = fleet.query(f"count by (host) (last_over_time({sel}[10m]))")
            assert {s["metric"]["host"] for s in hosts} == set(HOSTS)
            scraped = float(fleet.query(
                f'sum(last_over_time({sel.replace("_bucket{", "_count{")}[10m]))')[0]["value"][1])
            assert 0.9 * merged.count <= scraped <= merged.count, (op, scraped, merged.count)
            # The ops of the last seconds (after the last scrape) are in the databases only:
            # the scraped q-quantile is one of the merged values from its rank to that rank
            # plus the ops missed (a q99 of a few hundred ops is the 3rd largest: one slow op
            # after the last scrape moves it far).
            missed = merged.count - int(scraped)
            for q in (0.5, 0.9, 0.99):
                (sample,) = fleet.query(
                    f"histogram_quantile({q}, sum by (le) (last_over_time({sel}[10m])))")
                fleet_q = float(sample["value"][1])
                at = rank(q, int(scraped))
                low, high = merged.values_at_ranks([at, min(merged.count, at + missed)])
                assert mapping.index(low) - 1 <= mapping.index(fleet_q) \
                    <= mapping.index(high) + 1, (op, q, fleet_q, low, high, missed)
        # The per-server counters of the running services: a local directory names no
        # server, so each host has the one server "unknown", counting the ops its file has.
        got = fleet.query('sum by (host, server) (last_over_time(slowdown_server_ops_total'
                          '{target="work"}[10m]))')
        assert {(s["metric"]["host"], s["metric"]["server"]) for s in got} == \
            {(h, "unknown") for h in HOSTS}
        for sample, store in ((s, stores[HOSTS.index(s["metric"]["host"])]) for s in got):
            (stored,) = store.conn.execute(
                "SELECT sum(t.count) FROM server_tens t JOIN server_series s ON s.id = t.series "
                "WHERE s.target = 'work' AND s.server = 'unknown'").fetchone()
            assert 0.9 * stored <= float(sample["value"][1]) <= stored, (sample, stored)
    finally:
        for s in stores:
            s.close()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_every_sql_panel_runs_on_a_services_database(fleet):
    fleet.stop()
    database = fleet.databases["alpha"]
    with Store(database, readonly=True) as store:
        recs = list(store.records())
    minutes = sorted({r.start for r in recs})
    assert len(minutes) >= 2, minutes
    results = run_node_dashboard(database, fleet.started - 60, fleet.stopped + 60)
    # The heat map holds exactly the ops of each minute, none lost at the clamps.
    ((_, rows),) = [v for k, v in results.items() if k.startswith("Latency heat map")]
    per_minute = {m: sum(r.histogram.count for r in recs if r.start == m) for m in minutes}
    assert {r[0]: sum(r[1:]) for r in rows} == {m: n for m, n in per_minute.items() if n}
    # The percentiles are the records' own.
    for op in OPS:
        _, rows = results[f"Latency percentiles: $op/A/{op}"]
        assert {r[1] for r in rows} == set(TARGETS)
        for start, target, *ps in rows:
            (rec,) = [r for r in recs if (r.start, r.target, r.op) == (start, target, op)]
            assert ps == pytest.approx(rec.histogram.quantiles((0.5, 0.9, 0.95, 0.99)))
    # Provisional slowdowns near 1 for every target (a local directory, no load).
    (slow,) = [v for k, v in results.items() if k.startswith("Slowdown per target/A")]
    assert {r[1] for r in slow[1]} == set(TARGETS)
    assert all(0.02 < r[3] < 50 for r in slow[1]), slow
    assert "metrics endpoint on http://127.0.0.1" in output(fleet.services["alpha"])
