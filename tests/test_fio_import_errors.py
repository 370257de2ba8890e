"""`slowdown import-fio` on bad input: broken and truncated histogram logs, mixed layouts and
kinds, unknown and unreadable files, option mistakes; each named with its file and line."""

from __future__ import annotations

import pytest

from slowdown.analysis.fio import FioLogError
from slowdown.analysis.fio.histlog import HistLog
from slowdown.analysis.fio.intervals import IntervalSeries
from slowdown.analysis.fio.merge import merge
from slowdown.analysis.fio.sources import open_sources
from tests.kit.fiologs import run, table, write_lat

# -- bad input ----------------------------------------------------------------------------------

def _hist_line(time: int, ddir: int = 0, bins: int = 1856, count: int = 1) -> str:
    return f"{time}, {ddir}, 4096, " + ", ".join([str(count)] + ["0"] * (bins - 1))


@pytest.mark.parametrize("name, text, where, what", [
    ("short line", [_hist_line(100), _hist_line(200, bins=1000), _hist_line(300)],
     2, "expected 1859 comma-separated fields, found 1003"),
    ("not a number", [_hist_line(100), _hist_line(200).replace(", 1, ", ", x1, ", 1)],
     2, "field 4 (bin 0): expected a whole number, found 'x1'"),
    ("negative", [_hist_line(100), _hist_line(200).replace(", 1, ", ", -1, ", 1)],
     2, "field 4 (bin 0): expected a whole number, found '-1'"),
    ("empty field", [_hist_line(100), _hist_line(200).replace(", 1, ", ", , ", 1)],
     2, "field 4 (bin 0): expected a whole number, found an empty field"),
    ("direction", [_hist_line(100), _hist_line(200, ddir=3)],
     2, "field 3 (direction): expected 0 (read), 1 (write) or 2 (trim), found 3"),
    # Jobs one after another in one file (fio's per_job_logs=0); beyond a block of the parser.
    ("backwards", [_hist_line(t) for t in range(100, 200_000, 100)] * 2,
     2000, "time 100 ms falls before"),
])
def test_bad_histogram_logs_name_file_and_line(tmp_path, name, text, where, what):
    path = tmp_path / "h_clat_hist.1.log"
    path.write_text("\n".join(text) + "\n")
    out = tmp_path / "out.csv"
    result = run("-i", 1000, "-o", out, path, code=2)
    assert f"{path}:{where}: {what}" in result.stderr, result.stderr
    assert not out.exists()


def test_a_truncated_last_line_is_named_and_left_out(tmp_path):
    """A real fio log cut short: test_fio_real.py; here the line numbers past a block."""
    path = tmp_path / "h_clat_hist.1.log"
    path.write_text("\n".join(_hist_line(t) for t in range(100, 200_001, 100)) + "\n"
                    + _hist_line(200_100)[:500])
    result = run("--noweight", "-i", 10**9, path)
    assert result.stderr == (f"import-fio: {path}:2001: the file ends in the middle of this "
                             "line (fio stopped while writing it?); this line is left out, "
                             "read up to line 2000\n")
    assert table(result.stdout)[0]["samples"] == "2000"


def test_a_last_line_without_newline_is_still_read(tmp_path):
    path = tmp_path / "h_clat_hist.1.log"
    path.write_text(_hist_line(100) + "\n" + _hist_line(200))
    assert table(run("--noweight", path).stdout)[0]["samples"] == "2"


def test_mixed_layouts_and_kinds_are_refused(tmp_path, fio_sample):
    us = tmp_path / "h_clat_hist.2.log"
    us.write_text(_hist_line(100, bins=1216) + "\n")
    result = run(fio_sample.hist[0], us, code=2)
    assert f"{us}:1: the 1216-bin layout (fio < 3.0, us), but {fio_sample.hist[0]} has the " \
           "1856-bin layout (fio >= 3.0, ns): mixed layouts do not merge" in result.stderr
    lat = write_lat(tmp_path / "l_lat.1.log", [(1, 2, 0)])
    result = run(fio_sample.hist[0], lat, code=2)
    assert f"{lat}:1: a latency log, but {fio_sample.hist[0]} is a histogram log" in result.stderr


def test_unknown_and_unreadable_files(tmp_path, fio_sample):
    odd = tmp_path / "x.log"
    odd.write_text("1, 2, 3, 4, 5, 6, 7, 8, 9, 10\n")
    assert f"{odd}:1: expected a fio histogram log" in run(odd, code=2).stderr
    assert "found 10 fields" in run(odd, code=2).stderr
    bw = write_lat(tmp_path / "x_bw.1.log", [(1, 2, 0)])
    assert f"{bw}:1: expected a latency log, found a bandwidth log" in run(bw, code=2).stderr
    missing = tmp_path / "none.log"
    assert f"{missing}: cannot read it" in run(missing, code=2).stderr
    assert "given twice" in run(fio_sample.hist[0], fio_sample.hist[0], code=2).stderr
    empty = tmp_path / "l_slat.1.log"
    empty.write_text("")
    assert "every file is empty" in run(empty, code=2).stderr
    result = run(empty, fio_sample.hist[0])
    assert f"{empty}: empty, skipped" in result.stderr and table(result.stdout)


def test_option_mistakes_are_usage_errors(tmp_path, fio_sample):
    assert "expected HOST=MS" in run("--host-offset", "n1", fio_sample.hist[0], code=2).stderr
    assert "letters of r, w, t and m" in run("--directions", "x", fio_sample.hist[0], code=2).stderr
    assert "percentiles like" in run("-p", "90,abc", fio_sample.hist[0], code=2).stderr
    assert "--into-db needs --db" in run("--into-db", "x", fio_sample.hist[0], code=2).stderr
    assert "go with --into-db" in run("--db", tmp_path / "x.db", fio_sample.hist[0], code=2).stderr
    lat = write_lat(tmp_path / "l_lat.1.log", [(1, 2, 0)])
    assert "applies to histogram logs" in run("--weighted", lat, code=2).stderr
    for mode in ("--weighted", "--noweight"):
        assert "leave out --weighted, --noweight" in run(
            "--into-db", "x", "--db", tmp_path / "x.db", mode, fio_sample.hist[0], code=2).stderr


def test_library_errors_carry_file_and_line(tmp_path):
    path = tmp_path / "h_clat_hist.1.log"
    path.write_text(_hist_line(100) + "\n" + _hist_line(200, ddir=7) + "\n")
    sources = open_sources([path])
    with pytest.raises(FioLogError) as caught:
        list(merge(sources, IntervalSeries(sources)))
    assert (caught.value.path, caught.value.line) == (str(path), 2)
    assert isinstance(sources[0].log, HistLog)
