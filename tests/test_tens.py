"""Ten-minute records (schema 8): every write, rewrite, rollup and the migration keep them the
merge of the minutes they stand for, so that a reader may take one in place of its minutes."""

from __future__ import annotations

import math
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from slowdown.analysis.histogram import Histogram, codec
from slowdown.analysis.store import Store, schema
from slowdown.analysis.store.records import Record
from testdata.datakit import utc

T0 = utc(2026, 11, 1)


def minute(start: int, values, op: str = "md-stat", host: str = "n1", errors: int = 0,
           stuck: float = 0.0, stuck_end: float = 0.0) -> Record:
    h = Histogram()
    h.record_many(np.asarray(values, dtype=np.float64))
    return Record(host, "work", op, start, h, errors=errors, stuck=stuck, stuck_end=stuck_end)


def expected_tens(conn: sqlite3.Connection) -> dict[tuple[int, int], tuple]:
    """The tens as the minutes table says they must be: each (series, ten minutes) merged from
    its minutes in the order of their starts."""
    out: dict[tuple[int, int], list] = {}
    for sid, start, count, errors, skipped, s, ss, lo, hi, stuck, end, blob in conn.execute(
            "SELECT series, start, count, errors, skipped, sum, sumsq, min, max, stuck, "
            "stuck_end, hist FROM minutes ORDER BY series, start"):
        key = (sid, start - start % 600)
        if key not in out:
            out[key] = [count, errors, skipped, s, ss, lo, hi, stuck, end, start, [blob]]
            continue
        t = out[key]
        t[0] += count
        t[1] += errors
        t[2] += skipped
        t[3] += s
        t[4] += ss
        t[5] = min(x for x in (t[5], lo) if x is not None) if (t[5], lo) != (None, None) else None
        t[6] = max(x for x in (t[6], hi) if x is not None) if (t[6], hi) != (None, None) else None
        t[7] = max(t[7], stuck)
        t[8], t[9] = end, start  # the latest minute's
        t[10].append(blob)
    return {k: (*v[:10], buckets(codec.merge_blobs(v[10]))) for k, v in out.items()}


def buckets(h: Histogram) -> tuple[int, int, dict[int, int]]:
    return h.scale, h.zero_count, {i: c for i, c in h.buckets.counts.items() if c}


def pairs(blob: bytes) -> tuple[int, int, dict[int, int]]:
    scale, zero, counts, _ = codec.decode_pairs(blob)
    return scale, zero, {i: c for i, c in counts.items() if c}


def stored_tens(conn: sqlite3.Connection) -> dict[tuple[int, int], tuple]:
    return {(sid, start): (count, errors, skipped, s, ss, lo, hi, stuck, end, last, pairs(blob))
            for sid, start, count, errors, skipped, s, ss, lo, hi, stuck, end, last, blob
            in conn.execute("SELECT series, start, count, errors, skipped, sum, sumsq, min, "
                            "max, stuck, stuck_end, last, hist FROM tens")}


def assert_tens_are_their_minutes(path: Path) -> int:
    """Every ten equals the merge of its minutes: counts, extremes, stuck ages, the latest
    minute and the histogram's buckets exactly, the sums to their rounding. Returns how
    many tens there are."""
    with sqlite3.connect(path) as conn:
        want, got = expected_tens(conn), stored_tens(conn)
    assert want.keys() == got.keys()
    for key, w in want.items():
        g = got[key]
        assert (g[:3], g[5:10]) == (w[:3], w[5:10]), key
        assert g[3] == pytest.approx(w[3], rel=1e-12) and g[4] == pytest.approx(w[4], rel=1e-12)
        assert g[10] == w[10], key
    return len(got)


writes = st.lists(st.tuples(
    st.integers(0, 59),                          # the minute of three tens and a half hour
    st.sampled_from(["md-stat", "data-read"]),
    st.lists(st.floats(1e-6, 30.0), max_size=6),  # values (none: an empty minute)
    st.integers(0, 2),                           # errors
    st.sampled_from([0.0, 0.0, 12.5, 40.0]),     # stuck age at the minute's end
    st.integers(-1, 3)), min_size=1, max_size=40)  # the write it goes in (-1: scale 2)


