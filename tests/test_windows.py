"""One definition of a window (SPEC section 6, docs/WINDOWS.md): records that overlap a window
count by their overlap, and `slowdown`, `history` at any step, the report and the metrics
endpoint give the same numbers for the same window of the same data."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from slowdown.analysis.cli.main import main
from slowdown.analysis.config import loads
from slowdown.analysis.histogram import Histogram
from slowdown.analysis.report.data import collect
from slowdown.analysis.stats.window import estimate
from slowdown.analysis.store import Selection, Store, aggregate
from slowdown.analysis.store.records import HOUR, MINUTE, Record
from slowdown.analysis.view.reader import Reader
from slowdown.probe.daemon.service import Service
from testdata.datakit import utc

DAY = utc(2026, 11, 2)
OPS = ("data-read", "md-stat")
WINDOWS = (60, 600, 3600)


def run(*args: str) -> str:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def record(start: int, values, op: str = "data-read", span: int = MINUTE, **kw) -> Record:
    h = Histogram()
    h.record_many(np.asarray(values, dtype=float))
    return Record("n1", "work", op, start, h, span=span, **kw)


def slowdown_json(db: Path, at: int, statistic: str) -> dict[tuple[int, str], dict]:
    """(window, op) -> the op's entry of `slowdown --json` at ``at``."""
    doc = json.loads(run("--db", str(db), "--at", f"@{at}", "--json", "--stat", statistic))
    return {(w["window"], o["op"]): o for t in doc["targets"] for w in t["windows"]
            for o in w["ops"]}


def history_rows(db: Path, start: int, end: int, every: int, statistic: str) -> list[dict]:
    doc = json.loads(run("history", "--db", str(db), "--since", f"@{start}", "--until",
                         f"@{end}", "--every", f"{every}s", "--stat", statistic,
                         "--format", "json"))
    return doc["rows"]


def config_text(db: Path, path: Path) -> str:
    return (f'database = "{db}"\nhost = "n1"\n[[target]]\nname = "work"\n'
            f'path = "{path}"\ndata_size = "16MiB"\npool_files = 100\n[metrics]\n')


def report_last(db: Path, at: int, statistic: str) -> dict[int, float | None]:
    """window -> the report's slowdown of the window that ends at ``at`` (target work), from
    a report of that one window (a chart with hours in it shows the worst window of each
    hour-long column)."""
    store = Store(db, readonly=True)
    series = store.series()
    reader = Reader(loads(config_text(db, db.parent)), [store], (), (), (), float(at), False,
                    series, [series])
    out = {}
    for window in WINDOWS:
        doc = collect(reader, at - window, at, [statistic], [window])
        (work,) = [t for t in doc["targets"] if t["target"] == "work"] or [None]
        out[window] = None
        if work is not None:
            (s,) = work["timeline"]["series"]
            column = (at - window - s["t0"]) // s["step"]
            out[window] = s["values"][column]
    store.close()
    return out


def metrics_gauges(tmp_path: Path, db: Path, at: int) -> dict[tuple[str, str, str], float]:
    """(op, window label, statistic) -> slowdown_op_ratio of the service's endpoint."""
    s = Service(loads(config_text(db, tmp_path), tmp_path / "slowdown.toml"))
    with Store(db, readonly=True) as store:
        slow = s.metrics._compute(store, at + 5)
    return {(op, w, st_): ratio for _, op, w, st_, ratio, _ in slow.ops if ratio is not None}


def test_an_hour_record_cut_by_a_window_counts_by_its_overlap(tmp_path):
    """After the rollup, 1m and 10m windows inside an hour hold a share of it with its
    distribution, and a 1h window that ends inside an hour takes only the part before."""
    db = tmp_path / "n1.db"
    rng = np.random.default_rng(1)
    hour = rng.lognormal(np.log(0.002), 0.4, 3600)
    with Store(db) as store:
        store.write([record(DAY, hour, span=HOUR)])
        store.write([record(DAY + HOUR + 60 * m, rng.lognormal(np.log(0.004), 0.4, 60))
                     for m in range(60)])
    whole = Histogram()
    whole.record_many(hour)
    with Store(db, readonly=True) as store:
        for first, end, share in ((DAY + 600, DAY + 660, 1 / 60), (DAY + 1800, DAY + 2400, 1 / 6),
                                  (DAY, DAY + HOUR, 1.0)):
            agg = aggregate([store], Selection(start=first, end=end))
            assert agg.samples == pytest.approx(3600 * share)
            for q in ("median", "q95", "q99", "mean", "max"):
                got = estimate(agg, q).value
                want = {"mean": whole.mean, "max": whole.max}.get(q)
                if want is None:
                    want = whole.quantile({"median": 0.5, "q95": 0.95, "q99": 0.99}[q])
                assert got == pytest.approx(want, rel=1e-12), (first, q)
        # 1h ending at DAY + 1.5 h: half the hour record, and the 30 minutes after it.
        agg = aggregate([store], Selection(start=DAY + 1800, end=DAY + 5400))
        assert agg.samples == pytest.approx(1800 + 30 * 60) and agg.records == 31
    out = slowdown_json(db, DAY + 1800, "median")
    for window in (60, 600):  # inside the hour: data, not empty
        assert out[(window, "data-read")]["count"] == window
        assert out[(window, "data-read")]["observed"] == pytest.approx(whole.quantile(0.5))
    assert out[(3600, "data-read")]["count"] == 1800  # the hour up to --at, not all of it
    rows = history_rows(db, DAY, DAY + HOUR, 600, "median")
    assert [r["count"] for r in rows] == [600] * 6
    assert [r["median"] for r in rows] == [pytest.approx(whole.quantile(0.5), rel=1e-12)] * 6


