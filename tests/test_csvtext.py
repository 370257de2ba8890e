"""CSV text built with numpy is byte for byte the text Python's own formatting writes."""

from __future__ import annotations

import csv
import datetime as dt
import io
import math

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from slowdown.analysis.cli import csvtext


def cells(column: csvtext.Column, n: int, block: int = csvtext.BLOCK) -> list[str]:
    """The column's cells, through ``text`` (one field per line)."""
    return b"".join(csvtext.text([column], n, block)).decode().split("\n")[:-1]


def python_g9(values) -> list[str]:
    return ["" if math.isnan(v) else format(v, ".9g") for v in values]


@settings(max_examples=300, deadline=None)
@given(hnp.arrays(np.float64, st.integers(0, 300), elements=st.floats(width=64)))
@example(np.array([2.0 ** -14]))  # a decimal tie, alone in its block: no usual row
def test_floats_are_written_as_format_g9(values):
    assert cells(csvtext.Floats(values), len(values)) == python_g9(values.tolist())


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(1e-7, 1e4), min_size=1, max_size=200))
def test_latencies_in_seconds_are_written_as_format_g9(values):
    assert cells(csvtext.Floats(np.array(values)), len(values)) == python_g9(values)


def edges() -> list[float]:
    """Numbers at every turn of the format: powers of ten and their neighbours, decimal
    ties of the 9th digit and their neighbours, the switch to exponents, zeros, extremes."""
    out = [0.0, -0.0, 5e-324, 2.2250738585072014e-308, 1.7976931348623157e308, math.inf,
           -math.inf, math.nan, 1e-300, 1e300, 1.0000000005, 0.12345678850000001]
    for k in range(-12, 12):
        p = 10.0 ** k
        out += [p, np.nextafter(p, 0), np.nextafter(p, math.inf), 9.999999995 * p,
                9.9999999949999 * p, 1.00000000500000 * p, 123456789.5 * p / 1e8,
                -p, 5 * p, 0.5 * p, 0.000123 * p]
    out += [2.0 ** k for k in range(-40, 40)]  # some are exact decimal ties: 2**-14
    out += [-(2.0 ** -14)]
    for d in (100000000, 123456788, 123456789, 999999998, 999999999, 500000000):
        for shift in (-20, -13, -10, -8, -5, 0, 3, 10):
            x = (d + 0.5) * 10.0 ** shift
            out += [x, np.nextafter(x, 0), np.nextafter(x, math.inf)]
    return out


def test_floats_at_the_turns_of_the_format():
    values = np.array(edges())
    assert cells(csvtext.Floats(values), len(values)) == python_g9(values.tolist())


def test_floats_of_a_history_many_blocks():
    rng = np.random.default_rng(7)
    values = np.exp(rng.normal(np.log(3e-3), 2.0, 50_000))
    values[::97] = np.nan
    values[::101] = 0.0
    got = cells(csvtext.Floats(values), len(values), block=4096)
    assert got == python_g9(values.tolist())


@settings(max_examples=200, deadline=None)
@given(hnp.arrays(np.int64, st.integers(0, 200)))
def test_integers_are_written_as_str(values):
    assert cells(csvtext.Integers(values), len(values)) == [str(v) for v in values.tolist()]


def test_small_and_large_integers_in_one_column():
    values = np.array([0, 7, 60, 999, 1000, 3600, -1, 2**63 - 1, -(2**63)], np.int64)
    assert cells(csvtext.Integers(values), len(values)) == [str(v) for v in values.tolist()]


def iso(t: int) -> str:
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 253402300799), min_size=1, max_size=200))
def test_times_are_written_as_iso_utc(seconds):
    values = np.array(seconds, np.int64)
    assert cells(csvtext.Times(values), len(values)) == [iso(t) for t in seconds]


def test_times_of_whole_minutes_use_one_text_per_minute():
    # Steps of twelve series over a leap day and a year's end, in blocks.
    minutes = 1_709_164_800 + 60 * np.arange(3 * 1440)  # 2024-02-29 and two more days
    values = np.tile(minutes, 12)
    column = csvtext.Times(values)
    assert column._table is not None and len(column._table) == 3 * 1440
    assert cells(column, len(values), block=5000) == [iso(t) for t in values.tolist()]
    new_year = 1_767_225_600 - 120 + 60 * np.arange(5)
    assert cells(csvtext.Times(new_year), 5) == [iso(t) for t in new_year.tolist()]


def test_names_are_quoted_as_the_csv_module_quotes_them():
    names = ["scratch", "a,b", 'say "x"', "line\nbreak", "été", ""]
    codes = np.array([0, 1, 2, 3, 4, 5, 1, 0])
    text = b"".join(csvtext.text([csvtext.Names(names, codes)], len(codes))).decode()
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows([[names[c]] for c in codes])
    assert text == buffer.getvalue()


def test_a_name_with_a_nul_is_refused():
    with pytest.raises(ValueError, match="NUL"):
        csvtext.text([csvtext.Names(["a\0b"], np.array([0]))], 1)


def test_lines_join_fields_as_csv_writer_does():
    rng = np.random.default_rng(3)
    n = 1000
    t = 1_767_225_600 + 60 * np.arange(n)
    counts = rng.integers(0, 5000, n)
    values = rng.lognormal(-6, 1, n)
    values[::7] = np.nan
    columns = [csvtext.Times(t), csvtext.Names(["work", "home"], np.arange(n) % 2),
               csvtext.Integers(counts), csvtext.Floats(values)]
    text = (csvtext.header(["time", "target", "count", "median"])
            + b"".join(csvtext.text(columns, n, block=333))).decode()
    expected = ["time,target,count,median"] + [
        f"{iso(a)},{('work', 'home')[i % 2]},{c},{'' if math.isnan(v) else format(v, '.9g')}"
        for i, (a, c, v) in enumerate(zip(t.tolist(), counts.tolist(), values.tolist()))]
    assert text == "\n".join(expected) + "\n"
