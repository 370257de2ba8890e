"""Properties of the exponential histogram: accuracy, merging, scale reduction, encodings."""

from __future__ import annotations

import math
import sqlite3

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slowdown.analysis.histogram import Histogram, codec, rank
from slowdown.analysis.histogram.mapping import ExponentialMapping

# Latencies from 1 us to 1000 s, as seconds.
latency = st.floats(min_value=1e-6, max_value=1e3, allow_nan=False, allow_infinity=False)


@st.composite
def latency_samples(draw) -> list[float]:
    """Uniform, log-normal, heavy-tailed (Pareto), bimodal and single-valued samples."""
    kind = draw(st.sampled_from(["uniform", "lognormal", "pareto", "bimodal", "single", "any"]))
    n = draw(st.integers(min_value=1, max_value=400))
    seed = draw(st.integers(min_value=0, max_value=2**32 - 1))
    rng = np.random.default_rng(seed)
    if kind == "uniform":
        values = rng.uniform(1e-6, 1e3, n)
    elif kind == "lognormal":
        values = rng.lognormal(draw(st.floats(-13, 6)), draw(st.floats(0.01, 3)), n)
    elif kind == "pareto":
        values = 1e-5 * (1 + rng.pareto(draw(st.floats(0.3, 3)), n))
    elif kind == "bimodal":
        values = np.where(rng.random(n) < 0.9, rng.lognormal(-9, 0.2, n), rng.lognormal(0, 0.5, n))
    elif kind == "single":
        values = np.full(n, draw(latency))
    else:
        return draw(st.lists(latency, min_size=1, max_size=200))
    return np.clip(values, 1e-6, 1e3).tolist()


QUANTILES = [0.0, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.999, 1.0]


def build(values, scale: int = 5) -> Histogram:
    h = Histogram(scale)
    for v in values:
        h.record(v)
    return h


@settings(max_examples=300, deadline=None)
@given(latency_samples(), st.integers(min_value=0, max_value=8))
def test_quantile_relative_error_within_bound(values, scale):
    h = build(values, scale)
    exact = sorted(values)
    bound = h.mapping.relative_accuracy * (1 + 1e-12)
    for q in QUANTILES:
        truth = exact[rank(q, len(values)) - 1]
        estimate = h.quantile(q)
        assert abs(estimate - truth) <= bound * truth, (q, estimate, truth)


def test_scale_5_accuracy_is_about_one_percent():
    assert ExponentialMapping(5).relative_accuracy == pytest.approx(0.01083, abs=1e-5)


@settings(max_examples=200, deadline=None)
@given(latency_samples())
def test_moments_are_exact(values):
    h = build(values)
    assert h.count == len(values)
    assert h.min == min(values) and h.max == max(values)
    assert h.sum == pytest.approx(math.fsum(values), rel=1e-9)
    assert h.sumsq == pytest.approx(math.fsum(v * v for v in values), rel=1e-9)


@settings(max_examples=200, deadline=None)
@given(latency_samples(), st.integers(min_value=-4, max_value=10))
def test_vectorised_record_equals_one_by_one(values, scale):
    one = build(values, scale)
    many = Histogram(scale)
    many.record_many(np.array(values))
    assert one == many


@settings(max_examples=200, deadline=None)
@given(latency_samples(), latency_samples(), latency_samples())
def test_merge_is_associative_and_commutative(a, b, c):
    ha, hb, hc = build(a), build(b), build(c)
    left = ha.copy()
    left.merge(hb)
    left.merge(hc)
    inner = hb.copy()
    inner.merge(hc)
    right = ha.copy()
    right.merge(inner)
    swapped = hc.copy()
    swapped.merge(ha)
    swapped.merge(hb)
    assert left == right == swapped


@settings(max_examples=200, deadline=None)
@given(latency_samples(), st.integers(min_value=1, max_value=20))
def test_merged_parts_equal_the_whole(values, parts):
    chunks = [values[i::parts] for i in range(parts)]
    assert Histogram.merged(build(chunk) for chunk in chunks) == build(values)


@settings(max_examples=300, deadline=None)
@given(latency, st.integers(min_value=-2, max_value=12), st.integers(min_value=0, max_value=8))
def test_scale_reduction_is_exact(value, scale, shift):
    shift = min(shift, scale + 4)
    fine = ExponentialMapping(scale)
    coarse = ExponentialMapping(scale - shift)
    assert fine.index(value) >> shift == coarse.index(value)
    # The coarse bucket's edges are edges of the fine scheme.
    i = coarse.index(value)
    assert coarse.lower_bound(i) == fine.lower_bound(i << shift)
    assert coarse.upper_bound(i) == fine.lower_bound((i + 1) << shift)


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=-40, max_value=30), st.integers(min_value=0, max_value=4095),
       st.integers(min_value=0, max_value=8))
def test_bucket_edges_map_to_their_own_bucket(power, sub, scale):
    """Bucket i is (base**i, base**(i+1)]: its upper edge belongs to it, its lower edge does not."""
    index = (power << scale) + sub % (1 << scale)
    m = ExponentialMapping(scale)
    upper = m.upper_bound(index)
    assert m.index(upper) == index
    assert m.index(math.nextafter(upper, math.inf)) == index + 1
    for s in range(0, scale + 1):  # the edge stays an edge at every coarser scale
        coarse = ExponentialMapping(s)
        if ((index + 1) % (1 << (scale - s))) == 0:
            assert coarse.index(upper) == ((index + 1) >> (scale - s)) - 1


