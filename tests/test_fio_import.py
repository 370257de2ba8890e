"""``slowdown import-fio``: fio's bin layouts, the log parser, merging, outputs and bad input.

Fast: reads a fio sample made once per session with Debian's fio (tests/kit/fiosample.py: four
jobs' histogram logs, one at coarseness 3, and fio's json+ output of the run) in place, and
small logs written here in fio's exact format. The comparison with fio itself and with
Debian's fiologparser_hist.py on freshly run fio lives in test_fio_real.py.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from slowdown.analysis.fio import blockparse
from slowdown.analysis.fio.blockparse import parse_block
from slowdown.analysis.fio.intervals import IntervalSeries
from slowdown.analysis.fio.latlog import LatLog
from slowdown.analysis.fio.layout import Layout, fine_index
from slowdown.analysis.fio.merge import merge
from slowdown.analysis.fio.percentiles import bin_stats, exact_stats
from slowdown.analysis.fio.sources import host_of, open_sources
from slowdown.analysis.fio.textblocks import RawBlock, TextBlocks
from slowdown.analysis.store import Selection, Store
from tests.kit.fiologs import NS, file_counts, run, table, write_hist, write_lat

# -- fio's bins ---------------------------------------------------------------------------------

def test_bin_values_are_fios_own(fio_sample):
    """fio's json+ output names each bin by plat_idx_to_val: ours agree for every bin seen."""
    doc = json.loads(fio_sample.jsonplus.read_text())
    keys = {int(k) for job in doc["jobs"] for ddir in ("read", "write")
            for k in job[ddir]["clat_ns"].get("bins", {})}
    assert len(keys) > 100
    values = np.array(sorted(keys))
    index = NS.index(values)
    assert (NS.values[index] == values).all()
    assert ((NS.lower[index] <= values) & (values < NS.upper[index])).all()


def test_layouts_are_told_apart_by_their_bin_count():
    for groups, unit in ((29, "ns"), (19, "us")):
        for coarseness in range(7):
            bins = (groups * 64) >> coarseness
            layout = Layout.from_bins(bins)
            assert (layout.groups, layout.coarseness, layout.unit) == (groups, coarseness, unit)
            assert layout.values.size == layout.bins == bins
    for bins in (0, 18, 1000, 1855, 1857, 3712):
        assert Layout.from_bins(bins) is None


def test_every_value_falls_in_its_bin():
    rng = np.random.default_rng(1)
    values = np.concatenate([np.arange(0, 5000), rng.integers(0, 2**34, 100_000)])
    for layout in (NS, Layout(19), Layout(29, 3), Layout(19, 6)):
        index = layout.index(values)
        inside = values < layout.max_value
        assert ((layout.lower[index] <= values) | ~inside).all()
        assert ((values < layout.upper[index]) | ~inside).all()
        assert (index[~inside] == layout.bins - 1).all()
        # From 128 on a bin is at most 1/64 of its values wide, 2**c times that when coarser.
        big = layout.lower >= 128
        assert (layout.width[big] / layout.lower[big] <= 2**layout.coarseness / 64).all()


def test_coarse_bins_are_unions_of_fine_ones():
    rng = np.random.default_rng(2)
    counts = rng.integers(0, 5, (3, NS.bins))
    coarse = NS.coarsen(counts, 3)
    layout = Layout(29, 3)
    assert coarse.shape == (3, layout.bins)
    assert (coarse.sum(axis=1) == counts.sum(axis=1)).all()
    assert (layout.lower == NS.lower[::8]).all()
    assert (layout.upper == NS.upper[7::8]).all()
    values = rng.integers(0, 2**30, 1000)
    assert (layout.index(values) == NS.index(values) >> 3).all()
    assert (fine_index(values, NS.fine_bins) == NS.index(values)).all()


# -- the parser ---------------------------------------------------------------------------------

def _slow(raw: RawBlock, columns: int, wanted):
    return blockparse._slow(raw.data, columns, wanted, str)


def _fast(raw: RawBlock, columns: int) -> np.ndarray | None:
    out = np.empty(raw.size * columns, dtype=np.int64)
    lines = blockparse._fast(raw, columns, None, out)
    return None if lines is None else out[:lines * columns].reshape(lines, columns)


