"""`slowdown report`: the HTML page opened in headless Chromium (Debian's, installed by .ci/run)
renders without console errors or network requests, and its figures hold the database's data;
the PNG images; bad input.

The database: targets ``work`` (6 ops) and ``home`` (2 ops) on host n1 for 3 hours, with node
context, errors, skipped ticks and a stuck probe in two minutes of work/md-stat, md-read five
times slower for ten minutes, an fio run imported as target ``fio-run``, and a rebaseline
half-way (a baseline change in the range).
"""

from __future__ import annotations

import math
import re
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from slowdown.analysis.report.provision import estimate, per_node_figures
from slowdown.analysis.store import Selection, Store
from testdata.datakit import OPS, fill, lognormal
from tests.kit.reportkit import (
    AT,
    FIO_ROWS,
    NOV,
    REBASELINE,
    epoch,
    history_rows,
    node_values,
    report_database,
    run,
)

CHROMIUM = "/usr/bin/chromium"


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> Path:
    return report_database(tmp_path_factory)


@pytest.fixture(scope="module")
def report(db) -> Path:
    out = db.parent / "report.html"
    code, text = run("report", "--db", db, "--at", AT, "--since", "3h", "-o", out,
                     "--provision", "3000", "--confidence", "99%", "--trials", "2000")
    assert code == 0, text
    assert re.search(r"report: 3 target\(s\), 33 figures, [\d.]+ MB -> ", text)
    return out


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--no-first-run"])
        yield chromium
        chromium.close()


class Loaded:
    """A report opened in the browser, with everything it logged and requested."""

    def __init__(self, browser, path: Path) -> None:
        self.page = browser.new_page(viewport={"width": 1400, "height": 900})
        self.console: list[tuple[str, str]] = []
        self.requests: list[str] = []
        self.page.on("console", lambda m: self.console.append((m.type, m.text)))
        self.page.on("pageerror", lambda e: self.console.append(("pageerror", str(e))))
        self.page.on("request", lambda r: self.requests.append(r.url))
        started = time.perf_counter()
        self.page.goto(path.as_uri())
        self.page.wait_for_selector("body[data-rendered]", timeout=60_000)
        if self.page.locator("figure.long").count():  # the long-period figures' own script
            self.page.wait_for_selector("body[data-long-rendered]", timeout=60_000)
        self.wall = time.perf_counter() - started
        self.rendered_ms = int(self.page.evaluate("document.body.dataset.rendered"))

    def figures(self) -> list[dict]:
        return self.page.evaluate("""() => Array.from(document.querySelectorAll(
            'figure.chart')).map(f => ({id: f.id, kind: f.dataset.kind, target: f.dataset.target,
            op: f.dataset.op || null, drawn: f.dataset.drawn, total: f.dataset.total,
            cells: f.dataset.cells, points: f.dataset.points, data: JSON.parse(
            f.querySelector('script[type="application/json"]').textContent)}))""")


@pytest.fixture(scope="module")
def loaded(browser, report) -> Loaded:
    page = Loaded(browser, report)
    yield page
    page.page.close()


def figures_of(loaded: Loaded, kind: str) -> dict[tuple[str, str | None], dict]:
    return {(f["target"], f["op"]): f for f in loaded.figures() if f["kind"] == kind}


def recorded(db: Path, column: str, target: str, op: str | None = None) -> float:
    """sum (or max) of a record column over the report's range, from SQL."""
    how = "max" if column == "stuck" else "sum"
    with Store(db, readonly=True) as store:
        return store.conn.execute(
            f"SELECT coalesce({how}(r.{column}), 0) FROM minutes r JOIN series s ON "
            "s.id = r.series WHERE s.target = ? AND s.op GLOB ? AND r.start >= ? AND "
            "r.start < ?", (target, op or "*", NOV, NOV + 180 * 60)).fetchone()[0]


# -- the page's script and style sheet -----------------------------------------------------------

REPORT_PACKAGE = "slowdown.analysis.report"
ASSETS = {"report.js": "script", "report.css": "style"}  # package file -> element inlining it


