"""The Prometheus endpoint: native bucket edges that merge exactly, slowdown gauges from the
service's own database, and scrapes that answer at once while a target hangs."""

from __future__ import annotations

import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from slowdown.analysis.config import loads
from slowdown.analysis.histogram import Histogram, mapping_for
from slowdown.analysis.stats.baseline import BaselineBook
from slowdown.analysis.stats.slowdown import target_slowdowns
from slowdown.analysis.store import Store
from slowdown.probe.daemon.service import Service
from slowdown.probe.exporters.metrics import EXPORT_SCALE, bucket_bounds, series_budget
from slowdown.probe.exporters.server_metrics import server_series
from testdata.datakit import fill, lognormal, utc
from tests.kit.faultfs import FaultFS
from tests.kit.metricskit import config_text, free_port
from tests.kit.servicekit import (
    live,
    probe_cli,
    start_live,
    unclean_stop,
    wait_for,
)

OPS = ("data-read", "data-write", "md-stat", "md-read", "md-delete", "md-write")


def service(tmp_path: Path, host: str = "n1", targets=("work",), metrics: str | None = "",
            database: Path | None = None, max_servers: int | None = None) -> Service:
    """A real Service object, not running: its recorder and metrics are driven by the test."""
    dirs = {t: tmp_path / t for t in targets}
    text = config_text(database or tmp_path / f"{host}.db", host, dirs, metrics,
                       max_servers=max_servers)
    return Service(loads(text, tmp_path / "slowdown.toml"))


def scrape(registry) -> dict[str, list]:
    """name -> [(labels, value)] of every sample."""
    samples: dict[str, list] = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in family.samples:
            samples.setdefault(s.name, []).append((s.labels, s.value))
    return samples


def test_off_by_default_and_loopback_when_on(tmp_path):
    assert service(tmp_path, metrics=None).metrics is None
    on = loads(config_text(tmp_path / "x.db", "n1", {"work": tmp_path}, ""))
    assert (on.metrics.listen_host, on.metrics.listen_port) == ("127.0.0.1", 9877)


def test_bucket_bounds_are_native_edges_and_hosts_merge_exactly():
    bounds = bucket_bounds()
    fine, coarse = mapping_for(5), mapping_for(EXPORT_SCALE)
    assert bounds[0] == 2.0**-20 and bounds[-1] == 2.0**10 and len(bounds) == 16
    for k, bound in enumerate(bounds, start=-11):  # scale -1: bucket k is (4**k, 4**(k+1)]
        assert bound == coarse.upper_bound(k) == fine.upper_bound(64 * k + 63) == 4.0 ** (k + 1)


def test_the_histogram_counts_what_the_recorder_stores(tmp_path):
    """Each host's exported buckets are sums of its stored scale-5 buckets (values on the
    edges included), so the merge of two hosts' buckets is the merged stored histogram's."""
    rng = np.random.default_rng(7)
    merged = Histogram()
    exported: dict[str, float] = {}
    for i, host in enumerate(("a", "b")):
        s = service(tmp_path / host, host=host)
        values = np.concatenate([rng.lognormal(-7 + i, 1.0, 2000),
                                 np.array(bucket_bounds()[2:14])])  # exactly on edges
        for v in values:
            s.recorder.result("work", "md-stat", float(v), time.time())
        s.recorder.result("work", "md-stat", None, time.time())  # an error: not a latency
        (rec,) = s.recorder.take(float("inf"))[0]
        merged.merge(rec.histogram)
        assert rec.histogram.count == len(values)
        for labels, value in scrape(s.metrics.registry)["slowdown_op_latency_seconds_bucket"]:
            if labels["op"] == "md-stat":
                exported[labels["le"]] = exported.get(labels["le"], 0.0) + value
        errors = scrape(s.metrics.registry)["slowdown_op_errors_total"]
        assert ({"host": host, "target": "work", "op": "md-stat"}, 1.0) in errors
        assert len(errors) == len(OPS)  # every op's series exists from the start
    for le, count in exported.items():
        bound = float(le)
        below = sum(c for lo, hi, c in merged.bins() if hi <= bound)
        assert count == below, le
        if bound != float("inf"):  # no stored bucket straddles an exported bound
            assert not any(lo < bound < hi for lo, hi, _ in merged.bins())
    assert exported["+Inf"] == merged.count