def _blocks(path: Path, size: int) -> list[RawBlock]:
    text = TextBlocks(path, size)
    blocks = []
    while True:
        raw = text.read()
        if raw is None:
            return blocks
        blocks.append(RawBlock(bytes(raw.buffer), raw.start, raw.end, raw.index,
                               raw.unterminated))


def test_fast_parser_agrees_with_python_on_real_logs(fio_sample):
    for path in (fio_sample.hist[0], fio_sample.coarse):
        expected = file_counts(path)
        for size in (4096, 1 << 20):
            parts = []
            for raw in _blocks(path, size):
                fast = _fast(raw, expected.shape[1])
                assert fast is not None, "a real fio log takes the fast path"
                assert (fast == _slow(raw, expected.shape[1], None)[0]).all()
                parts.append(fast)
            assert (np.vstack(parts) == expected).all()


def _write_blocks(path: Path, lines: list[str]) -> list[RawBlock]:
    path.write_text("".join(line + "\n" for line in lines))
    return _blocks(path, 1 << 20)


def test_histogram_fields_of_every_length(tmp_path):
    """Mostly one digit, as in a histogram log, and some of 2 to 16 digits anywhere."""
    rng = np.random.default_rng(4)
    columns = 32
    digits = np.where(rng.random((300, columns)) < 0.8, 1, rng.integers(2, 17, (300, columns)))
    numbers = [[int(rng.integers(10 ** (d - 1) if d > 1 else 0, 10**d)) for d in row]
               for row in digits]
    lines = [", ".join(map(str, row)) for row in numbers]
    for raw in _write_blocks(tmp_path / "h.log", lines):
        assert _fast(raw, columns).tolist() == numbers


@pytest.mark.parametrize("bad", [
    "0, , 2", "0,  1, 2", "0 , 1, 2", "0,1, 2, 3", "0, 1\t, 2", "0, +1, 2", "0, -1, 2",
    "0, 1, 2, 3\n0, 1", "\n0, 1, 2", "0, 1, 2, ", "0, 12345678901234567, 2",
    "0, 0000000000000000000000001, 2", "0, 0x10, 2", "0, 1e3, 2", "0, 1, 2\r",
])
def test_fast_parser_takes_only_fios_exact_form(tmp_path, bad):
    """Anything else is left to the line-by-line parser, which reads it or names the line."""
    good = "100, 0, 4096"
    raw = _write_blocks(tmp_path / "h.log", [good, bad, good])[0]
    assert _fast(raw, 3) is None
    assert _fast(_write_blocks(tmp_path / "g.log", [good, good])[0], 3) is not None


def test_block_size_does_not_change_the_sums(fio_sample):
    sources = open_sources(fio_sample.hist)
    small, large = (
        [row for done in merge(sources, IntervalSeries(sources), memory=memory) for row in done]
        for memory in (1, 1 << 30))
    assert small == large and len(small) > 10


def test_numbers_of_every_length(tmp_path):
    """1 to 18 digits, fields of one line in different lengths, hexadecimal priorities."""
    rng = np.random.default_rng(3)
    n = 20_000
    digits = rng.integers(1, 19, (n, 2))
    numbers = [[int(rng.integers(10 ** (d - 1) if d > 1 else 0, 10**d)) for d in row]
               for row in digits]
    path = tmp_path / "l_clat.1.log"
    with open(path, "w") as f:
        for i, (a, b) in enumerate(numbers):
            f.write(f"{a}, {b}, {i % 3}, 4096, 0x{i % 65536:04x}\n")
    log = LatLog(path, 5)
    blocks = _blocks(path, 64 << 10)
    got = np.hstack([parse_block(raw, 5, (0, 1, 2), str)[0] for raw in blocks])
    assert got[0].tolist() == [a for a, _ in numbers]
    assert got[1].tolist() == [b for _, b in numbers]
    assert got[2].tolist() == [i % 3 for i in range(n)]
    block = log.parse(blocks[0])
    assert block.values[0] == numbers[0][1]


