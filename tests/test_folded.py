"""History and the report over several files, folded a file at a time (stats.history_by_file), give
the numbers of the reading that holds every record (stats.series), to the bit: random files
of hour and minute records (several hosts a file, both tables over the same hour, histograms
of two scales, zeros, stuck ops, errors), steps that cut hours, ranges cut anywhere."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from slowdown.analysis.histogram import Histogram
from slowdown.analysis.report import data as report_data
from slowdown.analysis.report import provision
from slowdown.analysis.stats import history_by_file as folded
from slowdown.analysis.stats import record_arrays as folded_rows
from slowdown.analysis.stats import series
from slowdown.analysis.store import Selection, Store
from slowdown.analysis.store.records import HOUR, MINUTE, Record

DAY = 1_700_006_400 - 1_700_006_400 % 86400
OPS = ("data-read", "md-stat")


def _files(tmp: Path, seed: int, files: int) -> list[Path]:
    rng = np.random.default_rng(seed)
    paths = []
    for f in range(files):
        records = []
        for host in (f"n{f}a", f"n{f}b")[:int(rng.integers(1, 3))]:
            for op in OPS:
                scale = int(rng.choice([3, 5]))
                hours = int(rng.integers(0, 4))
                for h in range(hours):
                    records.append(_record(rng, host, op, DAY + h * HOUR, HOUR, scale))
                for m in range(int(rng.integers(0, 200))):
                    if rng.random() < 0.8:  # from the last hour on: both tables over it
                        records.append(_record(rng, host, op, DAY + max(0, hours - 1) * HOUR
                                               + m * MINUTE, MINUTE, scale))
        paths.append(tmp / f"f{f}.db")
        with Store(paths[-1]) as store:
            store.write(records)
    return paths


def _record(rng, host: str, op: str, start: int, span: int, scale: int) -> Record:
    h = Histogram(scale)
    values = rng.lognormal(-6 + rng.random(), 0.7, int(rng.integers(0, 80)))
    values[rng.random(values.size) < 0.05] = 0.0
    h.record_many(values)
    stuck = float(rng.choice([0.0, 0.0, 0.0, rng.uniform(1, 30)]))
    return Record(host, "work", op, start, h, errors=int(rng.integers(0, 2)),
                  skipped=int(rng.integers(0, 2)), stuck=stuck,
                  stuck_end=float(rng.choice([0.0, stuck])), span=span)


def _same(a, b, sums_rounded: bool = False) -> None:
    """``sums_rounded``: sums and sums of squares to their rounding (where tens stand in for
    minutes), everything else to the bit."""
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if sums_rounded and f.name in ("sum", "sumsq") and x is not None:
            np.testing.assert_allclose(x, y, rtol=1e-12, err_msg=f.name)
        elif isinstance(x, dict):
            assert x.keys() == y.keys()
            for k in x:
                np.testing.assert_array_equal(x[k], y[k], err_msg=f"{f.name} {k}")
        elif isinstance(x, np.ndarray) and x.dtype != object:
            np.testing.assert_array_equal(x, y, err_msg=f.name)  # NaN equal to NaN, bits
        else:
            assert (list(x) if isinstance(x, np.ndarray) else x) == \
                (list(y) if isinstance(y, np.ndarray) else y), f.name


@settings(max_examples=10, deadline=None, phases=[Phase.explicit, Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**16), files=st.integers(2, 4), first=st.integers(0, 200),
       length=st.integers(1, 300), moments=st.booleans())
def test_folded_history_is_the_history_of_every_record(tmp_path_factory, seed, files, first,
                                                       length, moments):
    tmp = tmp_path_factory.mktemp("f")
    stores = [Store(p, readonly=True) for p in _files(tmp, seed, files)]
    start = DAY + first * MINUTE
    selection = Selection(start=start, end=start + length * MINUTE)
    steps = [60, 420, 600, 3600]
    stats = ["median", "q95", "q99"]
    old = series.histories(stores, selection, steps, stats, moments, fold=False)
    new = folded.histories(stores, selection, steps, stats, moments)
    for a, b in zip(old, new):
        _same(a, b)
    # With the report's heat maps and throughputs, and pairs read in batches of one.
    grid = report_data.Grid(start, start + length * MINUTE, HOUR)
    extras = folded.Extras(grid.t0, grid.step, grid.columns)
    budget, folded.BUDGET = folded.BUDGET, 1
    try:
        batched = folded.histories(stores, selection, steps, stats, True, extras)
    finally:
        folded.BUDGET = budget
    for a, b in zip(series.histories(stores, selection, steps, stats, True, fold=False),
                    batched):
        _same(a, b)
    heat = report_data.heatmaps(stores, selection, grid)
    assert heat == {pair: report_data._folded_heatmap(grid, *v)
                    for pair, v in extras.heat.items()}
    figures = provision.per_node_figures(stores, selection)
    assert figures.keys() == extras.figures.keys()
    for pair, values in figures.items():
        np.testing.assert_array_equal(values, extras.figures[pair])


@settings(max_examples=10, deadline=None, phases=[Phase.explicit, Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**16), files=st.integers(2, 4), first=st.integers(0, 200),
       length=st.integers(1, 300), moments=st.booleans())
def test_steps_of_whole_ten_minutes_read_the_tens_and_give_the_same_history(
        tmp_path_factory, monkeypatch, seed, files, first, length, moments):
    """Steps of 10 minutes and an hour read each file's whole tens in place of their minutes:
    the numbers of every record read one by one, the sums to their rounding."""
    tmp = tmp_path_factory.mktemp("t")
    stores = [Store(p, readonly=True) for p in _files(tmp, seed, files)]
    start = DAY + first * MINUTE
    selection = Selection(start=start, end=start + length * MINUTE)
    steps, stats = [600, 3600], ["median", "q95", "q99"]
    spans: list[int] = []
    read = folded_rows.read

    def counted(*args, **kwargs):
        got = read(*args, **kwargs)
        spans.extend(row[1] for row in got[0])
        return got

    monkeypatch.setattr(folded, "read", counted)
    new = folded.histories(stores, selection, steps, stats, moments)
    for a, b in zip(series.histories(stores, selection, steps, stats, moments, fold=False), new):
        _same(a, b, sums_rounded=True)
    with_tens = any(list(store.conn.execute(
        "SELECT 1 FROM tens WHERE start >= ? AND start + 600 <= ?", (start, selection.end)))
        for store in stores)
    assert (600 in spans) == with_tens