def test_the_page_inlines_the_packaged_script_and_style_sheet_verbatim(report):
    from importlib.resources import files

    page = report.read_text(encoding="utf-8")
    for name, element in ASSETS.items():
        asset = files(REPORT_PACKAGE).joinpath(name)
        assert asset.is_file(), name
        text = asset.read_text(encoding="utf-8")
        assert len(text) > 1000, name
        assert f"<{element}>\n{text}</{element}>\n" in page, name


def test_every_file_of_the_report_package_that_is_not_python_is_package_data():
    """Else a wheel would lack it (and the page its script or style)."""
    import configparser
    from importlib.resources import files

    cfg = configparser.ConfigParser()
    cfg.read(Path(__file__).parents[1] / "setup.cfg")
    declared = {n.strip() for n in cfg["options.package_data"][REPORT_PACKAGE].split(",")}
    present = {f.name for f in files(REPORT_PACKAGE).iterdir()
               if f.is_file() and not f.name.endswith((".py", ".pyc"))}
    assert set(ASSETS) <= present == declared


# -- the page in the browser --------------------------------------------------------------------

def test_renders_every_figure_without_errors_or_network(loaded, report):
    assert loaded.console == []
    assert loaded.requests == [report.as_uri()]
    figures = loaded.figures()
    # work: 1 timeline + 6 ops x 3; home: 1 + 2 x 3; fio-run: 1 + 2 x 3.
    assert len(figures) == 33
    assert all(f["drawn"] == "1" for f in figures), [f["id"] for f in figures
                                                     if f["drawn"] != "1"]
    assert loaded.page.evaluate("document.body.dataset.figures") == "33"
    assert sorted({f["target"] for f in figures}) == ["fio-run", "home", "work"]
    policy = loaded.page.evaluate("document.querySelector('meta[http-equiv]').content")
    assert policy.startswith("default-src 'none'")


def test_heat_maps_hold_every_recorded_op(loaded, db):
    heat = figures_of(loaded, "heatmap")
    assert len(heat) == 6 + 2 + 2
    for (target, op), f in heat.items():
        d = f["data"]
        total = sum(sum(cell[2:]) for cell in d["cells"])
        assert total == d["total"] == recorded(db, "count", target, op) > 0, (target, op)
        assert int(f["total"]) == total  # what the script painted
        assert int(f["cells"]) == sum(1 for cell in d["cells"] for n in cell[2:] if n)
        assert d["rows"] <= 120 and d["step"] == 60 and d["columns"] == 180
    fio = heat[("fio-run", "read")]["data"]["total"] + heat[("fio-run", "write")]["data"]["total"]
    assert fio == len(FIO_ROWS)
    painted = loaded.page.evaluate("""() => {
        const c = document.querySelector('#heatmap-work-md-stat canvas');
        const px = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        let n = 0;
        for (let i = 0; i < px.length; i += 4) {
          const hi = Math.max(px[i], px[i + 1], px[i + 2]), lo = Math.min(px[i], px[i + 1],
                                                                            px[i + 2]);
          if (px[i + 3] === 255 && hi - lo > 60) n++;
        }
        return n; }""")
    assert painted >= int(heat[("work", "md-stat")]["cells"])


def test_heat_map_cells_are_the_histograms_coarsened(loaded, db):
    d = figures_of(loaded, "heatmap")[("work", "md-read")]["data"]
    with Store(db, readonly=True) as store:
        records = {r.start: r for r in store.records(Selection(targets=("work",),
                                                               ops=("md-read",)))}
    cells = {cell[0]: cell for cell in d["cells"]}
    for column in (0, 155, 179):
        h = records[NOV + 60 * column].histogram.copy()
        h.downscale(d["scale"])
        expected = {i - d["lowest"]: c for i, c in h.buckets.items()}
        cell = cells[column]
        got = {cell[1] + k: c for k, c in enumerate(cell[2:]) if c}
        assert got == expected