def test_blocks_split_only_at_line_ends(tmp_path):
    path = write_lat(tmp_path / "l_lat.1.log", [(t, 1000 + t, t % 2) for t in range(5000)])
    for size in (4096, 5000, 1 << 20):
        blocks = _blocks(path, size)
        assert all(raw.buffer[raw.end - 1] == 10 for raw in blocks)
        values = np.hstack([parse_block(raw, 5, (1,), str)[0] for raw in blocks])
        assert values[0].tolist() == [1000 + t for t in range(5000)]


def test_spacing_other_than_fios_is_read_too(tmp_path):
    path = tmp_path / "l_clat.1.log"
    path.write_text("1,200,0,4096,0\n2 ,  300, 1,4096, 0\n\n3, 400, 0, 4096, 0")
    result = run("-i", 10, path)
    rows = table(result.stdout)
    assert [r["samples"] for r in rows] == ["3"]
    assert rows[0]["min"] == "200" and rows[0]["max"] == "400"


# -- merging and percentiles --------------------------------------------------------------------

def test_end_mode_counts_every_sample_once(fio_sample):
    total = sum(int(file_counts(p)[:, 3:].sum()) for p in fio_sample.hist)
    rows = table(run("--noweight", *fio_sample.hist).stdout)
    assert sum(int(r["samples"]) for r in rows) == total
    ends = [int(r["end-time"]) for r in rows]
    assert ends == sorted(ends) and all(e % 1000 == 0 for e in ends)


def test_directions_split_the_mixed_rows(fio_sample):
    rows = table(run("--noweight", "--directions", "rwm", "-i", 2000, *fio_sample.hist).stdout)
    by = {}
    for r in rows:
        by.setdefault(r["end-time"], {})[r["dir"]] = int(r["samples"])
    for dirs in by.values():
        assert dirs["m"] == dirs.get("r", 0) + dirs.get("w", 0)
    assert [r["dir"] for r in rows[:3]] == ["m", "r", "w"]


