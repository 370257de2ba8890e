"""The report's long-period figures (``analysis/report/longview.py``) over a planted fleet of
60 days (``testdata/trendkit.py``: three host files of hour records, the baselines the
service would have made): the planted shift is a change point near its day, the cycles are
found, the caching week reads below 1, one box per host; the figures are drawn in Chromium;
off below 14 days; PNGs written."""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

import pytest

from testdata import trendkit
from tests.kit.reportkit import run

DAY = 86400
HOSTS = 3
OPS = ("md-stat", "data-read")
CHROMIUM = "/usr/bin/chromium"
FIGURE = re.compile(r'<figure class="long" id="([^"]+)" data-kind="([^"]+)"'
                    r'(?: data-target="([^"]*)")?(?: data-op="([^"]*)")?>.*?'
                    r'<script type="application/json">(.*?)</script></figure>', re.S)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory) -> tuple[trendkit.Fleet, Path]:
    kit = trendkit.planted(hosts=HOSTS, days=60, ops=OPS)
    where = tmp_path_factory.mktemp("fleet")
    paths = trendkit.write_fleet(where, kit)
    assert trendkit.maintain_baselines(paths, kit) > 0
    return kit, where


@pytest.fixture(scope="module")
def report(fleet) -> Path:
    kit, where = fleet
    out = where / "long.html"
    code, text = run("report", "--db", f"{where}/*.db", "--at", f"@{kit.end}", "--since",
                     "60d", "-o", out)
    assert code == 0, text
    return out


def long_figures(path: Path) -> dict[tuple[str, str, str | None], dict]:
    """(kind, target, op) -> the figure's data, as the page holds it."""
    return {(kind, target, op or None): json.loads(data)
            for _, kind, target, op, data in FIGURE.findall(path.read_text())}


