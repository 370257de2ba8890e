"""The report over a long range and hour records, its PNG images, its output files written
whole or not at all, and bad input."""

from __future__ import annotations

import html
import json
import re
import struct
import sys
from pathlib import Path

import numpy as np
import pytest

from slowdown.analysis.histogram import Histogram
from slowdown.analysis.store import Store
from slowdown.analysis.store.records import Record
from testdata.datakit import fill, lognormal
from tests.kit.faultfs.realfs import tmpfs
from tests.kit.fixtures_fs import require_root
from tests.kit.reportkit import (
    AT,
    NOV,
    epoch,
    history_rows,
    report_database,
    run,
)


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> Path:
    return report_database(tmp_path_factory)


# -- a long range, hour records, PNG images, bad input --------------------------------------------

def html_figures(path: Path) -> dict[str, dict]:
    """Each figure's JSON block, read from the file without a browser."""
    found = re.findall(r'<figure class="chart" id="([^"]+)".*?<script type="application/json">'
                       r"(.*?)</script></figure>", path.read_text(), flags=re.S)
    return {fig_id: json.loads(html.unescape(text)) for fig_id, text in found}


def report_figures(path: Path, out: Path, at: str, since: str, *args: str) -> dict[str, dict]:
    """The figures of ``slowdown report`` of database ``path`` written to ``out``."""
    code, text = run("report", "--db", path, "--at", at, "--since", since, *args, "-o", out)
    assert code == 0, text
    return html_figures(out)


def test_a_window_shorter_than_a_column_shows_each_columns_worst(db, tmp_path):
    d = report_figures(db, tmp_path / "long.html", "2026-11-02T02:00:00Z", "2d", "--target",
                       "work", "--op", "md-*")["timeline-work"]
    assert d["step"] == 120 and d["t0"] == NOV - 86400 + 7200
    (one,) = [s for s in d["series"] if s["window"] == 60 and s["statistic"] == "median"]
    assert one["reduced"] and one["step"] == 120
    per_minute: dict[int, float] = {}
    for r in history_rows(db, "1m", "median", at="2026-11-02T02:00:00Z", since="2d"):
        if r["op"].startswith("md-") and r["target"] == "work" and r["slowdown_median"]:
            t = epoch(r["time"])
            per_minute[t] = max(per_minute.get(t, 0.0), r["slowdown_median"])
    for i, v in enumerate(one["values"]):
        t = d["t0"] + i * 120
        pair = [per_minute[m] for m in (t, t + 60) if m in per_minute]
        assert (v is None) == (not pair)
        if pair:
            assert v == pytest.approx(max(pair), rel=1e-5)


def test_hour_records_make_hour_columns(tmp_path):
    path = tmp_path / "rolled.db"
    fill(path, NOV, 240, lognormal(0.001, 0.3), ops=("md-stat",))
    with Store(path) as store:
        assert store.rollup(NOV + 2 * 3600) == 120  # the first two hours become hour records
    figures = report_figures(path, tmp_path / "r.html", "2026-11-01T04:00:00Z", "4h")
    heat, pct = figures["heatmap-work-md-stat"], figures["percentiles-work-md-stat"]
    assert heat["step"] == pct["step"] == 3600 and heat["columns"] == 4
    assert heat["total"] == sum(pct["count"]) == 240 * 60
    assert pct["count"] == [3600] * 4
    d = figures["x_or_better-work-md-stat"]
    assert d["minutes"] == 120  # per-node figures come from minute records only


