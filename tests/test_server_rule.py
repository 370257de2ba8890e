"""The rule naming a slow server, and per-server records read back over many files and kept
as long as the minutes they came from."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from slowdown.analysis.histogram import Histogram
from slowdown.analysis.stats import server_rule
from slowdown.analysis.store import Store, server_reads
from slowdown.analysis.store.selection import Selection
from slowdown.analysis.store.server_records import ServerRecord
from testdata import serverkit
from testdata.datakit import utc

T0 = utc(2026, 11, 1)


def lognormal(median: float, n: int, seed: int, sigma: float = 0.5) -> Histogram:
    h = Histogram()
    h.record_many(np.random.default_rng(seed).lognormal(np.log(median), sigma, n))
    return h


def test_the_median_interval_needs_fifteen_probes():
    assert server_rule.MIN_PROBES == 15
    assert server_rule.median_ranks(15) == (1, 15)
    assert server_rule.median_interval(lognormal(0.01, 14, 1)) is None
    low, high = server_rule.median_interval(lognormal(0.01, 1000, 1))
    assert 0.009 < low < 0.01 < high < 0.011


def test_a_server_ten_times_slower_is_named_from_fifteen_probes():
    others = lognormal(0.004, 3000, 2)
    assert server_rule.judge_one(lognormal(0.04, 14, 3), others).word == "few"
    assert server_rule.judge_one(lognormal(0.04, 15, 3), others).word == "slow"


def test_servers_alike_are_ok_and_no_others_is_few():
    judged = server_rule.judge({f"osd.{i}": lognormal(0.004, 300, i) for i in range(20)})
    assert {j.word for j in judged.values()} == {"ok"}
    assert server_rule.judge({"osd.0": lognormal(0.004, 300, 0)})["osd.0"].word == "few"


def test_a_hiccup_of_a_few_probes_names_no_one():
    """Five probes of 300 at a second: the tail moves, the median does not."""
    h = lognormal(0.004, 295, 5)
    h.record_many([1.0] * 5)
    judged = server_rule.judge({"mds.0": h, "mds.1": lognormal(0.004, 300, 6)})
    assert judged["mds.0"].word == "ok" and judged["mds.0"].q95 < 0.02


def test_a_slow_server_does_not_make_the_others_look_fast():
    """The others are pooled without the server judged: a slow one is not in its own pool."""
    servers = {f"h{i}": lognormal(0.004, 300, 10 + i) for i in range(3)}
    servers["h3"] = lognormal(0.04, 300, 20)
    judged = server_rule.judge(servers)
    assert judged["h3"].word == "slow" and 8 < judged["h3"].against_others < 12
    assert all(judged[f"h{i}"].word == "ok" for i in range(3))


def test_many_files_merge_exactly_in_forked_readers(tmp_path):
    """Forty files (read by two processes on two CPUs): the same counts as one by one."""
    paths = serverkit.write_fleet(tmp_path, 40, 8, T0, 1, per_node_ten=60, seed=7)
    stores = [Store(p, readonly=True) for p in paths]
    try:
        read = server_reads.read(stores, Selection(start=T0, end=T0 + 600))
        one_by_one: dict = {}
        for store in stores:
            for key, found in server_reads.read([store], Selection(start=T0, end=T0 + 600)
                                                ).latencies.items():
                one_by_one.setdefault(key, []).append(found.histogram)
    finally:
        for store in stores:
            store.close()
    assert sum(f.probes for f in read.latencies.values()) == 40 * 60
    for key, found in read.latencies.items():
        merged = Histogram.merged(one_by_one[key])
        assert found.histogram.buckets == merged.buckets and len(found.hosts) == len(
            one_by_one[key])


def test_host_and_time_filters(tmp_path):
    paths = serverkit.write_fleet(tmp_path, 2, 4, T0, 3, per_node_ten=100, seed=8)
    stores = [Store(p, readonly=True) for p in paths]
    try:
        both = server_reads.read(stores, Selection(start=T0 + 600, end=T0 + 1200))
        one = server_reads.read(stores, Selection(hosts=("n1",), start=T0 + 600,
                                                  end=T0 + 1200))
        late = server_reads.read(stores, Selection(start=T0 + 1199, end=T0 + 1800))
    finally:
        for store in stores:
            store.close()
    assert sum(f.probes for f in both.latencies.values()) == 200
    assert sum(f.probes for f in one.latencies.values()) == 100
    assert sum(f.probes for f in late.latencies.values()) == 400  # overlapping tens, whole
    assert both.extent == (T0, T0 + 1200)


def test_rollup_removes_per_server_records_with_the_minutes(tmp_path):
    db = tmp_path / "n1.db"
    h = lognormal(0.004, 10, 9)
    with Store(db) as store:
        store.write([], servers=[ServerRecord("n1", "work", "data-read", "h1:/b1", T0 + s, h)
                                 for s in (0, 3000, 3600, 4200)])
        store.rollup(T0 + 3600 + 1800)  # minutes before T0 + 1 h become hours
        left = [r[0] for r in store.conn.execute("SELECT start FROM server_tens ORDER BY 1")]
    assert left == [T0 + 3600, T0 + 4200]


def test_the_benchmarks_run_in_their_quick_forms(tmp_path):
    """bench_server_rule --quick: no server accused on quiet data, a 10x one named from 15
    probes; bench_servers_read on a small fleet prints its size and times."""
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-m", "bench.bench_server_rule", "--quick", "--json"],
                          cwd=root, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.splitlines()[-1])
    assert all(row["below_factor_per_100"] == 0 for row in out["quiet"])
    assert out["power"][0] == {**out["power"][0], "factor": 10.0, "probes_for_95": 15}
    env = {**os.environ, "PATH": os.path.dirname(sys.executable) + os.pathsep +
           os.environ.get("PATH", "")}
    done = subprocess.run([sys.executable, "-m", "bench.bench_servers_read", "--dir",
                           str(tmp_path), "--nodes", "2", "--rounds", "1", "--tens", "2",
                           "--servers", "8"], cwd=root, capture_output=True, text=True,
                          timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("size: ") and "read: 2 nodes x 8 servers" in done.stdout


def test_a_slow_server_is_left_out_of_the_others_pool():
    """One of four bricks 12x slower: the healthy ones compare with each other (a pooled
    median raised by it would make them read 0.5x), and a second slow one still stands out."""
    servers = {f"b{i}": lognormal(0.004, 450, 30 + i, 0.2) for i in range(4)}
    servers["b3"] = lognormal(0.048, 450, 40, 0.2)
    judged = server_rule.judge(servers)
    assert [n for n, j in judged.items() if j.word == "slow"] == ["b3"]
    assert all(0.9 < judged[f"b{i}"].against_others < 1.1 for i in range(3))
    servers["b2"] = lognormal(0.0072, 450, 41, 0.2)  # 1.8x: behind b3 in a first pass
    assert server_rule.judge_one(servers["b2"], Histogram.merged(
        [servers["b0"], servers["b1"], servers["b3"]])).word == "ok"
    judged = server_rule.judge(servers)
    assert sorted(n for n, j in judged.items() if j.word == "slow") == ["b2", "b3"]