def test_the_planted_shift_is_a_change_point_near_its_day(report, fleet):
    kit, _ = fleet
    figures = long_figures(report)
    for target, op, moment, factor in trendkit.planted_changes(kit):
        changes = figures[("long_timeline", target, op)]["changes"]
        assert len(changes) == 1, changes
        assert abs(changes[0]["at"] - moment) <= DAY
        assert changes[0]["factor"] == pytest.approx(factor, rel=0.2)
    for target, op in trendkit.steady_pairs(kit):
        assert figures[("long_timeline", target, op)]["changes"] == [], (target, op)
    timeline = figures[("long_timeline", "shifted", "md-stat")]
    assert timeline["step"] == 4 * 3600 and set(timeline["stats"]) == {
        "median", "q95", "q99", "max"}
    medians = [v for v in timeline["stats"]["median"] if v is not None]
    assert len(medians) == 60 * 6
    # The level read by the 4-hour medians doubles across the change.
    shift = kit.start + 12.5 * DAY
    before = [v for i, v in enumerate(timeline["stats"]["median"])
              if v and timeline["t0"] + (i + 1) * timeline["step"] <= shift]
    after = [v for i, v in enumerate(timeline["stats"]["median"])
             if v and timeline["t0"] + i * timeline["step"] >= shift]
    assert sorted(after)[len(after) // 2] / sorted(before)[len(before) // 2] == \
        pytest.approx(2.0, rel=0.1)


def test_the_cycles_are_those_of_trends_and_the_rhythm_shows_them(report, fleet):
    kit, where = fleet
    rhythm = long_figures(report)[("rhythm", "cyclic", None)]
    code, text = run("trends", "--json", "--db", f"{where}/*.db", "--at", f"@{kit.end}",
                     "--target", "cyclic")
    assert code == 0, text
    found = {(f["op"], f["kind"]): f for f in json.loads(text)
             if f["kind"] in ("daily", "weekly")}
    for o in rhythm["ops"]:
        cycles = {c["kind"]: c for c in o["cycles"]}
        assert set(cycles) == {"daily", "weekly"}
        for kind, c in cycles.items():
            theirs = found[(o["op"], kind)]
            assert (c["peak"], c["trough"]) == (theirs["peak"], theirs["trough"])
            assert c["factor"] == pytest.approx(theirs["factor"], abs=1e-3)
        assert cycles["daily"]["factor"] == pytest.approx(1.6, rel=0.1)
        assert cycles["weekly"]["factor"] == pytest.approx(1.4, rel=0.1)
        by_hour, by_weekday = o["by_hour"], o["by_weekday"]
        assert by_hour.index(max(by_hour)) in (1, 2, 3, 4)  # planted peak 02:30 UTC
        assert by_hour.index(min(by_hour)) in (13, 14, 15, 16)
        assert by_weekday.index(max(by_weekday)) == 6  # Sundays 1.4x
        assert max(by_weekday) / sorted(by_weekday)[3] == pytest.approx(1.4, rel=0.1)
    steady = long_figures(report)[("rhythm", "steady", None)]
    assert all(o["cycles"] == [] for o in steady["ops"])


def test_the_caching_week_reads_below_one(report, fleet):
    kit, _ = fleet
    slowdown = long_figures(report)[("long_slowdown", "cached", None)]
    runs = {o["op"]: o["runs"] for o in slowdown["ops"]}
    assert runs["md-stat"] == []  # not cached
    (a, b), = runs["data-read"]
    first, days, _ = kit.targets[-1].effects.dip
    assert abs(a - (kit.start + first * DAY)) <= DAY / 4
    assert abs(b - (kit.start + (first + days) * DAY)) <= DAY / 4
    values = next(o["values"] for o in slowdown["ops"] if o["op"] == "data-read")
    inside = [v for i, v in enumerate(values)
              if a <= slowdown["t0"] + i * slowdown["step"] < b]
    outside = [v for i, v in enumerate(values) if v is not None
               and not a - DAY <= slowdown["t0"] + i * slowdown["step"] < b + DAY]
    assert max(inside) < 0.6 and all(0.8 < v < 1.25 for v in outside)
    for target in ("steady", "cyclic"):
        assert all(o["runs"] == [] for o in long_figures(report)[
            ("long_slowdown", target, None)]["ops"])


def test_one_box_per_host_and_per_statistic(report, fleet):
    kit, _ = fleet
    figures = long_figures(report)
    hosts = figures[("host_boxes", "steady", None)]
    assert sorted(o["op"] for o in hosts["ops"]) == sorted(OPS)
    for o in hosts["ops"]:
        assert [h["host"] for h in o["hosts"]] == kit.host_names()
        assert all(h["box"]["n"] == 60 * 6 for h in o["hosts"])
        assert all(h["box"]["q1"] <= h["box"]["median"] <= h["box"]["q3"] for h in o["hosts"])
    boxes = figures[("long_boxes", "steady", None)]
    for o in boxes["ops"]:
        b = o["boxes"]
        assert b["median"]["median"] < b["q95"]["median"] < b["q99"]["median"] < \
            b["max"]["median"]
        # Q99 and Q95 are more robust than the maximum: a narrower spread, relatively.
        spread = {s: (b[s]["q3"] - b[s]["q1"]) / b[s]["median"] for s in b}
        assert spread["q95"] < spread["max"] and spread["q99"] < spread["max"]


def test_the_long_figures_are_drawn_in_the_browser(report):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--no-first-run"])
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            logged: list = []
            page.on("console", lambda m: logged.append(m.text))
            page.on("pageerror", lambda e: logged.append(str(e)))
            page.goto(report.as_uri())
            page.wait_for_selector("body[data-long-rendered]", timeout=60_000)
            drawn = page.evaluate("""() => Array.from(document.querySelectorAll(
                'figure.long')).map(f => [f.dataset.kind, f.dataset.drawn,
                f.dataset.points || f.dataset.boxes, f.dataset.changes || null,
                f.dataset.runs || null])""")
            assert page.evaluate("document.body.dataset.figures") == str(
                page.locator("figure.chart").count())
        finally:
            browser.close()
    assert logged == []
    assert len(drawn) == 5 * (4 + len(OPS))
    assert all(d[1] == "1" and int(d[2]) > 0 for d in drawn)
    assert sum(int(d[3]) for d in drawn if d[0] == "long_timeline") == 2  # the two shifts
    assert sum(int(d[4]) for d in drawn if d[0] == "long_slowdown") == 1 + 1  # caching, 0.6x


def test_off_below_fourteen_days_and_as_asked(fleet, tmp_path):
    kit, where = fleet
    for since, flag, wanted in (("13d", None, False), ("14d", None, True),
                                ("60d", "--no-long", False), ("7d", "--long", True)):
        out = tmp_path / f"{since}-{flag}.html"
        code, text = run("report", "--db", f"{where}/*.db", "--at", f"@{kit.end}", "--since",
                         since, "--target", "shifted", "-o", out, *([flag] if flag else []))
        assert code == 0, text
        page = out.read_text()
        assert ('<figure class="long"' in page) == wanted, (since, flag)
        assert ("report_long" in page or "longRendered" in page) == wanted
    code, text = run("report", "--db", f"{where}/*.db", "--at", f"@{kit.end}", "--since",
                     "60d", "--long-step", "90s", "-o", tmp_path / "x.html")
    assert code != 0 and "--long-step" in text


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_pngs_of_the_long_figures(fleet, tmp_path):
    kit, where = fleet
    out = tmp_path / "png"
    code, text = run("report", "--db", f"{where}/*.db", "--at", f"@{kit.end}", "--since",
                     "60d", "--target", "shifted", "--op", "md-stat", "-o",
                     tmp_path / "r.html", "--png", out)
    assert code == 0, text
    names = {p.name for p in out.iterdir()}
    long = {"shifted-long-slowdown.png", "shifted-rhythm.png", "shifted-long-boxes.png",
            "shifted-host-boxes.png", "shifted-md-stat-long-timeline.png"}
    assert long <= names
    for name in long:
        width, height = _png_size((out / name).read_bytes())
        assert width == 800 and 250 <= height <= 900, (name, width, height)