def test_a_cluster_counts_hour_records_by_their_overlap_too(tmp_path):
    """Over several files (the cluster's own read path) the rule is the same: an hour record of
    each host inside the 1m and 10m windows counts by its share, not as no data."""
    rng = np.random.default_rng(2)
    for host in ("n1", "n2"):
        with Store(tmp_path / f"{host}.db") as store:
            h = Histogram()
            h.record_many(rng.lognormal(np.log(0.002), 0.4, 3600))
            store.write([Record(host, "work", "data-read", DAY, h, span=HOUR)])
    doc = json.loads(run("--db", str(tmp_path / "n*.db"), "--at", f"@{DAY + 1800}", "--json"))
    counts = {w["window"]: o["count"] for t in doc["targets"] for w in t["windows"]
              for o in w["ops"]}
    assert counts == {60: 120, 600: 1200, 3600: 3600}


def test_the_same_samples_give_the_same_slowdown_on_a_first_day(tmp_path):
    """42 data-read samples in the first minutes of a node (no baseline yet: provisional):
    every window that holds them all shows the same slowdown in every command."""
    db = tmp_path / "n1.db"
    rng = np.random.default_rng(5)
    start = DAY + 10 * HOUR
    with Store(db) as store:
        for m, n in zip(range(1, 5), (10, 11, 11, 10)):
            values = rng.lognormal(np.log(0.003), 0.6, n)
            store.write([record(start + 60 * m, values, op) for op in OPS])
    at = start + 5 * 60
    shown = {}
    for every in (300, 600):
        (row,) = [r for r in history_rows(db, start, at, every, "q95")
                  if r["op"] == "data-read"]
        assert row["count"] == 42
        shown[f"history --every {every}s"] = row["slowdown_q95"]
    out = slowdown_json(db, at, "q95")
    for window in (600, 3600):
        assert out[(window, "data-read")]["count"] == 42
        shown[f"slowdown {window}s"] = out[(window, "data-read")]["slowdown"]
    shown["metrics 1h"] = metrics_gauges(tmp_path, db, at)[("data-read", "1h", "q95")]
    # The report's 10m window [10:00, 10:10) ends after --until: it holds the same samples.
    lasts = report_last(db, at + 5 * 60, "q95")
    shown["report 10m"] = lasts[600]
    assert set(shown.values()) == {1.0}, shown  # the window is all the data the baseline has


def _database(path: Path, data) -> None:
    """Hours up to a cutoff, minutes after it (as after a rollup), for two ops."""
    hours, cutoff, minutes, seed = data
    rng = np.random.default_rng(seed)
    records = []
    for i, op in enumerate(OPS):
        for h in range(hours):
            n = int(rng.integers(1, 400))
            records.append(record(DAY + h * HOUR, rng.lognormal(-6 + i, 0.5, n), op, HOUR,
                                  errors=int(rng.integers(0, 3))))
        for m in range(minutes):
            if rng.random() < 0.8:
                n = int(rng.integers(1, 60))
                records.append(record(DAY + cutoff * HOUR + m * 60,
                                      rng.lognormal(-6 + i + rng.random(), 0.5, n), op))
    with Store(path) as store:
        store.write(records)


databases = st.tuples(st.integers(1, 4), st.integers(0, 4), st.integers(0, 150),
                      st.integers(0, 2**16)).map(lambda t: (t[0], max(t[0], t[1]), *t[2:]))


@settings(max_examples=12, deadline=None, phases=[Phase.explicit, Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=databases, tens=st.integers(1, 60), statistic=st.sampled_from(["median", "q95"]))
def test_every_command_computes_a_window_the_same_way(tmp_path_factory, data, tens, statistic):
    """Random databases of hour and minute records: at a moment on a 10-minute boundary,
    `slowdown`, `history` (a cell per window; 1-minute cells add up to the window),
    the report and the metrics gauges give the same statistic and slowdown per window."""
    tmp = tmp_path_factory.mktemp("w")
    db = tmp / "n1.db"
    _database(db, data)
    _, cutoff, minutes, _ = data
    at = DAY + 600 * min(tens, (cutoff * 60 + minutes) // 10 + 1)
    out = slowdown_json(db, at, statistic)
    gauges = metrics_gauges(tmp, db, at)
    report = report_last(db, at, statistic)
    for window in WINDOWS:
        worst = None
        aligned = at % window == 0
        for op in OPS:
            mine = out[(window, op)]
            label = {60: "1m", 600: "10m", 3600: "1h"}[window]
            assert gauges.get((op, label, statistic)) == mine["slowdown"], (window, op)
            minute_rows = [r for r in history_rows(db, at - window, at, 60, statistic)
                           if r["op"] == op]
            # Each row's count is rounded: within half a sample per row (and the window's own).
            assert abs(sum(r["count"] for r in minute_rows) - mine["count"]) \
                <= len(minute_rows) / 2 + 0.5, (window, op)
            if not aligned:
                continue
            rows = [r for r in history_rows(db, at - window, at, window, statistic)
                    if r["op"] == op]
            assert len(rows) <= 1
            if not rows:
                assert mine["count"] == 0
                continue
            assert rows[0]["count"] == mine["count"]
            assert rows[0][statistic] == mine["observed"], (window, op)
            assert rows[0][f"slowdown_{statistic}"] == mine["slowdown"], (window, op)
            if mine["slowdown"] is not None:
                worst = max(worst or 0.0, mine["slowdown"])
        if aligned:
            shown = report[window]
            assert (shown is None and worst is None) or \
                math.isclose(shown, worst, rel_tol=1e-5), (window, shown, worst)
