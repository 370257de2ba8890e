"""The report's server x time heat map on real SQLite files written through the store: its
cells are what the reading side and the rule compute for each server and step, the slow
server's row is marked, few-probe cells are marked, a database without per-server records
gets one line (and nothing else changes), and a fleet's hosts add up per cell."""

from __future__ import annotations

import html
import json
import re

import pytest

from slowdown.analysis.cli.main import main
from slowdown.analysis.report import servermap, serverpage
from slowdown.analysis.stats import server_rule
from slowdown.analysis.store import Selection, Store, server_reads
from slowdown.analysis.store.server_records import ServerRecord
from testdata import serverkit
from testdata.datakit import fill, lognormal, utc
from tests.kit.cli_runner import runner

T0 = utc(2026, 11, 1)
TENS = 12
END = T0 + TENS * 600
AT = "2026-11-01T02:00:00Z"
SLOW = "h3:/bricks/b3"
SLOW_TENS = range(4, TENS)  # 10x slower for the last 80 minutes of the two hours


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """Two nodes over eight bricks, 100 probes per node and ten: about 12 per brick and ten
    on one node (many cells few), 25 on both."""
    directory = tmp_path_factory.mktemp("fleet") / "nodes"
    serverkit.write_fleet(directory, 2, 8, T0, TENS, per_node_ten=100, slow={SLOW: 10.0},
                          slow_tens=SLOW_TENS, seed=5)
    return directory