def test_slowdown_gauges_come_from_the_database_after_a_flush(tmp_path):
    """The gauges equal slowdown.py's numbers on the service's own database."""
    t0 = utc(2026, 3, 2)
    db = tmp_path / "n1.db"
    fill(db, t0, 120, lognormal(0.002, 0.3), host="n1", ops=OPS)
    fill(db, t0 + 120 * 60, 10, lognormal(0.01, 0.3), host="n1", ops=("md-stat",), seed=1)
    s = service(tmp_path, database=db)
    now = t0 + 130 * 60 + 5
    s.metrics.tick(now)
    s.metrics.flushed(True, now)
    got = scrape(s.metrics.registry)
    ratio = {(lab["window"], lab["statistic"]): v for lab, v in got["slowdown_ratio"]}
    assert set(ratio) == {(w, st) for w in ("1m", "10m", "1h") for st in ("median", "q95")}
    with Store(db, readonly=True) as store:
        expected = target_slowdowns([store], BaselineBook([store]), ["work"], {"work": OPS},
                                    [60, 600, 3600], "median", now)["work"]
    assert [ratio[(w, "median")] for w in ("1m", "10m", "1h")] == [t.value for t in expected]
    assert 3 < ratio[("10m", "median")] < 7
    op_ratio = {(lab["op"], lab["window"], lab["statistic"]): v
                for lab, v in got["slowdown_op_ratio"]}
    assert op_ratio[("md-stat", "10m", "median")] == ratio[("10m", "median")]
    # md-stat in every window; the other ops stopped at minute 120: only the hour has them
    assert len(op_ratio) == 3 * 2 + (len(OPS) - 1) * 2
    provisional = {lab["op"]: v for lab, v in got["slowdown_op_expected_provisional"]}
    assert set(provisional.values()) == {1.0}
    assert got["slowdown_ratio_timestamp_seconds"][0][1] == now
    s.metrics.stop()


def test_a_node_with_two_targets_exports_at_most_its_series_budget(tmp_path):
    """Every series a node can export at once (both targets with data in every window, node
    context, a skipped tick, more servers than ``max_servers``): the count is
    ``series_budget``; without the per-server counters, under half of the 1,026 series of
    the scale-1 buckets (64 per op) it replaces."""
    from slowdown.analysis.store.records import NODE_FIELDS, NodeContext

    t0 = utc(2026, 3, 2)
    db = tmp_path / "n1.db"
    fill(db, t0, 120, lognormal(0.002, 0.3), host="n1", ops=OPS, targets=("work", "home"))
    s = service(tmp_path, targets=("work", "home"), database=db, max_servers=3)
    now = t0 + 120 * 60 + 5
    for target in ("work", "home"):
        s.recorder.skipped(target, OPS, now)
        for op in OPS:
            s.recorder.result(target, op, 0.001, now)
            for server in ("b1", "b2", "b3", "b4", "b5"):  # two beyond the budget
                s.recorder.served(target, op, server, 0.001, now, failed=server == "b5")
    s.metrics.node(NodeContext("n1", t0, dict.fromkeys(NODE_FIELDS, 1)))
    s.metrics.tick(now, 0.01)
    s.metrics.flushed(True, now)
    text = generate_latest(s.metrics.registry).decode()
    series = [line for line in text.splitlines() if line and not line.startswith("#")]
    buckets = [line for line in series if line.startswith("slowdown_op_latency_seconds_bucket")]
    assert len(buckets) == 2 * len(OPS) * 17
    # The last tick of each target is the one series missing: no runner ticked here.
    assert not any(line.startswith("slowdown_last_tick_timestamp_seconds") for line in series)
    assert len(series) + 2 == series_budget(2, servers=3) == 486 + 2 * server_series(3)
    assert 486 <= 1026 // 2 and server_series(3) == 25
    assert series_budget(2) == 486 + 2 * 607 == 1700  # the default max_servers, 100
    s.metrics.stop()


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_scrape_answers_in_under_a_second_while_a_target_hangs(tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    with FaultFS(tmp_path / "backing", tmp_path / "mnt") as fs:
        targets = {"hung": fs.mountpoint, "healthy": tmp_path / "ok"}
        targets["healthy"].mkdir()
        database = tmp_path / "db" / "slowdown.db"
        config = tmp_path / "slowdown.toml"
        config.write_text(config_text(database, "n1", targets, f"127.0.0.1:{port}",
                                      abandon_after="5s"))
        done = probe_cli(config, "prepare", "--no-progress")
        assert done.returncode == 0, done.stderr
        proc = start_live(config, database)
        try:
            wait_for(lambda: live(database)["targets"]["hung"]["ticks"] >= 2, 10,
                     what="ticks")
            fs.hang("*")
            hung_at = time.monotonic()
            took, stuck, last_tick = [], [], []
            while time.monotonic() - hung_at < 12:
                t0 = time.monotonic()
                with urllib.request.urlopen(url, timeout=5) as answer:
                    text = answer.read().decode()
                took.append(time.monotonic() - t0)
                samples = {}
                for family in text_string_to_metric_families(text):
                    for s in family.samples:
                        samples.setdefault(s.name, []).append((s.labels, s.value))
                stuck.append({lab["target"]: v for lab, v in samples["slowdown_stuck_seconds"]
                              if v > 0 or lab["target"] not in ("hung",)})
                last_tick.append({lab["target"]: v for lab, v in
                                  samples["slowdown_last_tick_timestamp_seconds"]})
                time.sleep(0.5)
        finally:
            fs.release()
            unclean = unclean_stop(proc, timeout=20)
    assert unclean is None, unclean  # the target released, SIGTERM stops the service
    assert max(took) < 1.0, took
    assert stuck[-1]["hung"] >= 9, stuck[-1]
    assert all(s.get("healthy", 0.0) == 0.0 for s in stuck)  # never stuck
    assert last_tick[-1]["healthy"] - last_tick[0]["healthy"] >= 9  # kept probing
