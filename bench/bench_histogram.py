"""Benchmark of the histogram, its codec and the SQLite store, side by side with DDSketch.

Run from the repository root with the package importable (installed, or on PYTHONPATH)::

    python -m bench.bench_histogram --runs 3     # the figures of docs/BENCHMARKS.md
    python -m bench.bench_histogram --quick      # small sizes, a few seconds (the smoke test)

Each timing is the median of ``--repeats`` repeats; a repeat runs a stated number of loops and
is divided by it. Ours and the anchor (DDSketch of ``ddsketch`` at relative accuracy 0.0108,
the error bound of scale 5) alternate repeat by repeat, so that the noise of a shared machine
falls on both alike; the garbage collector is off while a repeat runs, as in ``timeit``.
With ``--runs N`` the whole benchmark runs N times in fresh processes and each cell is the
median of the runs' medians; a ratio is the median of the per-run ratios.
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import gc
import io
import json
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from bench.histogram_data import (
    MERGE_OP,
    OPS,
    PER_MINUTE,
    DDSketch,
    Sizes,
    StoreData,
    latencies,
    new_sketch,
    sketch_from_bytes,
    write_store,
)
from bench.histogram_report import combine, report
from slowdown.analysis.histogram import Histogram, codec
from slowdown.analysis.histogram.buckets import sum_arrays
from slowdown.analysis.store import Selection, Store

QUANTILES = (0.5, 0.95, 0.99)
GOAL_RECORD = 2e-6  # seconds per Histogram.record
GOAL_ROW_BYTES = 600  # database bytes per minute record


FULL = Sizes(repeats=7, record_calls=100_000, many_values=1_000_000, minutes=30 * 1440,
             quantile_calls=1_000, decode_blobs=10_000)
QUICK = Sizes(repeats=7, record_calls=10_000, many_values=100_000, minutes=360,
              quantile_calls=100, decode_blobs=1_000)


# -- timing ----------------------------------------------------------------------------------


def measure(cases: dict[str, tuple[Callable[[Any], object], Callable[[], Any] | None]],
            loops: int, repeats: int) -> dict[str, float]:
    """Median seconds per loop of each case; the cases alternate within every repeat.

    A case is ``(run, prepare)``: ``prepare()`` (untimed, may be None) makes the argument of
    ``run``, which performs ``loops`` operations.
    """
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(repeats):
        for name, (run, prepare) in cases.items():
            arg = prepare() if prepare is not None else None
            gc.collect()
            gc.disable()
            try:
                t0 = time.perf_counter()
                run(arg)
                elapsed = time.perf_counter() - t0
            finally:
                gc.enable()
            times[name].append(elapsed / loops)
    return {name: statistics.median(t) for name, t in times.items()}


# -- data ------------------------------------------------------------------------------------


# -- the sections ----------------------------------------------------------------------------


def row(key: str, what: str, ours: float, anchor: float | None = None, unit: str = "s",
        goal: float | None = None) -> dict[str, Any]:
    return {"key": key, "what": what, "ours": ours, "anchor": anchor, "unit": unit,
            "goal": goal, "ratio": ours / anchor if anchor else None}


def bench_record(sizes: Sizes, rng: np.random.Generator) -> list[dict[str, Any]]:
    values = latencies(rng, MERGE_OP, sizes.record_calls).tolist()

    def ours(h: Histogram) -> None:
        record = h.record
        for v in values:
            record(v)

    def anchor(sketch: Any) -> None:
        add = sketch.add
        for v in values:
            add(v)

    def empty(_: None) -> None:
        for _v in values:
            pass

    cases = {"ours": (ours, Histogram), "loop": (empty, None)}
    if DDSketch is not None:
        cases["anchor"] = (anchor, new_sketch)
    t = measure(cases, sizes.record_calls, sizes.repeats)
    return [
        row("record", f"1. `Histogram.record`, one value (per call; {sizes.record_calls:,} "
            "calls/repeat) vs `DDSketch.add`", t["ours"], t.get("anchor"), goal=GOAL_RECORD),
        row("loop", f"   for scale: the empty `for` loop over the same {sizes.record_calls:,} "
            "floats (per iteration, included above)", t["loop"]),
    ]


def bench_record_many(sizes: Sizes, rng: np.random.Generator) -> list[dict[str, Any]]:
    n = sizes.many_values
    values = latencies(rng, MERGE_OP, n)
    floats = values.tolist()

    def anchor(sketch: Any) -> None:
        add = sketch.add
        for v in floats:
            add(v)

    cases: dict[str, Any] = {
        "ours": (lambda h: h.record_many(values), Histogram),
        "floor": (lambda _: np.quantile(values, QUANTILES), None),
    }
    if DDSketch is not None:
        cases["anchor"] = (anchor, new_sketch)
    t = measure(cases, 1, sizes.repeats)
    return [
        row("record_many", f"2. `Histogram.record_many`, {n:,} values as one ndarray (per "
            "call; 1 call/repeat) vs a Python loop of `DDSketch.add`", t["ours"], t.get("anchor")),
        row("record_many_floor", "   floor reference, EXACT not a sketch: `np.quantile` of the "
            f"same {n:,} values, q50/q95/q99 (1 call/repeat)", t["ours"], t["floor"]),
    ]


def bench_merge(sizes: Sizes, data: StoreData, store_path: Path) -> tuple[list[dict[str, Any]],
                                                                         Histogram, Any]:
    hs = data.merge_histograms
    n = len(hs)
    blobs = [codec.encode(h, moments=False) for h in hs]
    arrays = [codec.decode_buckets(b)[2:4] for b in blobs]

    def one_by_one(_: None) -> Histogram:
        total = Histogram()
        for h in hs:
            total.merge(h)
        return total

    def from_blobs(_: None) -> Histogram:
        return codec.merge_blobs(blobs)

    def from_arrays(_: None) -> tuple[np.ndarray, np.ndarray]:
        return sum_arrays(arrays)

    def anchor(_: None) -> Any:
        total = new_sketch()
        for sketch in data.merge_sketches:
            total.merge(sketch)
        return total

    reader = Store(store_path, readonly=True)
    selection = Selection(ops=(MERGE_OP,))
    cases: dict[str, Any] = {
        "one_by_one": (one_by_one, None),
        "from_blobs": (from_blobs, None),
        "from_arrays": (from_arrays, None),
        "store": (lambda _: reader.aggregate(selection), None),
    }
    if DDSketch is not None:
        cases["anchor"] = (anchor, None)
    try:
        t = measure(cases, 1, sizes.repeats)
        via_store = reader.aggregate(selection).histogram
    finally:
        reader.close()

    merged = one_by_one(None)  # the paths must agree before their times mean anything
    summed = dict(zip(*(a.tolist() for a in from_arrays(None))))
    if not (from_blobs(None).buckets.counts == summed == merged.buckets.counts
            == via_store.buckets.counts) or not via_store.count == merged.count == n * PER_MINUTE:
        raise AssertionError("the merge paths disagree")
    sketch = anchor(None) if DDSketch is not None else None
    a = t.get("anchor")
    what = f"{n:,} minute histograms of {PER_MINUTE} values (per merge of all; 1/repeat)"
    rows = [
        row("merge_one", f"3a. `Histogram.merge` one by one, {what} vs `DDSketch.merge` one "
            "by one", t["one_by_one"], a),
        row("merge_blobs", "3b. the store's vectorised path `codec.merge_blobs` of the same "
            "minutes' blobs (`decode_buckets` of each + `buckets.sum_arrays`)", t["from_blobs"],
            a),
        row("merge_arrays", "3c. `buckets.sum_arrays` alone over the same minutes, pre-decoded "
            "to arrays", t["from_arrays"], a),
        row("merge_store", "3d. `Store.aggregate` of the same rows from the SQLite file "
            "(SELECT + decode + merge; no anchor: DDSketch has no store)", t["store"]),
    ]
    return rows, merged, sketch


def bench_quantile(sizes: Sizes, merged: Histogram, sketch: Any,
                   values: np.ndarray) -> tuple[list[dict[str, Any]], dict[str, float]]:
    calls = sizes.quantile_calls

    def ours(_: None) -> None:
        quantiles = merged.quantiles
        for _i in range(calls):
            quantiles(QUANTILES)

    def anchor(_: None) -> None:
        value = sketch.get_quantile_value
        for _i in range(calls):
            [value(q) for q in QUANTILES]

    cases: dict[str, Any] = {"ours": (ours, None)}
    if sketch is not None:
        cases["anchor"] = (anchor, None)
    t = measure(cases, calls, sizes.repeats)
    # Accuracy, each against the order statistic its own estimator targets: ours the rank
    # ceil(q n) ("inverted_cdf"), DDSketch's the rank floor(q (n - 1)) + 1 ("lower").
    errors = {"ours": max(
        abs(est / exact - 1.0) for est, exact in zip(
            merged.quantiles(QUANTILES), np.quantile(values, QUANTILES, method="inverted_cdf")))}
    if sketch is not None:
        errors["anchor"] = max(
            abs(sketch.get_quantile_value(q) / exact - 1.0)
            for q, exact in zip(QUANTILES, np.quantile(values, QUANTILES, method="lower")))
    return [row("quantile", f"4. q50+q95+q99 of the merged histogram ({len(merged.buckets)} "
                f"buckets; per 3 quantiles; {calls:,}/repeat) vs `DDSketch.get_quantile_value` "
                "x3", t["ours"], t.get("anchor"))], errors


def bench_decode(sizes: Sizes, data: StoreData) -> list[dict[str, Any]]:
    blobs = data.sample_blobs
    sketch_blobs = data.sample_sketch_blobs

    def buckets(_: None) -> None:
        decode = codec.decode_buckets
        for blob in blobs:
            decode(blob)

    def histogram(_: None) -> None:
        decode = codec.decode
        for blob in blobs:
            decode(blob, min=1e-9, max=1.0)

    def anchor(_: None) -> None:
        for blob in sketch_blobs:
            sketch_from_bytes(blob)

    cases: dict[str, Any] = {"buckets": (buckets, None), "histogram": (histogram, None)}
    if sketch_blobs:
        cases["anchor"] = (anchor, None)
    t = measure(cases, len(blobs), sizes.repeats)
    what = f"(per blob; {len(blobs):,} minute blobs/repeat)"
    return [
        row("decode", f"6. `codec.decode_buckets` {what} vs DDSketch protobuf parse + "
            "`DDSketchProto.from_proto`", t["buckets"], t.get("anchor")),
        row("decode_full", f"   `codec.decode` to a `Histogram` {what}", t["histogram"],
            t.get("anchor")),
    ]


def store_rows(data: StoreData) -> list[dict[str, Any]]:
    days = data.rows / len(OPS) / 1440
    sketch_mean = sketch_p99 = None
    if data.sketch_sizes is not None:
        sketch_mean = float(data.sketch_sizes.mean())
        sketch_p99 = float(np.percentile(data.sketch_sizes, 99))
    return [
        row("row_bytes", f"5. database bytes per minute record ({days:g} days x {len(OPS)} ops "
            f"= {data.rows:,} rows via `Store.write`, checkpoint + VACUUM; file / rows)",
            data.file_bytes / data.rows, unit="B", goal=GOAL_ROW_BYTES),
        row("blob_mean", "   encoded histogram `codec.encode(h, moments=False)`, mean vs "
            "DDSketch protobuf of the same values", float(data.blob_sizes.mean()), sketch_mean,
            unit="B"),
        row("blob_p99", "   encoded histogram, p99 vs DDSketch protobuf p99",
            float(np.percentile(data.blob_sizes, 99)), sketch_p99, unit="B"),
        row("write_minute", f"   `Store.write` of one minute ({len(OPS)} records, 1 transaction,"
            f" synchronous=FULL), median of {len(data.write_times):,}",
            statistics.median(data.write_times)),
    ]


def profile_ours(sizes: Sizes, data: StoreData, merged: Histogram) -> str:
    """cProfile of our side of each timed operation (``--profile``)."""
    rng = np.random.default_rng(7)
    values = latencies(rng, MERGE_OP, sizes.record_calls).tolist()
    many = latencies(rng, MERGE_OP, sizes.many_values)
    minute = latencies(rng, MERGE_OP, PER_MINUTE)
    blobs = [codec.encode(h, moments=False) for h in data.merge_histograms]

    def record_values() -> None:
        h = Histogram()
        for v in values:
            h.record(v)

    def record_minutes() -> None:
        for _ in range(1000):
            Histogram().record_many(minute)

    def merge_blobs() -> None:
        codec.merge_blobs(blobs)

    def merge_one_by_one() -> None:
        total = Histogram()
        for h in data.merge_histograms:
            total.merge(h)

    def quantiles() -> None:
        for _ in range(sizes.quantile_calls):
            merged.quantiles(QUANTILES)

    def store_aggregate() -> None:
        with Store(data.path, readonly=True) as reader:
            reader.aggregate(Selection(ops=(MERGE_OP,)))

    out = io.StringIO()
    for name, fn in (("Histogram.record", record_values),
                     ("Histogram.record_many, 1,000 minutes of 60 values", record_minutes),
                     (f"Histogram.record_many, {sizes.many_values:,} values",
                      lambda: Histogram().record_many(many)),
                     ("Histogram.merge one by one", merge_one_by_one),
                     ("codec.merge_blobs", merge_blobs),
                     ("Histogram.quantiles", quantiles),
                     ("Store.aggregate", store_aggregate)):
        profiler = cProfile.Profile()
        profiler.runcall(fn)
        out.write(f"\n## profile: {name}\n")
        pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(8)
    return out.getvalue()


def run_once(sizes: Sizes, directory: Path, profile: bool = False) -> dict[str, Any]:
    rng = np.random.default_rng(20260101)
    data = write_store(directory, sizes, rng)
    rows = bench_record(sizes, rng)
    rows += bench_record_many(sizes, rng)
    merge_rows, merged, sketch = bench_merge(sizes, data, data.path)
    rows += merge_rows
    quantile_rows, errors = bench_quantile(sizes, merged, sketch,
                                           np.concatenate(data.merge_values))
    rows += quantile_rows
    rows += store_rows(data)
    rows += bench_decode(sizes, data)
    result = {
        "rows": rows,
        "errors": errors,
        "table_bytes": {k: v / data.rows for k, v in data.table_bytes.items()},
        "write_p99": float(np.percentile(data.write_times, 99)),
        "trimmed": [float(np.mean(data.trimmed_sketch_sizes)),
                    len(data.trimmed_sketch_sizes)] if data.trimmed_sketch_sizes else None,
        "sample_blob_mean": float(np.mean([len(b) for b in data.sample_blobs])),
    }
    if profile:
        result["profile"] = profile_ours(sizes, data, merged)
    return result


# -- reporting -------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (smoke test)")
    parser.add_argument("--runs", type=int, default=1,
                        help="run N times in fresh processes; report medians of the runs")
    parser.add_argument("--repeats", type=int, default=None, help="repeats per timing (7)")
    parser.add_argument("--dir", type=Path, default=None,
                        help="where the SQLite file is written (default: a temporary directory)")
    parser.add_argument("--profile", action="store_true",
                        help="also print a cProfile of our side of each operation")
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    if args.repeats is not None:
        sizes = dataclasses.replace(sizes, repeats=args.repeats)

    if args.runs > 1:
        command = [sys.executable, "-m", "bench.bench_histogram", "--json"]
        command += ["--quick"] if args.quick else []
        command += ["--repeats", str(sizes.repeats)]
        command += ["--dir", str(args.dir)] if args.dir else []
        runs = []
        for i in range(args.runs):
            done = subprocess.run(command, check=True, stdout=subprocess.PIPE, text=True,
                                  cwd=Path(__file__).resolve().parents[1])
            runs.append(json.loads(done.stdout))
            print(f"run {i + 1}/{args.runs} done", file=sys.stderr)
        print(report(combine(runs), sizes, args.dir or Path(tempfile.gettempdir())))
        return 0

    with tempfile.TemporaryDirectory(prefix="slowdown-bench-", dir=args.dir) as tmp:
        result = run_once(sizes, Path(tmp), profile=args.profile)
    if args.json:
        print(json.dumps(result))
        return 0
    print(report(combine([result]), sizes, args.dir or Path(tempfile.gettempdir())))
    if args.profile:
        print(result["profile"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
