"""Window statistics, confidence intervals, the stuck rule, baselines and slowdowns, on
databases filled with known distributions."""

from __future__ import annotations

import math

import numpy as np
import pytest

from slowdown.analysis.histogram import Histogram, rank
from slowdown.analysis.stats import baseline, series
from slowdown.analysis.stats.baseline import BaselineBook
from slowdown.analysis.stats.slowdown import accurate_window, op_slowdown, target_slowdowns
from slowdown.analysis.stats.window import estimate, quantile_ranks
from slowdown.analysis.store import Selection, Store, aggregate
from slowdown.analysis.store.records import Aggregate, Record
from testdata.datakit import fill, lognormal, utc

NOV = utc(2026, 11, 1)
OCT = utc(2026, 10, 1)


def test_every_statistic_of_a_window(tmp_path):
    raw = fill(tmp_path / "a.db", NOV, 100, lognormal(0.002, 0.8), ops=("md-stat",))
    values = np.sort(np.concatenate(raw))
    with Store(tmp_path / "a.db", readonly=True) as store:
        agg = store.aggregate(Selection(start=NOV, end=NOV + 6000))
    bound = 0.0109
    for name, q in (("median", 0.5), ("q90", 0.9), ("q95", 0.95), ("q99", 0.99)):
        e = estimate(agg, name)
        truth = values[rank(q, len(values)) - 1]
        assert e.count == len(values)
        assert abs(e.value - truth) <= bound * truth, name
    assert estimate(agg, "max").value == values[-1]
    assert estimate(agg, "mean").value == pytest.approx(values.mean(), rel=1e-12)


def test_confidence_interval_covers_the_true_quantile():
    """Order-statistic intervals from 60 samples cover the true median and q90 ~95% of the
    time (checked on 2000 seeded trials; the bound allows for the trials' own noise)."""
    rng = np.random.default_rng(7)
    for q, true in ((0.5, math.log(2)), (0.9, math.log(10))):  # exponential(1) quantiles
        lo_rank, hi_rank = quantile_ranks(60, q, 0.95)
        covered = 0
        for _ in range(2000):
            x = np.sort(rng.exponential(1.0, 60))
            covered += x[lo_rank - 1] <= true <= x[hi_rank - 1]
        assert 0.935 <= covered / 2000 <= 0.99, (q, covered)


def test_confidence_interval_from_histograms_is_the_order_statistics_within_a_bucket():
    rng = np.random.default_rng(8)
    values = rng.lognormal(-7, 1, 600)
    h = Histogram()
    h.record_many(values)
    e = estimate(Aggregate(histogram=h), "q95", confidence=0.95)
    lo, hi = quantile_ranks(600, 0.95, 0.95)
    x = np.sort(values)
    assert e.low == pytest.approx(x[lo - 1], rel=0.011)
    assert e.high == pytest.approx(x[hi - 1], rel=0.011)
    assert e.low <= e.value <= e.high
    assert quantile_ranks(60, 0.99, 0.95) is None  # 60 values cannot bound a q99


def test_a_stuck_op_raises_every_statistic(tmp_path):
    t = NOV + 3600
    fill(tmp_path / "a.db", NOV, 120, lognormal(0.001), ops=("md-stat",), stuck={t: 40.0})
    with Store(tmp_path / "a.db", readonly=True) as store:
        hung = store.aggregate(Selection(start=t, end=t + 60))
        calm = store.aggregate(Selection(start=t + 60, end=t + 600))
    for name in ("median", "q95", "mean", "max"):
        e = estimate(hung, name)
        assert (e.value, e.raised, e.stuck) == (40.0, True, 40.0)
        assert not estimate(calm, name).raised
    empty = Aggregate(stuck=12.5, stuck_end=12.5)  # no op finished at all: slow, not "no data"
    assert estimate(empty, "median").value == 12.5


def test_monthly_baselines_across_a_month_boundary_and_a_manual_rebaseline(tmp_path):
    db = tmp_path / "a.db"
    # October: median 1 ms; November: median 4 ms (whole months, 1 op to keep it quick).
    fill(db, OCT, 31 * 1440, lognormal(0.001, 0.1), ops=("md-stat",), per_minute=4)
    fill(db, NOV, 30 * 1440, lognormal(0.004, 0.1), ops=("md-stat",), per_minute=4, seed=1)
    with Store(db) as store:
        made = baseline.maintain(store, NOV + 3600, statistics=["median"])
        oct_base = {b.statistic: b for b in made}
        assert oct_base["median"].value == pytest.approx(0.001, rel=0.03)
        assert (oct_base["median"].valid_from, oct_base["median"].data_from) == (NOV, OCT)
        assert baseline.maintain(store, NOV + 7200) == []  # nothing due twice
        # A manual rebaseline on Nov 20 from the data of Nov 19.
        nov20 = utc(2026, 11, 20)
        baseline.rebaseline(store, nov20, "new OSTs", data_from=nov20 - 86400)
        dec = utc(2026, 12, 1)
        made = baseline.maintain(store, dec + 60)
        assert {b.data_from for b in made} == {nov20}  # the month since the rebaseline
        book = BaselineBook([store])
        assert book.expected("work", "md-stat", "median", NOV + 86400).value == \
            pytest.approx(0.001, rel=0.03)
        manual = book.expected("work", "md-stat", "median", nov20 + 3600)
        assert manual.baseline.reason == "new OSTs"
        assert manual.value == pytest.approx(0.004, rel=0.03)
        assert book.expected("work", "md-stat", "median", dec + 3600).baseline.reason == "monthly"
        # Every moment has exactly one baseline in force.
        rows = [b for b in baseline.load(store) if b.statistic == "median"]
        for t in (OCT + 5, NOV + 5, nov20 - 5, nov20 + 5, dec + 5):
            assert sum(b.valid_from <= t and (b.valid_to is None or t < b.valid_to)
                       for b in rows) == (0 if t < NOV else 1)