def test_percentiles_are_those_of_slowdown_history(loaded, db):
    rows = history_rows(db, "1m", "median", "q90", "q95", "q99", "max")
    by_key = {(r["target"], r["op"], epoch(r["time"])): r for r in rows}
    pct = figures_of(loaded, "percentiles")
    assert len(pct) == 10
    compared = 0
    for (target, op), f in pct.items():
        d = f["data"]
        for i in range(d["columns"]):
            row = by_key.get((target, op, d["t0"] + i * d["step"]))
            if row is None:
                assert d["count"][i] == 0 and d["stats"]["median"][i] is None
                continue
            assert d["count"][i] == row["count"] and d["errors"][i] == row["errors"]
            for s in ("median", "q90", "q95", "q99", "max"):
                assert d["stats"][s][i] == pytest.approx(row[s], rel=1e-5), (target, op, i, s)
            compared += 1
    assert compared == len(rows)
    stuck = pct[("work", "md-stat")]["data"]
    assert stuck["stats"]["max"][100] == 12.0 and stuck["stuck"][100] == 12.0


@pytest.mark.parametrize("window", ["1m", "10m", "1h"])
def test_slowdown_timeline_is_the_worst_op_of_history(loaded, db, window):
    span = {"1m": 60, "10m": 600, "1h": 3600}[window]
    worst: dict[tuple[str, int], float] = {}
    for r in history_rows(db, window, "median"):
        if r["slowdown_median"] is not None:
            key = (r["target"], epoch(r["time"]))
            worst[key] = max(worst.get(key, 0.0), r["slowdown_median"])
    for (target, _), f in figures_of(loaded, "timeline").items():
        (s,) = [s for s in f["data"]["series"] if s["window"] == span
                and s["statistic"] == "median"]
        assert s["step"] == span and not s["reduced"]
        shown = {s["t0"] + i * span: v for i, v in enumerate(s["values"]) if v is not None}
        mine = {t: v for (tg, t), v in worst.items() if tg == target}
        assert shown.keys() == mine.keys()
        for t, v in mine.items():
            assert shown[t] == pytest.approx(v, rel=1e-5)
    work = figures_of(loaded, "timeline")[("work", None)]["data"]
    (one,) = [s for s in work["series"] if s["window"] == 60 and s["statistic"] == "q95"]
    assert work["ops"][one["worst"][155]] == "md-read" and one["values"][155] > 3
    assert one["values"][100] > 1000  # stuck for 12 s against a baseline of about 2 ms


def test_events_baselines_and_node_context_on_the_timeline(loaded, db):
    d = figures_of(loaded, "timeline")[("work", None)]["data"]
    ev = d["events"]
    assert sum(ev["errors"]) == recorded(db, "errors", "work") == 4
    assert sum(ev["skipped"]) == recorded(db, "skipped", "work") == 2
    assert [i for i, v in enumerate(ev["stuck"]) if v] == [100] and ev["stuck"][100] == 12.0
    assert ev["errors"][100:102] == [3, 1]
    (change,) = d["baselines"]
    assert change["time"] == REBASELINE and change["reason"] == "new OSTs"
    assert change["ops"] == sorted(OPS)
    node = d["node"]
    assert node["hosts"] == ["n1"]
    fields = {f["name"]: f["values"] for f in node["fields"]}
    assert fields["load1"] == [node_values(m)["load1"] for m in range(180)]
    assert fields["cpu"] == [node_values(m)["cpu"] for m in range(180)]
    assert fields["disk"][7] == pytest.approx((7_000_000 + 500_000) / 60 / 1e6)
    assert fields["net"][7] == pytest.approx(0.001)
    fio = figures_of(loaded, "timeline")[("fio-run", None)]["data"]
    assert fio["node"] == {"hosts": [], "fields": []}
    assert int(figures_of(loaded, "timeline")[("work", None)]["points"]) > 0


def test_x_or_better_tables_are_the_minutes_sorted(loaded, db):
    with Store(db, readonly=True) as store:
        minutes = per_node_figures([store], Selection(start=NOV, end=NOV + 180 * 60))
    for (target, op), f in figures_of(loaded, "x_or_better").items():
        d = f["data"]
        values = np.sort(minutes[(target, op)])[::-1]
        assert d["minutes"] == len(values)
        assert d["unit"] == ("MiB/s" if op.startswith("data-") else "ops/s")
        fractions = [row["fraction"] for row in d["table"]]
        assert fractions == [*[0.5, 0.9, 0.95, 0.99][:len(fractions) - 1], 1.0]
        for row in d["table"]:
            k = max(1, math.ceil(round(row["fraction"] * len(values), 9)))
            assert row["value"] == pytest.approx(values[k - 1], rel=1e-5)
            assert row["latency"] == pytest.approx(1 / values[k - 1], rel=1e-5)
        assert d["points"][0] == [pytest.approx(1 / len(values), rel=1e-5),
                                  pytest.approx(values[0], rel=1e-5)]
        assert d["points"][-1] == [1.0, pytest.approx(values[-1], rel=1e-5)]
        assert int(f["points"]) == len(d["points"])
    work = figures_of(loaded, "x_or_better")[("work", "md-read")]["data"]
    assert work["table"][-1]["value"] < 0.3 * work["table"][0]["value"]  # the slow minutes


