"""The provisioning estimate: closed-form cases, reproducibility, and `slowdown stats
--provision` on a database of known per-minute throughput."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from click.testing import CliRunner

from slowdown.analysis.cli.main import main
from slowdown.analysis.histogram import Histogram
from slowdown.analysis.report.provision import Goal, estimate, parse_goal, per_node_figures
from slowdown.analysis.store import Selection, Store
from slowdown.analysis.store.records import Record
from testdata.datakit import utc

NOV = utc(2026, 11, 1)
TRIALS = 20_000


def reach_probability(nodes: int, p: float, a: float, b: float, goal: float) -> float:
    """P(sum of ``nodes`` draws >= goal), each draw ``a`` with probability p, else ``b``."""
    return sum(math.comb(nodes, k) * p**k * (1 - p) ** (nodes - k)
               for k in range(nodes + 1) if k * a + (nodes - k) * b >= goal)


def exact_nodes(p: float, a: float, b: float, goal: float, confidence: float) -> tuple[int, float,
                                                                                       float]:
    """The smallest N reaching the goal with the confidence, and P at N - 1 and at N."""
    before = 0.0
    for n in range(1, 1000):
        now = reach_probability(n, p, a, b, goal)
        if now >= confidence:
            return n, before, now
        before = now
    raise AssertionError("no N found")


@pytest.mark.parametrize(("p", "a", "b", "goal", "confidence"), [
    (0.5, 100.0, 0.0, 1000.0, 0.90),   # a node either delivers 100 or stalls: 10 best case
    (0.9, 100.0, 0.0, 1000.0, 0.95),
    (0.8, 100.0, 50.0, 1000.0, 0.99),  # a slow half of the time
])
def test_two_point_distribution_matches_the_closed_form(p, a, b, goal, confidence):
    expected, before, at = exact_nodes(p, a, b, goal, confidence)
    # The case is well posed: the true probabilities at N - 1 and N are several Monte Carlo
    # standard deviations away from the confidence, so the estimate must land on N exactly.
    sd = math.sqrt(confidence * (1 - confidence) / TRIALS)
    assert before < confidence - 4 * sd and at > confidence + 4 * sd
    ten = round(p * 10)
    values = [a] * ten + [b] * (10 - ten)  # exactly p of the minutes at a
    e = estimate(values, goal, confidence, trials=TRIALS, seed=1)
    assert e.nodes_best == math.ceil(goal / a) == 10
    assert e.nodes == expected
    assert e.ratio == pytest.approx(expected / 10)
    assert e.samples == 10 and e.best == a and e.mean == pytest.approx(p * a + (1 - p) * b)


def test_a_constant_node_needs_exactly_the_best_case():
    e = estimate([250.0] * 7, 1000.0, 0.99, trials=500)
    assert (e.nodes_best, e.nodes, e.ratio) == (4, 4, 1.0)
    e = estimate([0.1] * 3, 1.0, 0.5, trials=100)  # 10 x 0.1 reaches 1.0 despite rounding
    assert (e.nodes_best, e.nodes) == (10, 10)


def test_seeded_runs_are_reproducible():
    rng = np.random.default_rng(7)
    values = rng.lognormal(np.log(300), 0.6, 2000)
    first = estimate(values, 50_000, 0.99, trials=5000, seed=42)
    again = estimate(values, 50_000, 0.99, trials=5000, seed=42)
    assert first == again
    other = estimate(values, 50_000, 0.99, trials=5000, seed=43)
    assert abs(other.nodes - first.nodes) <= 2  # another seed: the same answer within noise
    assert first.nodes_best == math.ceil(50_000 / values.max())
    assert first.nodes > first.nodes_best and first.ratio > 1


@pytest.mark.parametrize(("values", "goal", "confidence", "message"), [
    ([], 10, 0.9, "no minute records"),
    ([0.0, 0.0], 10, 0.9, "no op completed"),
    ([1.0], 0, 0.9, "goal must be positive"),
    ([1.0], 10, 1.0, "confidence"),
    ([1.0, -1.0], 10, 0.9, "non-negative"),
    ([1e-6], 1e6, 0.9, "too many draws"),
])
def test_impossible_estimates_say_why(values, goal, confidence, message):
    with pytest.raises(ValueError, match=message):
        estimate(values, goal, confidence, trials=1000)


def test_goals_in_ops_or_bytes_per_second():
    assert parse_goal("20000") == Goal(20000.0, "ops/s", "20000")
    assert parse_goal("1.5e4/s").value == 15000 and parse_goal("300 IOPS").unit == "ops/s"
    g = parse_goal("5GiB/s")
    assert (g.value, g.unit) == (5 * 2**30, "B/s")
    assert g.per_op("data-read") == 5 * 1024 and g.per_op("md-stat") is None
    assert parse_goal("500MB/s").value == 500e6
    for bad in ("", "fast", "-5", "0", "5GiB", "1.2.3"):
        with pytest.raises(ValueError, match="expected ops per second"):
            parse_goal(bad)


# -- slowdown stats --provision ----------------------------------------------------------------

@pytest.fixture
def two_point_db(tmp_path):
    """work/md-stat on two hosts: 60 minutes each; 9 of 10 minutes 60 ops of 10 ms (100 ops/s
    when back to back), every tenth minute only errors (a stall: 0 ops/s)."""
    db = tmp_path / "p.db"
    with Store(db) as store:
        records = []
        for host in ("n1", "n2"):
            for m in range(60):
                h = Histogram()
                if m % 10:
                    h.record_many(np.full(60, 0.01))
                    records.append(Record(host, "work", "md-stat", NOV + 60 * m, h))
                else:
                    records.append(Record(host, "work", "md-stat", NOV + 60 * m, h, errors=60))
            h = Histogram()
            h.record_many(np.full(60, 0.004))
            records.append(Record(host, "work", "data-read", NOV, h))
        store.write(records)
    return db


def test_per_node_figures_are_minutes_of_each_host(two_point_db):
    with Store(two_point_db, readonly=True) as store:
        figures = per_node_figures([store], Selection())
    stat = figures[("work", "md-stat")]
    assert len(stat) == 120
    assert sorted(set(np.round(stat, 9))) == [0.0, 100.0]
    assert np.count_nonzero(stat == 0) == 12
    assert figures[("work", "data-read")] == pytest.approx([250.0, 250.0])


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_stats_provision_matches_the_closed_form(two_point_db):
    result = run("stats", "--db", str(two_point_db), "--at", "2026-11-01T01:00:00Z",
                 "--since", "1h", "--op", "md-stat", "--provision", "1000",
                 "--confidence", "95%", "--trials", str(TRIALS), "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)["provision"]
    assert (doc["goal"], doc["unit"], doc["confidence"], doc["trials"], doc["seed"]) == \
        (1000.0, "ops/s", 0.95, TRIALS, 0)
    (row,) = doc["ops"]
    expected, _, _ = exact_nodes(0.9, 100.0, 0.0, 1000.0, 0.95)
    assert row["minutes"] == 120 and row["best_per_node"] == pytest.approx(100.0)
    assert (row["nodes_best_case"], row["nodes"]) == (10, expected)
    assert row["ratio"] == pytest.approx(expected / 10)
    again = json.loads(run("stats", "--db", str(two_point_db), "--at", "2026-11-01T01:00:00Z",
                           "--since", "1h", "--op", "md-stat", "--provision", "1000",
                           "--confidence", "95%", "--trials", str(TRIALS),
                           "--json").output)["provision"]
    assert again == doc


def test_stats_provision_table_and_bytes_goal(two_point_db):
    result = run("stats", "--db", str(two_point_db), "--at", "2026-11-01T01:00:00Z",
                 "--since", "1h", "--provision", "1GiB/s")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("nodes for 1GiB/s"))
    assert lines[head + 1].split()[:4] == ["target", "op", "minutes", "best/node"]
    rows = {line.split()[1]: line for line in lines[head + 2:]}
    # data-read: 250 MiB/s per node at best, 1 GiB/s = 1024 MiB/s -> 5 nodes, always.
    assert rows["data-read"].split()[5:] == ["5", "5", "1.00"]
    assert "needs ops of a known size" in rows["md-stat"]


@pytest.mark.parametrize(("args", "flag"), [
    (("--provision", "lots"), "--provision"),
    (("--provision", "100", "--confidence", "150%"), "--confidence"),
    (("--provision", "100", "--trials", "0"), "--trials"),
])
def test_stats_provision_bad_input_names_the_flag(two_point_db, args, flag):
    result = run("stats", "--db", str(two_point_db), *args)
    assert result.exit_code == 2
    assert flag in result.output