@settings(max_examples=100, deadline=None)
@given(latency_samples(), latency_samples(), st.integers(min_value=1, max_value=5))
def test_merging_different_scales_downscales_to_the_coarser(a, b, drop):
    fine, coarse = build(a, 5), build(b, 5 - drop)
    fine.merge(coarse)
    assert fine.scale == 5 - drop
    assert fine == build(a + b, 5 - drop)


@settings(max_examples=200, deadline=None)
@given(latency_samples(), st.integers(min_value=-4, max_value=12))
def test_binary_round_trip(values, scale):
    h = build(values, scale)
    h.record(0.0)
    assert codec.decode(codec.encode(h)) == h
    bare = codec.encode(h, moments=False)
    assert codec.decode(bare, h.count, h.sum, h.sumsq, h.min, h.max) == h


def test_binary_round_trip_wide_counts_and_indices():
    h = Histogram(12)
    h.record_many(np.full(70_000, 1e-9))
    h.record(1e6)
    blob = codec.encode(h)
    assert codec.decode(blob) == h


@settings(max_examples=100, deadline=None)
@given(latency_samples())
def test_json_round_trip_and_json_each(values):
    h = build(values)
    doc = codec.to_json(h)
    assert codec.from_json(doc) == h
    conn = sqlite3.connect(":memory:")
    rows = conn.execute(
        "SELECT json_extract(value, '$.lower'), json_extract(value, '$.upper'),"
        " json_extract(value, '$.count') FROM json_each(?, '$.buckets')",
        (doc,),
    ).fetchall()
    assert sum(r[2] for r in rows) == len(values)
    assert [r[1] for r in rows] == sorted(r[1] for r in rows)
    for v in values:
        assert any(lo < v <= hi for lo, hi, _ in rows)


def test_damaged_blobs_are_refused():
    h = build([0.001, 0.002])
    blob = codec.encode(h)
    with pytest.raises(codec.DecodeError):
        codec.decode(blob[:2])
    with pytest.raises(codec.DecodeError):
        codec.decode(b"\x09" + blob[1:])
    with pytest.raises(codec.DecodeError):
        codec.decode(blob[:-1])  # cut inside a pair


def test_nan_and_infinity_are_refused_zero_is_counted():
    h = Histogram()
    with pytest.raises(ValueError):
        h.record(math.nan)
    with pytest.raises(ValueError):
        h.record(math.inf)
    with pytest.raises(ValueError):
        h.record(-math.inf)
    with pytest.raises(ValueError):
        h.record_many([1.0, math.nan])
    h.record(0.0)
    h.record(0.5)
    assert (h.count, h.zero_count, h.quantile(0.5), h.quantile(1.0)) == (2, 1, 0.0, 0.5)


def test_empty_histogram():
    h = Histogram()
    assert math.isnan(h.quantile(0.5)) and math.isnan(h.mean) and h.count == 0
    assert codec.decode(codec.encode(h)) == h


def test_invalid_scale_and_quantile():
    with pytest.raises(ValueError):
        ExponentialMapping(13)
    with pytest.raises(ValueError):
        Histogram().quantile(1.5)
    with pytest.raises(ValueError):
        build([1.0]).downscale(6)


@pytest.mark.parametrize("damaged", [
    bytes([1, 0x08, 5, 0, 0]),  # zero count announced, cut short
    bytes([1, 0x10, 5]) + bytes(20),  # moments announced, cut short
    bytes([2, 0, 5, 1, 1]),  # a newer encoding
    bytes([1, 0]),  # no room for a header
    bytes([1, 0, 5, 1, 1]),  # cut inside a bucket (a pair is 3 bytes)
])
@pytest.mark.parametrize("where", [0, -1])
def test_a_damaged_blob_among_many_says_what_one_blob_alone_says(damaged, where):
    """The vector path (many blobs) names the damage as decoding that blob alone does."""
    good = codec.encode(build([0.001, 0.002, 0.004]), moments=False)
    blobs = [good] * 300
    blobs[where] = damaged
    with pytest.raises(codec.DecodeError) as alone:
        codec.decode(damaged)
    with pytest.raises(codec.DecodeError) as among:
        codec.merge_blobs(blobs)
    assert str(among.value) == str(alone.value)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(latency_samples(), st.integers(min_value=2, max_value=6)),
                min_size=1, max_size=8))
def test_merge_blobs_dict_and_vector_paths_agree(parts):
    """Blobs of mixed scales merge alike through dicts (few) and numpy (many)."""
    hs = [build(values, scale) for values, scale in parts]
    blobs = [codec.encode(h, moments=False) for h in hs]
    by_dicts = codec.merge_blobs(blobs)
    saved = codec.VECTOR_FROM
    try:
        codec.VECTOR_FROM = 0
        by_numpy = codec.merge_blobs(blobs)
    finally:
        codec.VECTOR_FROM = saved
    whole = Histogram.merged(hs)
    for merged in (by_dicts, by_numpy):
        assert merged.scale == whole.scale
        assert merged.buckets == whole.buckets and merged.count == whole.count


@settings(max_examples=100, deadline=None)
@given(latency_samples())
def test_several_quantiles_in_one_pass_equal_one_at_a_time(values):
    h = build(values)
    assert h.quantiles(QUANTILES) == [h.quantile(q) for q in QUANTILES]