def test_provisioning_in_the_report_is_the_estimate(loaded, db):
    blocks = loaded.page.evaluate("""() => Array.from(document.querySelectorAll(
        'script.provision-data')).map(s => JSON.parse(s.textContent))""")
    assert len(blocks) == 3
    work = next(b for b in blocks if b["ops"][0]["target"] == "work")
    assert (work["goal"], work["unit"], work["confidence"], work["trials"]) == \
        (3000.0, "ops/s", 0.99, 2000)
    with Store(db, readonly=True) as store:
        minutes = per_node_figures([store], Selection(start=NOV, end=NOV + 180 * 60))
    for row in work["ops"]:
        e = estimate(minutes[("work", row["op"])], 3000.0, 0.99, trials=2000, seed=0)
        assert (row["nodes_best_case"], row["nodes"]) == (e.nodes_best, e.nodes)
        assert row["ratio"] == pytest.approx(e.ratio)
    text = loaded.page.inner_text("table.provision[data-target='work']")
    assert "nodes at 99%" in text and "md-read" in text


def test_a_range_without_data_still_renders(browser, db, tmp_path):
    out = tmp_path / "empty.html"
    code, text = run("report", "--db", db, "--at", "2026-11-05T00:00:00Z", "--since", "1h",
                     "-o", out)
    assert code == 0, text
    page = Loaded(browser, out)
    try:
        assert page.console == [] and page.requests == [out.as_uri()]
        figures = page.figures()
        assert [f["kind"] for f in figures] == ["timeline"] * 3
        assert all(f["drawn"] == "1" and f["points"] == "0" for f in figures)
        assert page.page.locator("text=no records in this range").count() == 6 + 2 + 2
    finally:
        page.page.close()


# -- 30 days of minute data ----------------------------------------------------------------------

@pytest.mark.slow
def test_thirty_days_render_within_three_seconds_and_ten_megabytes(browser, tmp_path):
    days = 30
    path = tmp_path / "month.db"
    end = NOV + days * 86400
    fill(path, NOV, days * 1440, lognormal(0.0005, 0.5), targets=("work",), per_minute=60)
    out = tmp_path / "month.html"
    code, text = run("report", "--db", path, "--at", "@" + str(end), "--since", "30d",
                     "-o", out)
    assert code == 0, text
    size = out.stat().st_size
    assert size < 10e6
    page = Loaded(browser, out)
    try:
        assert page.console == [] and page.requests == [out.as_uri()]
        heat = {f["op"]: f for f in page.figures() if f["kind"] == "heatmap"}
        assert all(int(f["total"]) == days * 1440 * 60 for f in heat.values())
        # 30 days: the long-period figures too (4 of the target, one timeline per op).
        assert page.page.locator("figure.long[data-drawn='1']").count() == 4 + len(OPS)
        assert page.wall < 3.0, page.wall
    finally:
        page.page.close()


@pytest.mark.slow
def test_the_benchmark_runs_in_its_quick_form(tmp_path):
    import subprocess

    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-m", "bench.bench_report", "--quick", "--dir",
                           str(tmp_path)], cwd=root, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert "34,560 minute records" in lines[0] and "built now" in lines[0]
    rows = {line.split(" | ")[0].lstrip("| "): line for line in lines if line.startswith("| ")}
    assert rows["render, goto to drawn (wall, 3 runs)"].endswith("| yes |")
    assert rows["file size"].endswith("| yes |")
    assert (tmp_path / "report-2d.html").stat().st_size > 1e6