@settings(max_examples=40, deadline=None, phases=[Phase.explicit, Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(writes=writes)
def test_tens_are_the_merge_of_their_minutes_whatever_the_writes(tmp_path_factory, writes):
    """Minutes written out of order, twice (merged into themselves), in one write or many, at
    two scales, empty or with errors and stuck ages: each ten is its minutes merged."""
    path = tmp_path_factory.mktemp("t") / "n1.db"
    batches: dict[int, list[Record]] = {}
    for m, op, values, errors, stuck, batch in writes:
        rec = minute(T0 + 60 * m, values, op, errors=errors, stuck=stuck, stuck_end=stuck)
        if batch < 0:
            rec.histogram.downscale(2)
        batches.setdefault(batch, []).append(rec)
    with Store(path) as store:
        for batch in sorted(batches):
            store.write(batches[batch])
    assert assert_tens_are_their_minutes(path) >= 1


def test_a_rollup_takes_the_tens_with_their_minutes(tmp_path):
    path = tmp_path / "n1.db"
    with Store(path) as store:
        store.write([minute(T0 + 60 * m, [0.001 * (1 + m % 7)]) for m in range(150)])
        assert store.rollup(T0 + 2 * 3600 + 1200) == 120  # the two whole hours
        tens = [r[0] for r in store.conn.execute("SELECT start FROM tens ORDER BY start")]
    assert tens == [T0 + 7200, T0 + 7800, T0 + 8400]
    assert assert_tens_are_their_minutes(path) == 3


def test_the_latest_minute_of_a_ten_gives_its_stuck_age_at_the_end(tmp_path):
    """A hang over at the ten's last minute leaves no stuck age at its end, in any order of
    writing; two writes of the latest minute keep the larger age, as the minute does."""
    path = tmp_path / "n1.db"
    with Store(path) as store:
        store.write([minute(T0 + 120, [0.001], stuck=50.0, stuck_end=0.0)])
        store.write([minute(T0 + 60, [0.001], stuck=50.0, stuck_end=50.0)])
        store.write([minute(T0 + 120, [], stuck=20.0, stuck_end=20.0)])
        store.write([minute(T0 + 300, [0.001], "md-read", stuck=30.0),  # in one write
                     minute(T0 + 240, [], "md-read", stuck=30.0, stuck_end=30.0)])
        rows = store.conn.execute("SELECT stuck, stuck_end, last FROM tens ORDER BY series"
                                  ).fetchall()
    assert rows == [(50.0, 20.0, T0 + 120), (30.0, 0.0, T0 + 300)]
    assert_tens_are_their_minutes(path)


def test_migration_8_makes_the_tens_of_the_minutes_written_before(tmp_path):
    """A schema-7 file (its tens dropped, as release 7 wrote it) gets tens equal to those the
    writer makes, in the migration's one transaction; hours are left as they are."""
    rng = np.random.default_rng(8)
    path = tmp_path / "n1.db"
    with Store(path) as store:
        store.write([minute(T0 + 60 * m, rng.lognormal(-7, 1, int(rng.integers(0, 20))), op,
                            errors=int(rng.integers(0, 2)), stuck=float(m % 13 == 0) * 30,
                            stuck_end=float(m % 26 == 0) * 30)
                     for m in range(95) for op in ("md-stat", "data-read")])
        store.rollup(T0 + 3600)
    with sqlite3.connect(path) as conn:
        written = stored_tens(conn)
        conn.execute("DROP TABLE tens")
        conn.executescript("DROP TABLE server_tens; DROP TABLE server_series; "
                           "DROP TABLE weekly_histograms")  # schema 9's and 10's
        conn.execute("PRAGMA user_version = 7")
    with Store(path) as store:
        assert schema.version_of(store.conn) == schema.VERSION
    assert assert_tens_are_their_minutes(path) == len(written) == 2 * 4
    with sqlite3.connect(path) as conn:
        migrated = stored_tens(conn)
    for key, w in written.items():
        m = migrated[key]
        assert (m[:3], m[5:11]) == (w[:3], w[5:11])
        assert math.isclose(m[3], w[3], rel_tol=1e-12)


def test_a_long_period_reads_its_whole_tens_and_merges_the_same(tmp_path):
    """What a baseline reads (``whole_tens``): the tens wholly inside the period in place of
    their minutes, the minutes at its ragged ends; the same merge as every minute read."""
    from slowdown.analysis.store import Selection, aggregate
    from slowdown.analysis.store.records import HOUR

    rng = np.random.default_rng(3)
    path = tmp_path / "n1.db"
    with Store(path) as store:
        store.write([minute(T0 + 60 * m, rng.lognormal(-7, 1, int(rng.integers(0, 30))), op)
                     for m in range(300) for op in ("md-stat", "data-read")])
        store.write([minute(T0 - 2 * HOUR, [0.5, 0.7], "md-stat")])  # before: no ten of it
    with Store(path, readonly=True) as store:
        for start, end in ((T0 - 3 * HOUR, T0 + 300 * 60), (T0 + 7 * 60, T0 + 293 * 60),
                           (T0 + 60, T0 + 500)):
            selection = Selection(ops=("md-stat",), start=start, end=end)
            spans = [row[0] for row in store.aggregate_rows(selection, whole_tens=True)]
            assert (600 in spans) == (end - start >= 1200)
            assert (60 in spans) == bool(start % 600 or end % 600)  # the ragged ends
            tens_read = aggregate([store], selection, whole_tens=True)
            minutes_read = aggregate([store], selection)
            h, g = tens_read.histogram, minutes_read.histogram
            assert (h.count, h.scale, h.zero_count, h.buckets.counts, h.min, h.max) == \
                (g.count, g.scale, g.zero_count, g.buckets.counts, g.min, g.max)
            assert h.sum == pytest.approx(g.sum, rel=1e-12)
