"""``slowdown import-fio`` against fio itself and against Debian's fiologparser_hist.py.

One real fio run (Debian's fio: four jobs, O_DIRECT on a loop-mounted ext4, histogram logs
every 100 ms, one job at ``--log_hist_coarseness=3``, and raw latency logs) feeds every test:

- fio's own binning (its json+ output) equals ours applied to the raw latencies;
- every percentile agrees with Debian's fiologparser_hist.py within one histogram bin, in its
  weighted and ``--noweight`` modes, per direction, at coarseness 0 and 3, for the session's
  sample (tests/kit/fiosample.py) too, and for the 1216-bin microsecond layout of fio before 3.0
  (written here from the raw latencies, as fio 2 would have binned them); with no options
  at all, the two tools give the same percentiles (their defaults agree);
- percentiles from the histogram logs agree with exact percentiles of the raw latency logs of
  the same run within the bin width, and so do those read back from the database.

Needs root (the loop mount), fio and pandas (fiologparser_hist.py imports it): see
tests/kit/fio_requirements.txt. The whole module takes about 20 seconds.
"""

from __future__ import annotations

import csv
import functools
import gzip
import io
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from slowdown.analysis.cli.import_fio import import_fio
from slowdown.analysis.fio.layout import Layout
from slowdown.analysis.store import Selection, Store
from tests.kit.cli_runner import runner
from tests.kit.faultfs.realfs import ext4_image
from tests.kit.fixtures_fs import require_root

FIOLOGPARSER = Path("/usr/share/doc/fio/fiologparser_hist.py.gz")
NS = Layout(29)
RUNTIME = 4  # seconds of fio



def ours(*args: object) -> str:
    result = runner().invoke(import_fio, [str(a) for a in args], catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    return result.stdout


def rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text), skipinitialspace=True))


@pytest.fixture(scope="module")
def fio(tmp_path_factory) -> SimpleNamespace:
    """One fio run: h_clat_hist.{1..4}.log (job 4 at coarseness 3), l_clat.{1..4}.log."""
    require_root("the fio run (a loop-mounted ext4 for O_DIRECT)")
    assert shutil.which("fio"), \
        "fio is missing: apt-get install fio (tests/kit/fio_requirements.txt)"
    base = tmp_path_factory.mktemp("fio")
    logs = base / "logs"
    logs.mkdir()
    with ext4_image(base, 64) as mount:
        done = subprocess.run(
            ["fio", f"--directory={mount}", "--size=8M", "--bs=4k", "--direct=1",
             "--ioengine=psync", "--time_based", f"--runtime={RUNTIME}",
             f"--write_hist_log={logs}/h", "--log_hist_msec=100",
             f"--write_lat_log={logs}/l", "--log_avg_msec=0",
             "--output-format=json+", f"--output={logs}/fio.json",
             "--name=rd", "--rw=randread", "--numjobs=2",
             "--name=wr", "--rw=randwrite",
             "--name=coarse", "--rw=randread", "--log_hist_coarseness=3"],
            capture_output=True, text=True, timeout=60 + RUNTIME)
    assert done.returncode == 0, done.stderr
    hist = [logs / f"h_clat_hist.{n}.log" for n in range(1, 5)]
    lat = [logs / f"l_clat.{n}.log" for n in range(1, 5)]
    assert all(p.stat().st_size for p in hist + lat)
    return SimpleNamespace(logs=logs, hist=hist, lat=lat,
                           json=json.loads((logs / "fio.json").read_text()))


@pytest.fixture(scope="module")
def fiologparser(tmp_path_factory) -> Path:
    """Debian's fiologparser_hist.py, which the fio package ships only gzipped."""
    assert FIOLOGPARSER.exists(), f"{FIOLOGPARSER} is missing: apt-get install fio"
    script = tmp_path_factory.mktemp("parser") / "fiologparser_hist.py"
    script.write_bytes(gzip.decompress(FIOLOGPARSER.read_bytes()))
    return script


