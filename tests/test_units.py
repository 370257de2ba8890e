"""Human forms of durations and sizes."""

from __future__ import annotations

import os
import re
import subprocess
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slowdown.analysis.units import (
    format_duration,
    format_size,
    parse_duration,
    parse_size,
    parse_time,
)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("500ms", 0.5),
        ("1s", 1.0),
        ("10m", 600.0),
        ("1h", 3600.0),
        ("30d", 2_592_000.0),
        ("2w", 1_209_600.0),
        ("1h30m", 5400.0),
        ("1h 30m", 5400.0),
        ("1d12h", 129_600.0),
        ("1.5s", 1.5),
        ("0.5h", 1800.0),
        ("250ms", 0.25),
        ("  7s ", 7.0),
        ("12", 12.0),
        ("0.25", 0.25),
        ("0", 0.0),
        (30, 30.0),
        (2.5, 2.5),
        # the usual spellings
        ("10min", 600.0),
        ("10mins", 600.0),
        ("10 minutes", 600.0),
        ("2h30m", 9000.0),
        ("2h30min", 9000.0),
        ("1h 30m", 5400.0),
        ("1 hour 30 minutes", 5400.0),
        ("90sec", 90.0),
        ("90 secs", 90.0),
        ("1.5h", 5400.0),
        ("2hrs", 7200.0),
        ("2days", 172_800.0),
        ("1 day 12 hours", 129_600.0),
        ("1w", 604_800.0),
        ("2 weeks", 1_209_600.0),
        ("1wk", 604_800.0),
        ("250msec", 0.25),
        ("1 second", 1.0),
        ("1m30s", 90.0),
    ],
)
def test_parse_duration(text, seconds):
    assert parse_duration(text) == seconds
    assert isinstance(parse_duration(text), float)


@pytest.mark.parametrize(
    "text", ["10x", "", "  ", "-1s", "-5", "s", "1m1h", "1m1m", "1 h x", "inf", "nan", "1e3s",
             "1M", "10mn", "1minx", "1hour5", "1h 30", "10 min min", "1min30mins", "1 hours,"]
)
def test_parse_duration_rejects(text):
    with pytest.raises(ValueError, match=r"expected a duration like 1s, 10m, 1h, 30d.*got"):
        parse_duration(text)


def test_parse_duration_message_names_the_input():
    with pytest.raises(ValueError) as info:
        parse_duration("10x")
    assert str(info.value) == "expected a duration like 1s, 10m, 1h, 30d; got '10x'"


@pytest.mark.parametrize("value", [-1, -0.5, float("inf"), float("nan"), True, None, [1]])
def test_parse_duration_rejects_numbers_and_other_types(value):
    with pytest.raises(ValueError, match="expected a duration"):
        parse_duration(value)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (0.25, "250ms"),
        (0.0005, "0.5ms"),
        (1, "1s"),
        (1.5, "1.5s"),
        (60, "1m"),
        (90, "1m30s"),
        (600, "10m"),
        (3600, "1h"),
        (5400, "1h30m"),
        (86400, "1d"),
        (90 * 86400, "90d"),
        (604800, "1w"),
        (14 * 86400, "2w"),
        (129_600.1, "1d12h0.1s"),
    ],
)
def test_format_duration(seconds, text):
    assert format_duration(seconds) == text


@pytest.mark.parametrize("value", [-1, float("inf"), float("nan"), "1s"])
def test_format_duration_rejects(value):
    with pytest.raises(ValueError):
        format_duration(value)


_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


@given(st.integers(0, 10**6), st.sampled_from(sorted(_UNITS)))
def test_whole_units_round_trip(count, unit):
    seconds = parse_duration(f"{count}{unit}")
    assert parse_duration(format_duration(seconds)) == seconds


@given(st.integers(0, 10**10))
def test_whole_seconds_round_trip(seconds):
    assert parse_duration(format_duration(seconds)) == seconds


@given(st.floats(0, 1e12, allow_nan=False, allow_infinity=False))
def test_any_duration_round_trips(seconds):
    assert parse_duration(format_duration(seconds)) == seconds


_SPELLINGS = {"w": ["w", "wk", "wks", "week", "weeks"], "d": ["d", "day", "days"],
              "h": ["h", "hr", "hrs", "hour", "hours"],
              "m": ["m", "min", "mins", "minute", "minutes"],
              "s": ["s", "sec", "secs", "second", "seconds"],
              "ms": ["ms", "msec", "msecs", "millisecond", "milliseconds"]}