def test_provisional_until_a_day_of_data_then_initial(tmp_path):
    db = tmp_path / "a.db"
    fill(db, NOV, 600, lognormal(0.002), ops=("md-read",))
    with Store(db) as store:
        assert baseline.maintain(store, NOV + 600 * 60) == []
        e = BaselineBook([store]).expected("work", "md-read", "median", NOV + 600 * 60)
        assert e.provisional and e.baseline is None
        assert e.value == pytest.approx(0.002, rel=0.05)
        fill(db, NOV + 600 * 60, 1440, lognormal(0.002), ops=("md-read",), seed=3)
        made = baseline.maintain(store, NOV + 2040 * 60)
        assert made and all(b.reason == "initial" for b in made)
        e = BaselineBook([store]).expected("work", "md-read", "median", NOV + 2041 * 60)
        assert not e.provisional and e.baseline.reason == "initial"


def test_both_slowdown_definitions(tmp_path):
    db = tmp_path / "a.db"
    fill(db, OCT, 31 * 1440, lognormal(0.001, 0.5), ops=("md-stat",), per_minute=4)
    fill(db, NOV, 60, lognormal(0.003, 0.5), ops=("md-stat",), seed=2)
    with Store(db) as store:
        baseline.maintain(store, NOV + 60, statistics=["q95"])
        now = NOV + 3600
        same = op_slowdown([store], BaselineBook([store], "same"), "work", "md-stat", 3600,
                           "q95", now)
        paper = op_slowdown([store], BaselineBook([store], "median"), "work", "md-stat", 3600,
                            "q95", now)
        b = {x.statistic: x.value for x in baseline.load(store)}
    assert same.expected.statistic == "q95" and paper.expected.statistic == "median"
    assert same.value == pytest.approx(same.observed.value / b["q95"])
    assert paper.value == pytest.approx(paper.observed.value / b["median"])
    assert 2.5 < same.value < 3.5  # three times slower, like for like
    assert paper.value > same.value * 2  # q95 over a median: much larger


def test_cluster_of_three_hosts_equals_the_merge_of_their_samples(tmp_path):
    raw = []
    for i, median in enumerate((0.001, 0.002, 0.008)):
        raw += fill(tmp_path / f"n{i}.db", NOV, 30, lognormal(median, 0.4), host=f"n{i}",
                    ops=("md-stat",), seed=i)
    stores = [Store(tmp_path / f"n{i}.db", readonly=True) for i in range(3)]
    whole = Histogram()
    whole.record_many(np.concatenate(raw))
    agg = aggregate(stores, Selection(start=NOV, end=NOV + 1800))
    assert agg.histogram == whole
    book = BaselineBook(stores)
    result = target_slowdowns(stores, book, ["work"], {"work": ["md-stat"]}, [1800], "q95",
                              NOV + 1800)
    (ts,) = result["work"]
    assert ts.ops[0].observed.value == whole.quantile(0.95)
    assert ts.ops[0].expected.provisional


def test_accuracy_picks_the_shortest_window_that_is_accurate_enough(tmp_path):
    db = tmp_path / "a.db"
    fill(db, NOV, 24 * 60, lognormal(0.002, 0.5), ops=("md-stat",))
    with Store(db, readonly=True) as store:
        book = BaselineBook([store])
        now = NOV + 24 * 3600
        found = accurate_window([store], book, "work", ["md-stat"], "median", now, 0.05)
        assert found is not None
        e = found.ops[0].observed
        assert e.half_width <= 0.05
        shorter = [w for w in (60, 120, 300, 600, 900, 1800, 3600) if w < found.window]
        for w in shorter:  # every shorter candidate is not accurate enough
            o = op_slowdown([store], book, "work", "md-stat", w, "median", now, 0.95)
            assert o.observed.half_width is None or o.observed.half_width > 0.05