def test_each_heat_map_takes_the_scale_of_its_own_records(tmp_path):
    """A minute stored at a coarse scale (a hang beside fast answers) coarsens the heat map of
    its own op, not the others', and every op's counts stay whole."""
    path = tmp_path / "scales.db"
    fill(path, NOV, 30, lognormal(0.001, 0.3), ops=("md-stat", "md-read"))
    coarse = Histogram()
    coarse.record_many(np.random.default_rng(3).lognormal(np.log(0.001), 0.3, 60))
    coarse.downscale(2)
    with Store(path) as store:
        store.write([Record("n9", "work", "md-read", NOV + 10 * 60, coarse)])
    figures = report_figures(path, tmp_path / "r.html", "2026-11-01T00:30:00Z", "30m")
    stat, read = figures["heatmap-work-md-stat"], figures["heatmap-work-md-read"]
    assert (stat["scale"], read["scale"]) == (5, 2)
    assert stat["total"] == 30 * 60 and read["total"] == 31 * 60


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_png_images_of_the_same_figures(db, tmp_path):
    out, images = tmp_path / "r.html", tmp_path / "png"
    code, text = run("report", "--db", db, "--at", AT, "--since", "3h", "--target", "home",
                     "-o", out, "--png", images)
    assert code == 0, text
    names = sorted(p.name for p in images.iterdir())
    assert names == sorted(["home-timeline.png", *(f"home-{op}-{kind}.png"
                                                   for op in ("data-read", "md-stat")
                                                   for kind in ("percentiles", "heatmap",
                                                                "x-or-better"))])
    assert len(names) == len(html_figures(out)) == 7
    for name in names:
        width, height = png_size((images / name).read_bytes())
        assert width >= 700 and height >= 300, name
    assert "7 PNG images" in text


def test_png_without_matplotlib_is_refused_before_anything_is_written(db, tmp_path,
                                                                      monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    out = tmp_path / "r.html"
    code, text = run("report", "--db", db, "--at", AT, "--since", "3h", "-o", out,
                     "--png", tmp_path / "png")
    assert code == 2
    assert "--png" in text and "pip install 'slowdown[png]'" in text
    assert not out.exists() and not (tmp_path / "png").exists()


@pytest.mark.parametrize(("args", "flag"), [
    (("--since", "yesterday-ish"), "--since"),
    (("--since", "1h", "--until", "2h"), "--since"),
    (("--window", "90s"), "--window"),
    (("--stat", "q200"), "--stat"),
    (("--provision", "lots"), "--provision"),
])
def test_bad_options_name_the_flag_and_leave_the_output_alone(db, tmp_path, args, flag):
    out = tmp_path / "r.html"
    out.write_text("an earlier report\n")
    code, text = run("report", "--db", db, "--at", AT, "-o", out, *args)
    assert code == 2, text
    (error,) = [line for line in text.splitlines() if line.startswith("Error:")]
    assert flag in error
    assert out.read_text() == "an earlier report\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.html"]


@pytest.mark.parametrize("where", ["missing/r.html", "file/r.html", "."])
def test_an_unwritable_output_is_named(db, tmp_path, where):
    (tmp_path / "file").write_text("x")
    before = sorted(p.name for p in tmp_path.iterdir())
    code, text = run("report", "--db", db, "--at", AT, "--since", "1h", "-o",
                     tmp_path / where)
    assert code != 0
    (error,) = [line for line in text.splitlines() if line.startswith("Error:")]
    assert "-o/--output" in error
    assert sorted(p.name for p in tmp_path.iterdir()) == before


@pytest.mark.root
def test_a_failed_write_leaves_no_partial_file(db, tmp_path):
    require_root("a full filesystem (tmpfs)")
    out = tmp_path / "r.html"
    out.write_text("an earlier report\n")
    # The PNGs go to a tmpfs of 64 KiB with 4 KiB left: the first one meets a full disk.
    with tmpfs(tmp_path / "small", 64 << 10) as small:
        (small / "filler").write_bytes(b"\0" * (60 << 10))
        png = small / "png"
        png.mkdir()
        code, text = run("report", "--db", db, "--at", AT, "--since", "1h", "--target", "home",
                         "--op", "md-stat", "-o", out, "--png", png)
        assert code == 1 and "--png: cannot write" in text and "No space left" in text
        assert out.read_text() == "an earlier report\n"
        assert sorted(p.name for p in tmp_path.iterdir()) == ["r.html", "small"]
        assert list(png.iterdir()) == []
        assert sorted(p.name for p in small.path.iterdir()) == ["filler", "png"]
