"""Cluster views over many host files: baselines that merge exactly, and what was merged (bad
files among many and the bound on descriptors: test_fleet_inputs.py)."""

from __future__ import annotations

import json
import sqlite3

import numpy as np
import pytest

from slowdown.analysis.histogram import Histogram, codec
from slowdown.analysis.stats import baseline
from slowdown.analysis.stats.baseline import BaselineBook
from slowdown.analysis.store import Store
from testdata.datakit import fill, lognormal
from tests.kit.fleetkit import AT, HOUR, NOV, fill_three_hosts, run

# -- expected values that merge ----------------------------------------------------------------

def test_cluster_baseline_is_the_baseline_of_the_merged_samples(tmp_path):
    """Three hosts, rebaselined at different moments from different periods: at any moment
    the cluster's expected value is the statistic of the samples behind the baselines then in
    force, merged; with the records themselves gone (pruned), from the stored histograms."""
    minutes = 6 * 60
    periods = [(NOV, NOV + 2 * HOUR, NOV + 3 * HOUR),  # (data from, data to, rebaselined at)
               (NOV + HOUR, NOV + 4 * HOUR, NOV + 4 * HOUR),
               (NOV + 2 * HOUR, NOV + 5 * HOUR, NOV + 5 * HOUR)]
    raw = []
    for i, median in enumerate((0.001, 0.003, 0.009)):
        db = tmp_path / f"n{i}.db"
        raw.append(fill(db, NOV, minutes, lognormal(median, 0.5), host=f"n{i}",
                        ops=("md-stat",), seed=i))
        start, end, at = periods[i]
        with Store(db) as store:
            baseline.rebaseline(store, at, "new OSTs", start, end, statistics=("q95",))
    for path in tmp_path.glob("n*.db"):  # the records are pruned: only the baselines are left
        with sqlite3.connect(path) as conn:
            conn.execute("DELETE FROM minutes")
    stores = [Store(tmp_path / f"n{i}.db", readonly=True) for i in range(3)]
    book = BaselineBook(stores)
    for at, hosts in ((NOV + 3 * HOUR, (0,)), (NOV + 4 * HOUR + 60, (0, 1)),
                      (NOV + 6 * HOUR, (0, 1, 2))):
        whole = Histogram()
        for i in hosts:
            first, last = ((periods[i][0] - NOV) // 60, (periods[i][1] - NOV) // 60)
            whole.record_many(np.concatenate(raw[i][first:last]))
        for statistic, value in (("median", whole.quantile(0.5)), ("q95", whole.quantile(0.95)),
                                 ("max", whole.max)):
            e = book.expected("work", "md-stat", statistic, at)
            assert e.value == value, (statistic, at)
            assert e.hosts == len(hosts) and not e.provisional
        assert book.expected("work", "md-stat", "mean", at).value == pytest.approx(whole.mean)
    periods_seen = book.expected_periods("work", "md-stat", "median", NOV + 3 * HOUR,
                                         NOV + 6 * HOUR)
    assert [p for p, _ in periods_seen] == [NOV + 3 * HOUR, NOV + 4 * HOUR, NOV + 5 * HOUR]


def test_migration_6_fills_histograms_from_the_records_that_made_them(tmp_path):
    """A database of schema 5 with baselines: its histograms are filled from the records of
    each baseline's period, equal to those a new baseline stores; a baseline whose records
    were pruned stays without one (the reader then merges whatever records are left)."""
    db = tmp_path / "n1.db"
    fill(db, NOV, 26 * 60, lognormal(0.002, 0.4), ops=("md-stat", "md-read"))
    with Store(db) as store:
        made = baseline.maintain(store, NOV + 25 * HOUR)
        assert {b.reason for b in made} == {"initial"}
        stored = baseline.load_histograms(store)
    assert len(stored) == 2
    with sqlite3.connect(db) as conn:  # back to schema 5, the md-read records pruned
        conn.execute("DROP TABLE baseline_histograms")
        for table in ("minutes", "hours"):  # and schema 7's column
            conn.execute(f"ALTER TABLE {table} DROP COLUMN stuck_end")
        conn.execute("DROP TABLE tens")  # and schema 8's table
        conn.executescript("DROP TABLE server_tens; DROP TABLE server_series; "
                           "DROP TABLE weekly_histograms")  # and 9's and 10's
        conn.execute("PRAGMA user_version = 5")
        conn.execute("DELETE FROM minutes WHERE series = (SELECT id FROM series "
                     "WHERE op = 'md-read')")
    other = tmp_path / "n2.db"  # a reader reads schema 5 as it is, from the records
    fill(other, NOV, 26 * 60, lognormal(0.002, 0.4), ops=("md-stat",), host="n2", seed=3)
    with Store(other) as store:
        baseline.maintain(store, NOV + 25 * HOUR)
    stores = [Store(db, readonly=True), Store(other, readonly=True)]
    e = BaselineBook(stores).expected("work", "md-stat", "median", NOV + 25 * HOUR)
    assert e.hosts == 2 and e.value == baseline.compute(
        stores, "work", "md-stat", ["median"], NOV, NOV + 25 * HOUR)[0][1]
    for store in stores:
        store.close()
    with Store(db) as store:  # the service's open migrates
        filled = baseline.load_histograms(store)
    assert list(filled) == [key for key in stored if key[1] == "md-stat"]
    for key in filled:  # the same buckets; the moments to the rounding of their sums (a
        # baseline reads its period's whole tens, the fill its minutes)
        assert codec.decode_pairs(filled[key])[:3] == codec.decode_pairs(stored[key])[:3]
        assert codec.moments_of(filled[key]) == pytest.approx(codec.moments_of(stored[key]),
                                                             rel=1e-12)


# -- what was merged ---------------------------------------------------------------------------

@pytest.fixture
def three_hosts(tmp_path):
    return fill_three_hosts(tmp_path)


def test_cluster_views_say_how_many_hosts_and_which_had_no_records(three_hosts):
    glob = str(three_hosts / "n*.db")
    code, out = run("--db", glob, "--at", AT)
    assert code == 0
    assert out.strip().splitlines()[-1].endswith(
        "merged 2 of 3 hosts (3 files); no records in the last 1h from n2")
    code, out = run("--db", glob, "--at", AT, "-v")
    assert "merged 2 of 3 hosts (3 files); no records in the last 1h from n2" in out
    code, out = run("--db", glob, "--at", AT, "--json")
    merged = json.loads(out)["merged"]
    assert (merged["files"], merged["hosts"], merged["reporting"]) == (3, 3, 2)
    assert merged["without_records"] == ["n2"] and merged["skipped"] == []
    code, out = run("check", "--db", glob, "--at", AT, "--window", "10m")
    assert "; merged 2 of 3 hosts (3 files); no records in the last 10m from n2" in out
    code, out = run("--db", glob, "--at", "2026-11-01T00:40:00Z")  # n2 still reporting
    assert out.strip().splitlines()[-1].endswith("merged 3 of 3 hosts (3 files)")
    page = three_hosts / "r.html"
    code, out = run("report", "--db", glob, "--at", AT, "--since", "2h", "-o", str(page))
    assert code == 0, out
    assert "report: merged 3 of 3 hosts (3 files)" in out
    code, out = run("report", "--db", glob, "--at", AT, "--since", "30m", "-o", str(page))
    assert "no records in the report's period from n2" in out
    assert "no records in the report&#x27;s period from n2" in page.read_text()


def test_one_file_says_nothing_of_merging(three_hosts):
    code, out = run("--db", str(three_hosts / "n0.db"), "--at", AT)
    assert code == 0 and "merged" not in out
