"""Per-server counters on /metrics: what each server served, equal to the per-server records
the service writes, within ``[metrics] max_servers`` (the rest in ``server="other"``, adding
up), scraped by a real Prometheus that sums them per server.

A real Service object (its recorder, metrics and database; not running: no resolver-bearing
filesystem runs in a fast test) is told which server served each op, as the runner tells it
(``Recorder.served`` after ``result``), and flushes into a real SQLite file.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from slowdown.analysis.config import ConfigError, loads
from slowdown.analysis.store import Store
from slowdown.analysis.store.server_records import UNKNOWN
from slowdown.analysis.words import DATA_OPS, MD_OPS, OPS
from slowdown.probe.daemon.service import Service
from tests.kit.alertmanagerkit import is_ready, stop
from tests.kit.metricskit import config_text, free_port
from tests.kit.servicekit import wait_for

BRICKS = tuple(f"h{i}:/bricks/b{i}" for i in range(1, 5))
PROBE = {**dict.fromkeys(DATA_OPS, "data"), **dict.fromkeys(MD_OPS, "md")}


def service(tmp_path: Path, max_servers: int | None = None, listen: str = "",
            host: str = "n1") -> Service:
    text = config_text(tmp_path / "n1.db", host, {"work": tmp_path / "work"}, listen,
                       max_servers=max_servers)
    return Service(loads(text, tmp_path / "slowdown.toml"))


def samples(registry) -> dict[str, dict[tuple, float]]:
    """name -> {(target, probe, server) or (target,): value}."""
    found: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in family.samples:
            if s.name.startswith("slowdown_server"):
                key = tuple(s.labels[k] for k in ("target", "probe", "server") if k in s.labels)
                found.setdefault(s.name, {})[key] = s.value
    return found


def feed(s: Service, now: float, servers=BRICKS, rounds: int = 20) -> dict[tuple, list]:
    """Ops as a worker reports them: each op's result, then its server; brick 3 slow, one
    error per brick and op, and some ops whose server was unknown. Returns what was fed per
    (probe, server): [ops with a latency, their seconds, errors]."""
    fed: dict[tuple, list] = {}
    for r in range(rounds):
        for i, op in enumerate(OPS):
            server = servers[(r + i) % len(servers)] if r % 5 else UNKNOWN
            latency = None if r == 7 else 0.002 * (12 if server.endswith("b3") else 1)
            wall = now + r
            s.recorder.result("work", op, latency, wall)
            s.recorder.served("work", op, server, latency, wall)
            counts = fed.setdefault((PROBE[op], server), [0, 0.0, 0])
            if latency is None:
                counts[2] += 1
            else:
                counts[0] += 1
                counts[1] += latency
    return fed


def test_the_counters_are_the_ops_each_server_served_as_the_database_has_them(tmp_path):
    s = service(tmp_path)
    now = (time.time() // 600) * 600 + 5
    fed = feed(s, now)
    got = samples(s.metrics.registry)
    with Store(tmp_path / "n1.db") as store:
        assert s.recorder.flush(store, now + 600)
    with Store(tmp_path / "n1.db", readonly=True) as store:
        rows = store.conn.execute(
            "SELECT s.op, s.server, t.count, t.errors FROM server_tens t "
            "JOIN server_series s ON s.id = t.series").fetchall()
    stored: dict[tuple, list[int]] = {}
    for op, server, count, errors in rows:
        kept = stored.setdefault((PROBE[op], server), [0, 0])
        kept[0] += count
        kept[1] += errors
    assert set(stored) == set(fed) and (("data", UNKNOWN) in stored)
    for (probe, server), (count, errors) in stored.items():
        key = ("work", probe, server)
        assert got["slowdown_server_ops_total"][key] == count == fed[(probe, server)][0]
        assert got["slowdown_server_op_errors_total"][key] == errors == fed[(probe, server)][2]
        assert got["slowdown_server_op_seconds_total"][key] == pytest.approx(
            fed[(probe, server)][1])
    assert got["slowdown_servers"] == {("work",): len(BRICKS) + 1}  # unknown is one more
    means = {srv: got["slowdown_server_op_seconds_total"][("work", "data", srv)]
             / got["slowdown_server_ops_total"][("work", "data", srv)] for srv in BRICKS}
    assert means[BRICKS[2]] == pytest.approx(12 * means[BRICKS[0]])
    # The textfile holds the same series (probe/exporters/textfile.py writes this registry).
    assert samples(s.metrics.file_registry) == got
    s.metrics.stop()


def test_servers_beyond_max_servers_add_up_in_other(tmp_path):
    s = service(tmp_path, max_servers=2)
    now = time.time()
    fed = feed(s, now, servers=BRICKS, rounds=40)
    got = samples(s.metrics.registry)
    ops = got["slowdown_server_ops_total"]
    # The first two servers seen have their own series (unknown, seen first, is one of them).
    own = {key[2] for key in ops} - {"other"}
    assert own == {UNKNOWN, BRICKS[1]} and len(own) == 2
    for probe in ("data", "md"):
        folded = [v for (p, srv), v in fed.items() if p == probe and srv not in own]
        assert ops[("work", probe, "other")] == sum(v[0] for v in folded)
        assert got["slowdown_server_op_errors_total"][("work", probe, "other")] == \
            sum(v[2] for v in folded)
        assert sum(v for k, v in ops.items() if k[1] == probe) == \
            sum(v[0] for (p, _), v in fed.items() if p == probe)  # nothing dropped
    assert got["slowdown_servers"] == {("work",): len(BRICKS) + 1}
    # A folded server stays folded: its counter never moves to a series of its own.
    before = ops[("work", "data", "other")]
    s.recorder.served("work", "data-read", BRICKS[3], 0.001, now)
    after = samples(s.metrics.registry)["slowdown_server_ops_total"]
    assert after[("work", "data", "other")] == before + 1 and len(after) == len(ops)
    s.metrics.stop()


def test_a_filesystem_that_names_no_server_costs_the_one_server_unknown(tmp_path):
    s = service(tmp_path)
    now = time.time()
    for op in OPS:
        for k in range(30):
            s.recorder.result("work", op, 0.001, now + k)
            s.recorder.served("work", op, UNKNOWN, 0.001, now + k)
    got = samples(s.metrics.registry)
    assert got["slowdown_server_ops_total"] == {("work", "data", UNKNOWN): 60,
                                                ("work", "md", UNKNOWN): 120}
    assert sum(len(v) for v in got.values()) == 2 * 3 + 1
    s.metrics.stop()


@pytest.mark.parametrize("value, says", [
    ("0", "must be at least 1"), ("10001", "must be at most 10000"),
    ('"many"', "expected an integer"), ("2.5", "expected an integer")])
def test_max_servers_mistakes_name_the_key_and_line(tmp_path, value, says):
    text = config_text(tmp_path / "n1.db", "n1", {"work": tmp_path}, "") + \
        f"max_servers = {value}\n"
    with pytest.raises(ConfigError) as caught:
        loads(text, tmp_path / "slowdown.toml")
    line = text.count("\n")
    assert f"slowdown.toml:{line}: metrics.max_servers: {says}" in str(caught.value)


def test_max_servers_defaults_to_100():
    text = config_text(Path("/tmp/x.db"), "n1", {"work": Path("/tmp/w")}, "")
    assert loads(text).metrics.max_servers == 100
    assert loads(text + "max_servers = 7\n").metrics.max_servers == 7


def test_a_real_prometheus_sums_each_servers_ops_over_hosts(tmp_path):
    """Two hosts' endpoints, each told of the same four bricks, scraped by Debian's
    Prometheus: ``sum by (server)`` is the fleet's ops per server, and the fleet's mean
    latency per server names brick 3."""
    ports, services, fed = {}, {}, {}
    now = time.time()
    for host in ("alpha", "beta"):
        ports[host] = free_port()
        services[host] = s = service(tmp_path / host, listen=f"127.0.0.1:{ports[host]}",
                                     host=host)
        assert s.metrics.start()
        fed[host] = feed(s, now)
    prom_port = free_port()
    (tmp_path / "prometheus.yml").write_text(json.dumps({
        "global": {"scrape_interval": "1s"},
        "scrape_configs": [{"job_name": "slowdown", "static_configs": [
            {"targets": [f"127.0.0.1:{p}" for p in ports.values()]}]}]}))
    log = (tmp_path / "prometheus.log").open("w")
    prometheus = subprocess.Popen(
        ["prometheus", f"--config.file={tmp_path / 'prometheus.yml'}",
         f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{prom_port}"],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{prom_port}"

    def query(expr: str) -> dict[str, float]:
        q = urllib.parse.urlencode({"query": expr})
        with urllib.request.urlopen(f"{url}/api/v1/query?{q}", timeout=10) as answer:
            result = json.loads(answer.read())["data"]["result"]
        return {r["metric"].get("server", ""): float(r["value"][1]) for r in result}

    try:
        wait_for(lambda: is_ready(url), 30, what="Prometheus")
        summed = 'sum by (server) (slowdown_server_ops_total{probe="data"})'
        wait_for(lambda: len(query(f'count by (server) ({summed})')) == len(BRICKS) + 1, 30,
                 step=0.5, what="both hosts' per-server series")
        wait_for(lambda: query('count(count by (host) (slowdown_server_ops_total))')
                 .get("") == 2, 30, step=0.5, what="both hosts")
        got = query(summed)
        expected = {srv: sum(fed[h][("data", srv)][0] for h in fed)
                    for srv in (*BRICKS, UNKNOWN)}
        assert got == expected
        means = query('sum by (server) (slowdown_server_op_seconds_total{probe="data"}) / '
                      'sum by (server) (slowdown_server_ops_total{probe="data"})')
        slowest = max(means, key=means.get)
        assert slowest == BRICKS[2] and means[slowest] == pytest.approx(12 * means[BRICKS[0]])
    finally:
        stop(prometheus)
        log.close()
        for s in services.values():
            s.metrics.stop()