def test_weighting_spreads_samples_over_intervals(fio_sample):
    total = sum(int(file_counts(p)[:, 3:].sum()) for p in fio_sample.hist)
    plain = table(run("--noweight", *fio_sample.hist).stdout)
    weighted = table(run("--weighted", *fio_sample.hist).stdout)
    shares = sum(float(r["samples"]) for r in weighted)
    # Only the shares before time 0 (the first lines reach back half an interval) are lost.
    assert 0.97 * total < shares <= total + len(weighted)
    assert len(weighted) >= len(plain)
    # Weighting moves shares of lines between neighbouring intervals, not the latencies: over
    # the run, an interval's median is that of the same interval unweighted within 10 % (the
    # middle ratio; one interval alone was off by 15 % where fio's latency moved between
    # intervals on a busy machine).
    by_end = {r["end-time"]: float(r["median"]) for r in plain}
    ratios = sorted(float(r["median"]) / by_end[r["end-time"]] for r in weighted
                    if r["end-time"] in by_end)
    assert len(ratios) >= len(plain) - 2, (len(ratios), len(plain))
    assert abs(ratios[len(ratios) // 2] - 1) < 0.1, ratios


def test_the_default_is_fiologparsers_default_and_noweight_its_noweight(tmp_path, fio_sample):
    """No options: weighted, as fiologparser_hist.py with no options. --noweight counts a line
    whole in the interval its time + 10 ms falls in, as fiologparser_hist.py --noweight:
    a line logged at 995 ms goes to the interval ending at 2000 ms; --offset-ms 0 puts it in
    the one its time falls in."""
    assert run(*fio_sample.hist).stdout == run("--weighted", *fio_sample.hist).stdout
    line = tmp_path / "h_clat_hist.1.log"
    write_hist(line, [(995, 0, {700: 3}), (1500, 0, {700: 1})])
    assert [(r["end-time"], r["samples"]) for r in table(run("--noweight", line).stdout)] == \
        [("2000", "4")]
    assert [(r["end-time"], r["samples"])
            for r in table(run("--noweight", "--offset-ms", 0, line).stdout)] == \
        [("1000", "3"), ("2000", "1")]
    # Latency logs have the time of every sample: no weighting, no shift, whatever the mode.
    lat = write_lat(tmp_path / "l_clat.1.log", [(995, 200, 0), (1500, 300, 0)])
    assert run(lat).stdout == run("--noweight", lat).stdout == \
        "end-time, samples, min, avg, median, 90%, 95%, 99%, max\n" \
        "1000, 1, 200, 200.000, 200.000, 200.000, 200.000, 200.000, 200\n" \
        "2000, 1, 300, 300.000, 300.000, 300.000, 300.000, 300.000, 300\n"


def test_rank_method_is_fios_own_percentile(fio_sample):
    """One interval over a whole job: fio's json+ percentiles of the same job, computed by fio
    from the same bins. The log lacks the samples of the last partial window (m of the job's
    N): its rank percentile then lies, by fio's own bins of the whole job (json+ ``bins``),
    between the values at ranks ceil(p n) and ceil(p n) + m, n = N - m; within a bin of those,
    or of fio's percentile where that window holds nothing that moves it."""
    doc = json.loads(fio_sample.jsonplus.read_text())
    for number, path in enumerate(fio_sample.hist, start=1):
        job = doc["jobs"][number - 1]
        ddir = "read" if job["jobname"] == "rd" else "write"
        fio = job[ddir]["clat_ns"]["percentile"]
        bins = sorted((int(v), c) for v, c in job[ddir]["clat_ns"]["bins"].items())
        values = np.array([v for v, _ in bins])
        ranks = np.cumsum([c for _, c in bins])  # the last rank of each bin's value
        n = int(file_counts(path)[:, 3:].sum())
        missing = int(ranks[-1]) - n
        assert 0 <= missing < 0.05 * ranks[-1], (path, missing)  # at most the last window
        row = table(run("--noweight", "--method", "rank", "-i", 10**9, "-p", "90,99",
                        path).stdout)[0]
        for ours, p in ((row["median"], "50.000000"), (row["90%"], "90.000000"),
                        (row["99%"], "99.000000")):
            rank = math.ceil(float(p) / 100 * n)
            low, high = values[np.searchsorted(ranks, [rank, rank + missing])]
            allowed = NS.index(np.array([fio[p], low, high]))
            got = NS.index(np.array([int(float(ours))]))[0]
            assert allowed.min() - 1 <= got <= allowed.max() + 1, (path, p, missing)


def test_a_coarse_log_merges_with_fine_ones(tmp_path, fio_sample):
    """Bins of a finer log are summed into the coarser layout: exactly the same result as
    merging a log that fio had coarsened itself."""
    fine = file_counts(fio_sample.hist[0])
    coarse_copy = tmp_path / "h_clat_hist.9.log"
    coarsened = np.hstack([fine[:, :3], NS.coarsen(fine[:, 3:], 3)])
    coarse_copy.write_text("".join(", ".join(map(str, row)) + "\n" for row in coarsened))
    mixed = run(fio_sample.hist[0], fio_sample.coarse).stdout
    same = run(coarse_copy, fio_sample.coarse).stdout
    assert mixed == same
    assert table(mixed)[0]["samples"]


def test_bin_stats_interp_is_fiologparsers_formula():
    """fiologparser_hist.py: cdf at each bin's value, ``100 * (cumsum - w / 2) / sum``, read off
    with numpy.interp, over all bins, empty ones included."""
    rng = np.random.default_rng(4)
    values = NS.values
    hists = np.zeros((40, NS.bins))
    for row in hists:
        bins = rng.integers(100, 900, int(rng.integers(1, 30)))
        row[bins] = rng.integers(1, 50, bins.size) * rng.random(bins.size)
    percents = [50, 90, 95, 99, 99.9, 0, 100]
    total, low, mean, got, high = bin_stats(hists, values, percents, "interp")
    for i, (row, expected) in enumerate(zip(hists, got)):
        cdf = 100 * (row.cumsum() - row / 2) / row.sum()
        assert np.allclose(np.interp(percents, cdf, values), expected, rtol=1e-12)
        filled = np.flatnonzero(row)
        assert (low[i], high[i]) == (values[filled[0]], values[filled[-1]])
        assert total[i] == pytest.approx(row.sum())
        assert mean[i] == pytest.approx((row * values).sum() / row.sum())
    ranks = bin_stats(hists.round() + (hists > 0), values, [50, 100], "rank")[3]
    assert (ranks[:, 1] == high).all()


def test_exact_stats_are_order_statistics():
    rng = np.random.default_rng(5)
    for n in (1, 2, 7, 100, 10_001):
        values = rng.integers(0, 10**9, n)
        ordered = np.sort(values)
        count, low, mean, pcts, high = exact_stats(values.copy(), [50, 90, 99, 99.9, 100])
        assert (count, low, high) == (n, ordered[0], ordered[-1])
        assert mean == pytest.approx(ordered.mean())
        for p, got in zip([50, 90, 99, 99.9, 100], pcts):
            assert got == ordered[max(1, math.ceil(round(p / 100 * n, 9))) - 1]


def test_latency_logs_give_exact_percentiles(tmp_path):
    rng = np.random.default_rng(6)
    rows = []
    for _ in range(3):
        times = np.sort(rng.integers(0, 5000, 3000))
        values = rng.lognormal(11, 0.5, 3000).astype(np.int64)
        rows.append(list(zip(times.tolist(), values.tolist(), (times % 2).tolist())))
    paths = [write_lat(tmp_path / f"l_clat.{i}.log", r, extra=extra)
             for i, (r, extra) in enumerate(zip(rows, (", 4096", ", 4096, 0", ", 4096, 0, 12")))]
    got = table(run("-p", "90,99.9", "--directions", "mr", *paths).stdout)
    every = [(t, v, d) for r in rows for t, v, d in r]
    for row in got:
        end = int(row["end-time"])
        values = np.sort([v for t, v, d in every if end - 1000 <= t < end
                          and (row["dir"] == "m" or d == 0)])
        n = values.size
        assert int(row["samples"]) == n
        assert float(row["median"]) == values[math.ceil(n / 2) - 1]
        assert float(row["99.9%"]) == values[math.ceil(round(0.999 * n, 9)) - 1]
        assert float(row["avg"]) == pytest.approx(values.mean(), abs=1e-3)
        assert (int(row["min"]), int(row["max"])) == (values[0], values[-1])


def test_units_and_json(tmp_path, fio_sample):
    csv_ns = table(run("-i", 5000, *fio_sample.hist).stdout)
    csv_us = table(run("-i", 5000, "--unit", "us", "--decimals", 6, *fio_sample.hist).stdout)
    doc = json.loads(run("-i", 5000, "--format", "json", "--unit", "s", *fio_sample.hist).stdout)
    assert doc["unit"] == "s" and doc["kind"] == "histogram" and doc["interval_ms"] == 5000
    for ns, us, row in zip(csv_ns, csv_us, doc["rows"]):
        assert float(us["median"]) == pytest.approx(float(ns["median"]) / 1000, abs=1e-6)
        assert row["median"] == pytest.approx(float(ns["median"]) * 1e-9, rel=1e-6)
        assert row["p99"] == pytest.approx(float(ns["99%"]) * 1e-9, rel=1e-6)
        assert row["end_ms"] == int(ns["end-time"]) and row["dir"] == "m"


def test_output_file_is_written_whole_and_never_replaced_unasked(tmp_path, fio_sample):
    out = tmp_path / "p.csv"
    run("-o", out, fio_sample.hist[0])
    first = out.read_text()
    assert first.startswith("end-time, samples, min, avg, median, 90%, 95%, 99%, max\n")
    result = run("-o", out, fio_sample.hist[1], code=2)
    assert "exists" in result.stderr and out.read_text() == first
    run("-o", out, "--force", fio_sample.hist[1])
    assert out.read_text() != first
    assert [p.name for p in tmp_path.iterdir()] == ["p.csv"]


def test_progress_bar_can_be_forced(fio_sample):
    result = run("--progress", fio_sample.hist[0])
    assert table(result.stdout)


# -- hosts and time offsets ---------------------------------------------------------------------

def test_host_offsets_shift_one_hosts_logs(tmp_path, fio_sample):
    for host in ("n1", "n2"):
        (tmp_path / host).mkdir()
        shutil.copy(fio_sample.hist[0], tmp_path / host / fio_sample.hist[0].name)
    logs = [tmp_path / "n1" / fio_sample.hist[0].name, tmp_path / "n2" / fio_sample.hist[0].name]
    alone = table(run("--noweight", "-i", 100, fio_sample.hist[0]).stdout)
    shifted = table(run("--noweight", "-i", 100, "--host-offset", "n2=5000", *logs).stdout)
    by_end = {int(r["end-time"]): int(r["samples"]) for r in shifted}
    first = {int(r["end-time"]): int(r["samples"]) for r in alone}
    for end, samples in first.items():
        assert by_end.get(end, 0) >= samples
    assert by_end[max(first) + 5000] == first[max(first)]
    assert sum(by_end.values()) == 2 * sum(first.values())
    result = run("--host-offset", "n3=10", *logs, code=2)
    assert "--host-offset n3: no file belongs to this host" in result.stderr


def test_hosts_of_fio_client_logs_and_directories():
    assert host_of(Path("h_clat_hist.1.log.node7.example.org"), []) == "node7.example.org"
    assert host_of(Path("run/n2/h_clat_hist.1.log"), ["n1", "n2"]) == "n2"
    assert host_of(Path("run/h_clat_hist.1.log"), ["n1"]) is None


# -- the database -------------------------------------------------------------------------------

def test_into_db_writes_minute_records_like_the_probes(tmp_path, fio_sample):
    db = tmp_path / "fio.db"
    start = "2026-11-21T15:56:25Z"
    result = run("--into-db", "fio-run", "--db", db, "--start", start, "--host", "n1",
                 *fio_sample.hist)
    assert "minute records of target fio-run (n1)" in result.stderr
    total = sum(int(file_counts(p)[:, 3:].sum()) for p in fio_sample.hist)
    with Store(db, readonly=True) as store:
        assert store.series() == [("n1", "fio-run", "read"), ("n1", "fio-run", "write")]
        records = list(store.records())
        assert {r.start for r in records} == {1795276560}
        assert sum(r.histogram.count for r in records) == total
        merged = store.aggregate(Selection(targets=("fio-run",))).histogram
    exact = table(run("--noweight", "--method", "rank", "-i", 10**9, "-p", "90,99",
                      *fio_sample.hist).stdout)[0]
    for q, name in ((0.5, "median"), (0.9, "90%"), (0.99, "99%")):
        assert merged.quantile(q) == pytest.approx(float(exact[name]) * 1e-9, rel=0.019)
    # A second import of the same minutes would count every sample twice: refused.
    again = run("--into-db", "fio-run", "--db", db, "--start", start, "--host", "n1",
                *fio_sample.hist, code=2)
    assert "already holds records" in again.stderr
    run("--into-db", "fio-run", "--db", db, "--start", start, "--host", "n1", "--merge",
        fio_sample.hist[0])
    with Store(db, readonly=True) as store:
        assert store.aggregate().histogram.count == \
            total + int(file_counts(fio_sample.hist[0])[:, 3:].sum())


def test_into_db_needs_the_start_of_relative_logs(tmp_path, fio_sample):
    result = run("--into-db", "x", "--db", tmp_path / "x.db", fio_sample.hist[0], code=2)
    assert "give --start" in result.stderr
    assert not (tmp_path / "x.db").exists()


def test_into_db_of_epoch_logs_and_latency_logs(tmp_path):
    epoch = 1795276585000
    lat = write_lat(tmp_path / "l_clat.1.log.nodeA",
                    [(epoch + t, 50_000 + t, t % 2) for t in range(0, 120_000, 7)])
    db = tmp_path / "l.db"
    run("--into-db", "lat", "--db", db, lat)
    with Store(db, readonly=True) as store:
        records = list(store.records())
        assert {r.host for r in records} == {"nodeA"}
        assert sorted({r.start for r in records}) == [1795276560, 1795276620, 1795276680]
        h = store.aggregate().histogram
        assert h.count == len(range(0, 120_000, 7))
        assert h.min == pytest.approx(50e-6) and h.max == pytest.approx((50_000 + 119_994) * 1e-9)
    result = run("--into-db", "lat", "--db", db, "--start", "@1", lat, code=2)
    assert "leave --start out" in result.stderr