@given(st.floats(0, 1e9, allow_nan=False, allow_infinity=False), st.data())
def test_a_formatted_duration_in_any_spelling_parses_back(seconds, data):
    """format_duration's parts, each unit spelled any usual way, spaced or not."""
    parts = re.findall(r"([\d.]+)(ms|w|d|h|m|s)", format_duration(seconds))
    spelled = "".join(
        number + data.draw(st.sampled_from(["", " "])) + data.draw(st.sampled_from(_SPELLINGS[u]))
        + data.draw(st.sampled_from(["", " "])) for number, u in parts)
    assert parse_duration(spelled) == seconds


@given(st.lists(st.integers(0, 1000), min_size=6, max_size=6), st.data())
def test_a_compound_in_any_spelling_is_the_sum_of_its_parts(counts, data):
    units = ["w", "d", "h", "m", "s", "ms"]
    chosen = [(c, u) for c, u in zip(counts, units) if data.draw(st.booleans())] or [(1, "s")]
    text = " ".join(f"{c}{data.draw(st.sampled_from(_SPELLINGS[u]))}" for c, u in chosen)
    expected = sum(c * _UNITS[u] for c, u in chosen)
    assert parse_duration(text) == pytest.approx(expected, rel=1e-12, abs=1e-12)


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("256GiB", 256 * 2**30),
        ("1MiB", 2**20),
        ("4096", 4096),
        ("4096B", 4096),
        ("10GB", 10 * 10**9),
        ("1.5GiB", 3 * 2**29),
        ("1kB", 1000),
        ("1KB", 1000),
        ("2 TiB", 2 * 2**40),
        ("1gib", 2**30),
        ("0", 0),
        (3901, 3901),
        (2.0**20, 2**20),
    ],
)
def test_parse_size(text, size):
    assert parse_size(text) == size
    assert isinstance(parse_size(text), int)


@pytest.mark.parametrize(
    "text", ["4K", "", "-1", "-1MiB", "1.3KiB", "0.5B", "ten", "1 MiB x", True, None, 1.5, -3]
)
def test_parse_size_rejects(text):
    with pytest.raises(ValueError, match=r"expected a size like 4096, 1MiB, 256GiB, 10GB.*got"):
        parse_size(text)


@pytest.mark.parametrize(
    ("size", "text"),
    [
        (0, "0B"),
        (1023, "1023B"),
        (1024, "1KiB"),
        (3901, "3.81KiB"),
        (2**20, "1MiB"),
        (3 * 2**29, "1.5GiB"),
        (256 * 2**30, "256GiB"),
        (5 * 2**40, "5TiB"),
    ],
)
def test_format_size(size, text):
    assert format_size(size) == text


@given(st.integers(0, 1023), st.sampled_from(["B", "KiB", "MiB", "GiB", "TiB"]))
def test_whole_binary_sizes_round_trip(count, unit):
    size = parse_size(f"{count}{unit}")
    assert parse_size(format_size(size)) == size


@pytest.mark.parametrize("value", [-1, 1.0, True])
def test_format_size_rejects(value):
    with pytest.raises(ValueError):
        format_size(value)


def _date_d(text: str, zone: str) -> float:
    """What GNU date makes of `text` in `zone`, in unix seconds."""
    done = subprocess.run(["date", "-d", text, "+%s.%N"], env={**os.environ, "TZ": zone},
                          capture_output=True, text=True, timeout=10, check=True)
    return float(done.stdout)


@pytest.mark.parametrize("zone", ["UTC", "Europe/Berlin", "America/New_York"])
def test_a_clock_time_alone_is_todays_as_date_reads_it(monkeypatch, zone: str) -> None:
    """`--since 15:22` is today's 15:22 in the local zone, also before 15:22, as `date -d`
    says (it was refused)."""
    monkeypatch.setenv("TZ", zone)
    time.tzset()
    try:
        texts = ("15:22", "00:00", "23:59:59", "9:05", "7:5", "15:22:30.25", "15:22Z",
                 "15:22 +01:00", "15:22-0500")
        for _ in range(2):  # once more if local midnight passed in between
            now = time.time()
            got = [parse_time(text, now) for text in texts]
            expected = [_date_d(text, zone) for text in texts]
            if time.localtime(now)[:3] == time.localtime()[:3]:
                break
        assert got == pytest.approx(expected, abs=1e-6), list(zip(texts, got, expected))
    finally:
        monkeypatch.undo()
        time.tzset()


@pytest.mark.parametrize(("text", "says"), [
    ("24:00", "'24:00' is not a clock time (00:00 to 23:59:59)"),
    ("15:60", "'15:60' is not a clock time"),
    ("15:22:61", "'15:22:61' is not a clock time"),
    ("1:2:3:4", "expected a time like"),
    ("15h22", "15:22 (today)"),
])
def test_a_bad_clock_time_is_refused_clearly(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=re.escape(says)):
        parse_time(text, time.time())
    assert subprocess.run(["date", "-d", text], capture_output=True).returncode != 0