def test_history_merges_each_cell_at_the_scale_of_its_own_records(tmp_path):
    """A record at a coarser scale (a minute with a huge range) coarsens its own cell only,
    as Histogram.merge does: the cells around it keep the finer scale."""
    db = tmp_path / "a.db"
    fill(db, NOV, 40, lognormal(0.002, 1.0), ops=("md-stat",))
    coarse = Histogram()
    coarse.record_many(np.random.default_rng(5).lognormal(np.log(0.003), 1.0, 60))
    coarse.downscale(2)
    with Store(db) as store:
        store.write([Record("n9", "work", "md-stat", NOV + 25 * 60, coarse)])
    with Store(db, readonly=True) as store:
        for step in (60, 600):
            cells = series.history([store], Selection(), step, ["median", "q90", "q99"])
            scales = set()
            for i in range(len(cells)):
                h = aggregate([store], Selection(start=int(cells.start[i]),
                                                 end=int(cells.start[i]) + step)).histogram
                scales.add(h.scale)
                assert cells.count[i] == h.count
                for name, q in (("median", 0.5), ("q90", 0.9), ("q99", 0.99)):
                    assert cells.quantiles[name][i] == h.quantile(q), (step, i, name)
            assert scales == {2, 5}


@pytest.mark.parametrize("dense", [series._DENSE, 50])  # 50: a few cells per chunk
def test_vectorised_history_equals_histogram_quantiles(tmp_path, monkeypatch, dense):
    """One record per cell (1-minute steps) takes the stored quantiles, or decodes the
    histograms for a quantile not stored (q75); merged cells (10-minute steps, or two
    hosts' files) decode and merge: every way gives Histogram.quantile exactly."""
    monkeypatch.setattr(series, "_DENSE", dense)
    db, other = tmp_path / "a.db", tmp_path / "b.db"
    fill(db, NOV, 45, lognormal(0.002, 1.0), ops=("md-stat", "data-read"),
         stuck={NOV + 600: 9.0})
    fill(other, NOV, 30, lognormal(0.004, 1.0), ops=("md-stat",), host="n2", seed=1)
    # 600 samples a minute in a few buckets: counts over 255, another encoding layout.
    fill(other, NOV + 300, 10, lognormal(0.004, 0.01), ops=("md-stat",), host="n3",
         per_minute=600, seed=2)
    wanted = {"median": 0.5, "q75": 0.75, "q90": 0.9, "q95": 0.95, "q99": 0.99}
    with Store(db, readonly=True) as store, Store(other, readonly=True) as store2:
        for stores, step, stats in (([store], 60, ["median", "q90", "q95", "q99"]),
                                    ([store], 60, ["q75", "q95"]),
                                    ([store], 600, list(wanted)),
                                    ([store, store2], 60, list(wanted))):
            cells = series.history(stores, Selection(), step, stats)
            assert len(cells) == len({(t, o, s) for t, o, s in zip(
                cells.target, cells.op, cells.start)})
            keys = list(zip(cells.target.tolist(), cells.op.tolist(), cells.start.tolist()))
            assert keys == sorted(keys)
            for i in range(len(cells)):
                agg = aggregate(stores, Selection(targets=(cells.target[i],),
                                                  ops=(cells.op[i],),
                                                  start=int(cells.start[i]),
                                                  end=int(cells.start[i]) + step))
                h = agg.histogram
                assert cells.count[i] == h.count
                assert cells.stuck[i] == agg.stuck
                assert cells.min[i] == h.min and cells.max[i] == h.max
                for name in stats:
                    assert cells.quantiles[name][i] == h.quantile(wanted[name]), (step, i, name)


def test_histories_of_several_steps_are_each_steps_history(tmp_path):
    """One read for several steps (what the report asks for) gives, step by step, what
    ``history`` gives for each: one file and a cluster of two, with and without moments,
    stored quantiles and merged ones side by side."""
    db, other = tmp_path / "a.db", tmp_path / "b.db"
    fill(db, NOV, 150, lognormal(0.002, 1.0), ops=("md-stat", "data-read"),
         stuck={NOV + 3600: 12.0})
    fill(other, NOV + 600, 90, lognormal(0.004, 1.0), ops=("md-stat",), host="n2", seed=1)
    steps = [1800, 60, 600, 3600]
    with Store(db, readonly=True) as store, Store(other, readonly=True) as store2:
        for stores, stats, moments in (([store], ["median", "q95"], True),
                                       ([store], ["q75", "q99"], False),
                                       ([store, store2], ["median", "q90", "q95"], True)):
            together = series.histories(stores, Selection(), steps, stats, moments)
            assert len(together) == len(steps)
            for step, cells in zip(steps, together):
                alone = series.history(stores, Selection(), step, stats, moments)
                assert cells.names == alone.names and len(cells) == len(alone) > 0
                for field in ("series", "start", "count", "errors", "skipped", "stuck", "sum",
                              "sumsq", "min", "max"):
                    a, b = getattr(cells, field), getattr(alone, field)
                    assert (a is None and b is None) or np.array_equal(a, b, equal_nan=True), \
                        (step, field)
                assert cells.quantiles.keys() == alone.quantiles.keys() == set(stats)
                for name in stats:
                    assert np.array_equal(cells.quantiles[name], alone.quantiles[name],
                                          equal_nan=True), (step, name)