@functools.cache  # several tests compare with the same run
def theirs(script: Path, *args: object) -> str:
    done = subprocess.run([sys.executable, str(script), *map(str, args)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def latencies(path: Path) -> np.ndarray:
    """(time ms, latency, direction) of a latency log."""
    return np.loadtxt(path, delimiter=",", dtype=np.int64, usecols=(0, 1, 2), ndmin=2)


def assert_within_a_bin(mine: str, reference: str, layout: Layout, weighted: bool) -> None:
    """Same rows; percentiles at most one bin apart, or less than one and a half of the
    wider bin's width apart (interpolated within a bin from representative values half a
    fine bin apart, two answers near a bin edge can straddle it: seen at 126.67 against
    127.84 us, and across the 1-us bin 127 at 126.887 against 128.274 us); the mean within
    half a fine bin of each value (fiologparser_hist.py's bin values lie half a fine bin
    above fio's)."""
    a, b = rows(mine), rows(reference)
    assert a and [r["end-time"] for r in a] == [r["end-time"] for r in b]
    assert [r.get("dir") for r in a] == [r.get("dir") for r in b]
    percentiles = [k for k in b[0] if k == "median" or k.endswith("%")]
    for x, y in zip(a, b):
        if not weighted:  # the weighted samples column counts differently, see fio/intervals.py
            assert x["samples"] == y["samples"]
        for name in percentiles:
            mine, theirs_ = float(x[name]), float(y[name])
            bins = layout.index(np.array([int(mine), int(theirs_)]))
            wider = max(layout.width[bins[0]], layout.width[bins[1]])
            assert abs(int(bins[0]) - int(bins[1])) <= 1 or abs(mine - theirs_) < 1.5 * wider, \
                (x["end-time"], name, x[name], y[name])
        assert abs(float(x["avg"]) - float(y["avg"])) <= float(y["avg"]) / 100 + 1
        low, high = float(x["min"]), float(x["max"])
        width_low = layout.width[layout.index(np.array([int(low)]))[0]]
        width_high = layout.width[layout.index(np.array([int(high)]))[0]]
        if weighted:  # there: the lower edge of the bin below, the upper edge of one above,
            # which at the top of a run can lie several (fine) bins above ours: bound it
            # relatively; the percentiles above are held to one bin.
            assert 0 <= low - float(y["min"]) <= 2 * width_low
            assert 0 <= float(y["max"]) - high <= max(3 * width_high, 0.05 * high)
        else:
            assert abs(low - float(y["min"])) <= width_low
            assert abs(high - float(y["max"])) <= width_high


# -- fio's bins ---------------------------------------------------------------------------------

def test_our_binning_is_fios(fio):
    """Each job's raw latencies, binned by our layout, give exactly fio's json+ bins."""
    for job, path in zip(fio.json["jobs"], fio.lat):
        raw = latencies(path)
        for number, ddir in enumerate(("read", "write")):
            values = raw[raw[:, 2] == number, 1]
            counts = np.bincount(NS.index(values), minlength=NS.bins)
            bins = {int(NS.values[i]): int(c) for i, c in enumerate(counts) if c}
            fio_bins = {int(k): v for k, v in job[ddir]["clat_ns"].get("bins", {}).items()}
            assert bins == fio_bins, (path, ddir)


# -- fiologparser_hist.py -----------------------------------------------------------------------

def test_noweight_agrees_with_fiologparser(fio, fiologparser):
    fine = fio.hist[:3]
    # fiologparser_hist.py --noweight counts a line in an interval up to 10 ms before its end;
    # so does ours.
    assert_within_a_bin(ours("--noweight", "-p", "90,95,99,99.9", *fine),
                        theirs(fiologparser, "--noweight", "--percentiles", "90:95:99:99.9",
                               *fine), NS, weighted=False)
    assert_within_a_bin(ours("--noweight", "--directions", "rwm", *fine),
                        theirs(fiologparser, "--noweight", "--directions", "rwm", *fine),
                        NS, weighted=False)


def test_no_options_give_fiologparsers_percentiles(fio, fiologparser, fio_sample):
    """The same command line, no options, on logs of real fio: the same percentiles (within
    one bin), both for the run here and for the session's sample (four jobs)."""
    for files in (fio.hist[:3], fio_sample.hist):
        assert_within_a_bin(ours(*files), theirs(fiologparser, *files), NS, weighted=True)
    assert_within_a_bin(ours(fio.hist[3]), theirs(fiologparser, fio.hist[3]), Layout(29, 3),
                        weighted=True)


def test_weighting_agrees_with_fiologparser(fio, fiologparser):
    fine = fio.hist[:3]
    assert_within_a_bin(ours("--weighted", "--directions", "mrw", *fine),
                        theirs(fiologparser, "--directions", "mrw", *fine), NS, weighted=True)
    assert_within_a_bin(ours("--weighted", "-i", 500, *fine),
                        theirs(fiologparser, "-i", 500, *fine), NS, weighted=True)


def test_coarse_logs_agree_with_fiologparser(fio, fiologparser):
    coarse = fio.hist[3]
    layout = Layout(29, 3)
    assert len(coarse.read_text().split("\n", 1)[0].split(",")) == 3 + layout.bins
    assert_within_a_bin(ours("--noweight", coarse),
                        theirs(fiologparser, "--noweight", coarse), layout, weighted=False)
    assert_within_a_bin(ours("--weighted", coarse), theirs(fiologparser, coarse), layout,
                        weighted=True)


def test_help_says_which_columns_are_fiologparsers_and_they_are(fio, fiologparser):
    """--help names the columns that differ from fiologparser_hist.py's; on a real run they
    do, as it says, and the others agree within 0.8% (half a fine bin: 1/128 of a value at
    most, and so for anything interpolated between two bin values)."""
    text = " ".join(ours("--help").split())
    assert "With --noweight, samples is the same and min, avg and max are within 0.8%." in text
    assert ("Weighted (the default), avg and the percentiles still are, but samples, min and "
            "max differ") in text
    fine = fio.hist[:3]
    close = ["avg", "median", "90%", "95%", "99%"]
    weighted = list(zip(rows(ours(*fine)), rows(theirs(fiologparser, *fine))))
    for x, y in weighted:
        assert float(x["samples"]) <= float(y["samples"])  # theirs: every line in full
        assert float(y["min"]) < float(x["min"]) and float(x["max"]) < float(y["max"])
        assert all(abs(float(x[k]) / float(y[k]) - 1) < 0.008 for k in close), (x, y)
    assert sum(float(y["samples"]) for _, y in weighted) > \
        1.3 * sum(float(x["samples"]) for x, _ in weighted)
    for x, y in zip(rows(ours("--noweight", *fine)),
                    rows(theirs(fiologparser, "--noweight", *fine))):
        assert x["samples"] == y["samples"]
        assert all(abs(float(x[k]) / float(y[k]) - 1) < 0.008 for k in ["min", *close, "max"])


def test_the_session_sample_agrees_with_fiologparser(fiologparser, fio_sample):
    fine, coarse = fio_sample.hist, fio_sample.coarse
    assert_within_a_bin(ours("--noweight", *fine), theirs(fiologparser, "--noweight", *fine),
                        NS, weighted=False)
    assert_within_a_bin(ours("--weighted", *fine), theirs(fiologparser, *fine), NS,
                        weighted=True)
    assert_within_a_bin(ours("--weighted", coarse), theirs(fiologparser, coarse),
                        Layout(29, 3), weighted=True)


def test_the_layout_before_fio_3_agrees_with_fiologparser(fio, fiologparser, tmp_path):
    """fio before 3.0 logged 1216 bins of microseconds: written here from the raw latencies of
    the run, every 100 ms per direction, as fio's histogram logging does."""
    us = Layout(19)
    paths = []
    for n, path in enumerate(fio.lat[:3], start=1):
        raw = latencies(path)
        out = tmp_path / f"h_clat_hist.{n}.log"
        with open(out, "w") as f:
            window = raw[:, 0] // 100
            for w in np.unique(window):
                for ddir in (0, 1):
                    part = raw[(window == w) & (raw[:, 2] == ddir), 1] // 1000
                    if part.size:
                        counts = np.bincount(us.index(part), minlength=us.bins)
                        f.write(f"{(w + 1) * 100}, {ddir}, 4096, "
                                + ", ".join(map(str, counts.tolist())) + "\n")
        paths.append(out)
    assert_within_a_bin(ours("--noweight", *paths),
                        theirs(fiologparser, "--noweight", "--group_nr", 19, *paths), us,
                        weighted=False)
    assert_within_a_bin(ours("--weighted", *paths),
                        theirs(fiologparser, "--group_nr", 19, "--usbin", *paths), us,
                        weighted=True)


# -- exact percentiles from the raw latency logs ------------------------------------------------

def _same_samples(fio, jobs) -> tuple[np.ndarray, int]:
    """The raw latencies the histogram logs of ``jobs`` hold: each job's samples up to the
    time of its last histogram line; and how many the two may differ by (samples completed in
    that last millisecond after fio took the histogram)."""
    values, slack = [], 0
    for job in jobs:
        hist = np.loadtxt(fio.hist[job], delimiter=",", dtype=np.int64, ndmin=2)
        raw = latencies(fio.lat[job])
        last = int(hist[:, 0].max())
        values.append(raw[raw[:, 0] <= last, 1])
        in_hist = int(hist[:, 3:].sum())
        slack += abs(in_hist - values[-1].size) + int(np.count_nonzero(raw[:, 0] == last))
    return np.sort(np.concatenate(values)), slack


@pytest.mark.parametrize("jobs, layout", [((0, 1, 2), NS), ((3,), Layout(29, 3))])
def test_histogram_percentiles_match_exact_ones(fio, jobs, layout):
    exact, slack = _same_samples(fio, jobs)
    n = exact.size
    assert n > 1000
    percents = [50, 90, 95, 99, 99.9]
    hist = [fio.hist[j] for j in jobs]
    for method in ("rank", "interp"):
        row = rows(ours("--noweight", "--method", method, "-i", 10**9, "-p", "90,95,99,99.9",
                        *hist))[0]
        assert abs(int(row["samples"]) - n) <= slack
        for p, name in zip(percents, ["median", "90%", "95%", "99%", "99.9%"]):
            rank = max(1, math.ceil(round(p / 100 * n, 9)))
            low = exact[max(rank - 1 - slack, 0)]
            high = exact[min(rank - 1 + slack, n - 1)]
            value = float(row[name])
            width = layout.width[layout.index(np.array([low, high]))].max()
            assert low - width <= value <= high + width, (method, p, value, low, high, width)


def test_latency_logs_give_the_exact_percentiles(fio):
    raw = np.concatenate([latencies(p) for p in fio.lat])
    got = rows(ours("-i", 10**9, "-p", "99.9", *fio.lat))[0]
    values = np.sort(raw[:, 1])
    n = values.size
    assert int(got["samples"]) == n
    assert float(got["median"]) == values[math.ceil(n / 2) - 1]
    assert float(got["99.9%"]) == values[math.ceil(round(0.999 * n, 9)) - 1]
    assert (int(got["min"]), int(got["max"])) == (values[0], values[-1])


def test_database_quantiles_match_exact_ones(fio, tmp_path):
    db = tmp_path / "fio.db"
    for name, files in (("hist", fio.hist[:3]), ("lat", fio.lat[:3])):
        result = runner().invoke(import_fio, ["--into-db", name, "--db", str(db), "--start",
                                               "2026-11-21T12:00:00Z", *map(str, files)])
        assert result.exit_code == 0, result.stderr
    exact, slack = _same_samples(fio, (0, 1, 2))
    every = np.sort(np.concatenate([latencies(p)[:, 1] for p in fio.lat[:3]]))
    with Store(db, readonly=True) as store:
        hist = store.aggregate(Selection(targets=("hist",))).histogram
        lat = store.aggregate(Selection(targets=("lat",))).histogram
    assert lat.count == every.size and lat.min == every[0] * 1e-9
    for q in (0.5, 0.9, 0.99, 0.999):
        rank = max(1, math.ceil(round(q * exact.size, 9)))
        low = exact[max(rank - 1 - slack, 0)] * 1e-9
        high = exact[min(rank - 1 + slack, exact.size - 1)] * 1e-9
        # Half a fio bin (1/128) and our bucket's 1.1 %.
        assert low * (1 - 0.019) <= hist.quantile(q) <= high * (1 + 0.019), q
        value = every[max(1, math.ceil(round(q * every.size, 9))) - 1] * 1e-9
        assert lat.quantile(q) == pytest.approx(value, rel=0.0109), q


# -- logs cut short, logs of different bin counts -----------------------------------------------

def ours_result(*args: object, code: int = 0):
    result = runner().invoke(import_fio, [str(a) for a in args], catch_exceptions=False)
    assert result.exit_code == code, (result.stdout, result.stderr)
    return result


def _lines(path: Path) -> list[bytes]:
    """The lines of a log as fio wrote them, each with its newline."""
    data = path.read_bytes()
    assert data.endswith(b"\n")
    return data.splitlines(keepends=True)


def _cut_last(path: Path, out: Path) -> tuple[Path, int]:
    """A copy of a log that ends in the middle of its last line, as a run killed while fio
    wrote it leaves it; and the number of that line."""
    lines = _lines(path)
    out.write_bytes(b"".join(lines[:-1]) + lines[-1][:len(lines[-1]) // 2])
    return out, len(lines)


@pytest.mark.parametrize("kind", ["hist", "lat"])
def test_a_log_cut_in_its_last_line_is_read_up_to_that_line(fio, tmp_path, kind):
    source = getattr(fio, kind)[0]
    cut, last = _cut_last(source, tmp_path / source.name)
    whole = tmp_path / "whole" / source.name
    whole.parent.mkdir()
    whole.write_bytes(b"".join(_lines(source)[:-1]))
    result = ours_result(cut)
    assert result.stderr == (f"import-fio: {cut}:{last}: the file ends in the middle of this "
                             "line (fio stopped while writing it?); this line is left out, "
                             f"read up to line {last - 1}\n")
    assert result.stdout == ours(whole)
    db = tmp_path / "cut.db"
    result = ours_result("--into-db", "cut", "--db", db, "--start", "@1795000000", cut)
    assert f"{cut}:{last}: the file ends in the middle of this line" in result.stderr
    with Store(db, readonly=True) as store:
        count = store.aggregate(Selection(targets=("cut",))).histogram.count
    kept = np.loadtxt(whole, delimiter=",", dtype=np.int64, ndmin=2)
    assert count == (kept[:, 3:].sum() if kind == "hist" else len(kept))


@pytest.mark.parametrize("kind", ["hist", "lat"])
def test_a_log_cut_before_its_last_line_is_refused(fio, tmp_path, kind):
    source = getattr(fio, kind)[0]
    lines = _lines(source)
    at = len(lines) // 2
    torn = tmp_path / source.name
    short = lines[at][:len(lines[at]) // 2] + b"\n"
    torn.write_bytes(b"".join([*lines[:at], short, *lines[at + 1:]]))
    out = tmp_path / "out.csv"
    result = ours_result("-o", out, torn, code=2)
    assert f"Error: {torn}:{at + 1}: expected " in result.stderr
    assert "comma-separated fields" in result.stderr and not out.exists()


def test_a_log_cut_in_its_first_line_is_skipped(fio, tmp_path):
    """fio writes its logs through a stdio buffer: a run killed after the first 4 KiB of a
    histogram log left less than one line of it."""
    head = _lines(fio.hist[0])[0][:4096]
    assert len(head) == 4096 and b"\n" not in head
    cut = tmp_path / fio.hist[0].name
    cut.write_bytes(head)
    result = ours_result(cut, fio.hist[1])
    assert result.stderr == (f"import-fio: {cut}:1: the file ends in the middle of this line "
                             "(fio stopped while writing it?); it holds no whole line, "
                             "skipped\n")
    assert result.stdout == ours(fio.hist[1])
    alone = ours_result(cut, code=2).stderr
    assert alone.startswith(f"import-fio: {cut}:1: the file ends in the middle of this line")
    assert "no samples: every file is empty or holds no whole line" in alone
    junk = tmp_path / "junk.log"
    junk.write_bytes(b"100, 0, 4096, 0, 0, 0, 0, not fio's")  # no newline, but not fio's
    assert f"{junk}:1: expected a fio histogram log" in ours_result(junk, fio.hist[1],
                                                                    code=2).stderr


def test_logs_of_different_bin_counts_say_they_merge_at_the_coarsest(fio):
    fine, coarse = fio.hist[:3], fio.hist[3]
    result = ours_result(*fine, coarse)
    assert result.stderr == (
        "import-fio: logs of different bin counts merge at the coarsest, 232 bins "
        f"(--log_hist_coarseness=3, as {coarse}): {fine[0]}, {fine[1]}, {fine[2]} (1856 bins, "
        "--log_hist_coarseness=0; 8 of their bins in one) are read at that resolution\n")
    assert ours_result(*fine).stderr == ""
    assert ours_result(coarse).stderr == ""