def run(*args: str) -> str:
    result = runner().invoke(main, [str(a) for a in args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.stdout


def report(tmp_path, db, *more: str) -> str:
    out = tmp_path / "r.html"
    run("report", "--db", db, "--at", AT, "--since", "2h", "-o", out, *more)
    return out.read_text()


def maps(text: str) -> dict[str, dict]:
    """Each server heat map's data by op."""
    found = re.findall(r'<figure class="servers"[^>]*data-op="([^"]+)".*?'
                       r'<script type="application/json">(.*?)</script></figure>', text, re.S)
    return {html.unescape(op): json.loads(data) for op, data in found}


def expected_median(db) -> float:
    """The op's expected median as ``slowdown servers --at END`` divides by."""
    rows = json.loads(run("servers", "--db", db, "--at", AT, "--since", "2h", "--json"))
    return rows[0]["per_op"]["data-read"]["expected"]


def test_cells_are_the_rule_s_medians_over_the_expected_value(fleet, tmp_path):
    db = fleet / "n1.db"
    m = maps(report(tmp_path, db))["data-read"]
    expected = expected_median(db)
    assert m["expected"] == pytest.approx(expected, rel=1e-5)
    assert m["step"] == 600 and m["columns"] == TENS and m["t0"] == T0
    assert m["servers"] == serverkit.server_names(8)
    with Store(db) as store:
        for row, column, probes, _errors, median, few in servermap.cells_of(m):
            start = m["t0"] + column * m["step"]
            read = server_reads.read([store], Selection(start=start, end=start + m["step"]))
            h = read.latencies[("work", "data-read", m["servers"][row])].histogram
            assert probes == h.count
            assert median == server_rule.quantile(h, 0.5)  # the same bucket
            assert few == (server_rule.median_interval(h) is None)
    slowdown = {(c[0], c[1]): c[4] / expected for c in servermap.cells_of(m)}
    slow_row = m["servers"].index(SLOW)
    assert all(slowdown[(slow_row, c)] > 4 for c in SLOW_TENS if (slow_row, c) in slowdown)
    assert all(slowdown[(slow_row, c)] < 2 for c in range(4) if (slow_row, c) in slowdown)


def test_the_slow_server_s_row_is_marked_as_the_rule_says(fleet, tmp_path):
    m = maps(report(tmp_path, fleet / "n1.db"))["data-read"]
    rows = json.loads(run("servers", "--db", fleet / "n1.db", "--at", AT, "--since", "2h",
                          "--json"))
    assert m["slow"] == [SLOW]
    assert dict(zip(m["servers"], m["words"])) == {r["server"]: r["word"] for r in rows}


def test_few_cells_are_marked_and_drawn_as_such(fleet, tmp_path):
    text = report(tmp_path, fleet / "n1.db")
    m = maps(text)["data-read"]
    cells = servermap.cells_of(m)
    few = [c for c in cells if c[5]]
    assert few and len(few) < len(cells) == m["cells"]
    assert all(c[2] < server_rule.MIN_PROBES for c in few)
    assert all(c[2] >= server_rule.MIN_PROBES for c in cells if not c[5])
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium",
                                    args=["--no-sandbox"])
        tab = browser.new_page()
        outside = []
        tab.on("request", lambda r: outside.append(r.url)
               if not r.url.startswith(("file:", "data:")) else None)
        errors = []
        tab.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
        tab.goto((tmp_path / "r.html").as_uri())
        tab.wait_for_selector("body[data-servers-rendered]")
        fig = tab.query_selector("figure.servers")
        drawn = {k: fig.get_attribute(f"data-{k}") for k in ("drawn", "cells", "few", "slow")}
        browser.close()
    assert not outside and not errors
    assert drawn == {"drawn": "1", "cells": str(len(cells)), "few": str(len(few)),
                     "slow": "1"}


def test_the_rule_s_few_is_fewer_than_min_probes():
    """A cell is few where the rule cannot bound its median: below MIN_PROBES, always."""
    from slowdown.analysis.histogram import Histogram

    for n in range(0, 3000):
        low, high = server_rule.median_ranks(n)
        assert (low < 1 or high > n) == (n < server_rule.MIN_PROBES), n
    h = Histogram()
    h.record_many([0.001] * (server_rule.MIN_PROBES - 1))
    assert server_rule.median_interval(h) is None


def test_two_hosts_merge_cell_by_cell(fleet, tmp_path):
    one, two = (maps(report(tmp_path, fleet / f"n{i}.db"))["data-read"] for i in (1, 2))
    both = maps(report(tmp_path, fleet / "*.db"))["data-read"]

    def probes(m):
        return {(m["servers"][c[0]], c[1]): c[2] for c in servermap.cells_of(m)}

    a, b, merged = probes(one), probes(two), probes(both)
    assert set(merged) == set(a) | set(b)
    assert all(merged[k] == a.get(k, 0) + b.get(k, 0) for k in merged)
    assert sum(c[5] for c in servermap.cells_of(both)) < sum(c[5] for c in servermap.cells_of(one))
    assert both["slow"] == [SLOW]


def test_a_coarser_step_merges_whole_tens(fleet):
    with Store(fleet / "n1.db") as store:
        from slowdown.analysis.stats.baseline import BaselineBook

        book = BaselineBook([store])
        found = servermap.collect([store], Selection(start=T0, end=END), T0, END, 900, book,
                                  {"work": ["data-read"]})["work"]
        m = found["maps"][0]
        assert found["step"] == m["step"] == 1200 and m["columns"] == TENS // 2
        for row, column, probes, *_ in servermap.cells_of(m):
            start = T0 + column * 1200
            tens = [server_reads.read([store], Selection(start=t, end=t + 600)).latencies.get(
                ("work", "data-read", m["servers"][row])) for t in (start, start + 600)]
            assert probes == sum(t.probes for t in tens if t is not None)
    assert [servermap.pick_step(s) for s in (60, 600, 900, 1800, 3600, 86400 * 3)] == \
        [600, 600, 1200, 1800, 3600, 86400 * 3]


def test_no_per_server_records_say_so_in_one_line_and_change_nothing_else(tmp_path,
                                                                       monkeypatch):
    db = tmp_path / "old.db"
    fill(db, T0, 120, lognormal(0.002, 0.3), targets=("work",), ops=("data-read", "md-stat"))
    text = report(tmp_path, db)
    assert not maps(text) and "serversRendered" not in text and "figure.servers" not in text
    lines = re.findall(r'<p class="note servers-none">(.*?)</p>', text)
    assert lines == [f"Servers: {html.escape(servermap.NONE_KEPT)}"]
    # Without that line, the page is the one made with no server section at all.
    monkeypatch.setattr(serverpage, "section", lambda t: "")
    before = report(tmp_path, db)
    assert text.replace(f'<p class="note servers-none">{lines[0]}</p>', "") == before


def test_only_unknown_servers_say_so(tmp_path):
    db = tmp_path / "local.db"
    fill(db, T0, 120, lognormal(0.002, 0.3), targets=("work",), ops=("data-read",))
    from slowdown.analysis.histogram import Histogram

    h = Histogram()
    h.record_many([0.002] * 30)
    with Store(db) as store:
        store.write([], servers=[ServerRecord("n1", "work", "data-read", "unknown", T0 + 600 * i,
                                              h) for i in range(TENS)])
    text = report(tmp_path, db)
    assert not maps(text)
    assert re.findall(r'<p class="note servers-none">(.*?)</p>', text) == [
        f"Servers: {html.escape(servermap.ONLY_UNKNOWN)}"]


def test_png_of_the_server_heat_map(fleet, tmp_path):
    report(tmp_path, fleet / "n1.db", "--png", tmp_path / "png")
    image = (tmp_path / "png" / "work-data-read-servers.png").read_bytes()
    assert image.startswith(b"\x89PNG")


def test_files_at_different_scales_merge_at_the_coarser(tmp_path):
    """A cell of two files whose histograms differ in scale: the report's arrays hold what
    ``server_reads`` (``Histogram.merge``: the coarser scale) gives."""
    from slowdown.analysis.histogram import Histogram

    paths = []
    for host, scale, values in (("n1", 5, [0.001, 0.002, 0.0021] * 10),
                                ("n2", 2, [0.004, 0.0041] * 5)):
        h = Histogram(scale)
        h.record_many(values)
        path = tmp_path / f"{host}.db"
        fill(path, T0, 20, lognormal(0.002, 0.3), host=host, targets=("work",),
             ops=("data-read",))
        with Store(path) as store:
            store.write([], servers=[ServerRecord(host, "work", "data-read", name, T0, h)
                                     for name in ("s1", "s2")])
        paths.append(path)
    m = maps(report(tmp_path, tmp_path / "*.db"))["data-read"]
    stores = [Store(p) for p in paths]
    try:
        read = server_reads.read(stores, Selection(start=T0, end=T0 + 600))
    finally:
        for s in stores:
            s.close()
    for row, column, probes, _e, median, few in servermap.cells_of(m):
        h = read.latencies[("work", "data-read", m["servers"][row])].histogram
        assert column == 0 and h.scale == 2 == m["scale"]
        assert probes == h.count == 40 and not few
        assert median == server_rule.quantile(h, 0.5)


def test_records_read_in_chunks_give_the_same_cells(fleet, tmp_path, monkeypatch):
    from slowdown.analysis.store import server_cells

    whole = maps(report(tmp_path, fleet / "*.db"))
    monkeypatch.setattr(server_cells, "CHUNK", 7)  # cells cut between chunks
    assert maps(report(tmp_path, fleet / "*.db")) == whole


def test_hosts_of_one_file_add_up_per_cell(tmp_path):
    """A file holding two hosts' records (a merged copy): each cell holds both."""
    from slowdown.analysis.histogram import Histogram

    db = tmp_path / "both.db"
    fill(db, T0, 20, lognormal(0.002, 0.3), targets=("work",), ops=("data-read",))
    with Store(db) as store:
        for host, n in (("n1", 10), ("n2", 7)):
            h = Histogram()
            h.record_many([0.002] * n)
            store.write([], servers=[ServerRecord(host, "work", "data-read", name, T0, h)
                                     for name in ("s1", "s2")])
    m = maps(report(tmp_path, db))["data-read"]
    assert [(m["servers"][c[0]], c[1], c[2], c[5]) for c in servermap.cells_of(m)] == [
        ("s1", 0, 17, False), ("s2", 0, 17, False)]


def test_a_file_of_the_schema_before_per_server_records_says_so(tmp_path):
    from testdata import migrationdata

    db = tmp_path / "old.db"
    migrationdata.build_at(db, 8)  # the release before per-server records
    out = tmp_path / "old.html"
    run("report", "--db", db, "--at", "2026-01-01T12:00:00Z", "--since", "2h", "-o", out)
    text = out.read_text()
    assert text.count('<section class="target"') >= 1
    assert not maps(text) and re.findall(r'<p class="note servers-none">(.*?)</p>', text) == [
        f"Servers: {html.escape(servermap.NONE_KEPT)}"] * text.count('<section class="target"')


def test_a_fleet_read_in_several_processes_adds_up_as_slowdown_servers(tmp_path):
    """32 files: split between processes where there are two CPUs or more (``forking``),
    merged per cell; each row's probes add up to what ``slowdown servers`` counts."""
    serverkit.write_fleet(tmp_path / "many", 32, 3, T0, 3, per_node_ten=30, seed=2)
    db = tmp_path / "many" / "*.db"
    out = tmp_path / "many.html"
    run("report", "--db", db, "--at", "2026-11-01T00:30:00Z", "--since", "30m", "-o", out)
    m = maps(out.read_text())["data-read"]
    rows = json.loads(run("servers", "--db", db, "--at", "2026-11-01T00:30:00Z", "--since",
                          "30m", "--json"))
    assert {m["servers"][r]: sum(counts) for r, counts in enumerate(m["probes"])} == {
        r["server"]: r["probes"] for r in rows}
    assert dict(zip(m["servers"], m["words"])) == {r["server"]: r["word"] for r in rows}
