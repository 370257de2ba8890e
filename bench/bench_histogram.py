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
import datetime
import gc
import io
import json
import math
import os
import platform
import pstats
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from slowdown.analysis.histogram import Histogram, codec
from slowdown.analysis.histogram.buckets import sum_arrays
from slowdown.analysis.store import Selection, Store
from slowdown.analysis.store.records import MINUTE, Record

try:
    import ddsketch
    from ddsketch import DDSketch
except ImportError:  # the anchor is optional: without it the anchor column reads "n/a"
    ddsketch = DDSketch = None
try:
    from ddsketch.pb import proto as ddsketch_proto
except ImportError:  # ddsketch's protobuf form needs the protobuf package
    ddsketch_proto = None

RELATIVE_ACCURACY = 0.0108  # DDSketch's bound equal to scale 5's (base - 1) / (base + 1)
QUANTILES = (0.5, 0.95, 0.99)
T0 = 1_767_225_600  # 2026-01-01T00:00:00Z
HOST, TARGET = "node01", "work"
OPS = ("data-read", "data-write", "md-stat", "md-read", "md-delete", "md-write")
MERGE_OP = "md-stat"  # its 30 days of minutes are the merge and quantile input
MD_MEDIAN, DATA_MEDIAN, SIGMA = 100e-6, 5e-3, 0.7  # lognormal latencies, seconds
PER_MINUTE = 60  # samples per op and minute
GOAL_RECORD = 2e-6  # seconds per Histogram.record
GOAL_ROW_BYTES = 600  # database bytes per minute record
TABLE_HEAD = "| what | ours | anchor | ratio | goal | met? |"


@dataclass(frozen=True)
class Sizes:
    repeats: int
    record_calls: int  # Histogram.record calls per repeat
    many_values: int  # values per record_many call
    minutes: int  # minutes of records written to the store (and merged)
    quantile_calls: int  # q50+q95+q99 evaluations per repeat
    decode_blobs: int  # blobs decoded per repeat


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


def latencies(rng: np.random.Generator, op: str, n: int) -> np.ndarray:
    median = MD_MEDIAN if op.startswith("md-") else DATA_MEDIAN
    return rng.lognormal(math.log(median), SIGMA, n)


def new_sketch() -> Any:
    return DDSketch(RELATIVE_ACCURACY)


def sketch_of(values: list[float]) -> Any:
    sketch = new_sketch()
    add = sketch.add
    for v in values:
        add(v)
    return sketch


def sketch_bytes(sketch: Any) -> bytes:
    return ddsketch_proto.DDSketchProto.to_proto(sketch).SerializeToString()


def trimmed_sketch_bytes(sketch: Any) -> int:
    """Size of the protobuf with the positive bins cut to the occupied key range: what a
    writer without ddsketch-py's 128-bin growth padding would emit."""
    store, pb = sketch._store, ddsketch_proto.pb
    lo, hi = store.min_key - store.offset, store.max_key - store.offset
    message = ddsketch_proto.DDSketchProto.to_proto(sketch)
    message.positiveValues.CopyFrom(pb.Store(contiguousBinCounts=store.bins[lo:hi + 1],
                                             contiguousBinIndexOffset=store.min_key))
    return len(message.SerializeToString())


def sketch_from_bytes(blob: bytes) -> Any:
    return ddsketch_proto.DDSketchProto.from_proto(ddsketch_proto.pb.DDSketch.FromString(blob))


@dataclass
class StoreData:
    """What writing the store left behind for the later sections."""

    path: Path
    rows: int
    file_bytes: int
    table_bytes: dict[str, int]
    write_times: list[float]
    blob_sizes: np.ndarray
    sketch_sizes: np.ndarray | None
    merge_histograms: list[Histogram]
    merge_values: list[np.ndarray]
    merge_sketches: list[Any]
    sample_blobs: list[bytes]
    sample_sketch_blobs: list[bytes]
    trimmed_sketch_sizes: list[int]


def write_store(directory: Path, sizes: Sizes, rng: np.random.Generator) -> StoreData:
    """Write ``sizes.minutes`` minutes of the six ops, one transaction per minute, as the
    service does; then checkpoint and VACUUM and measure the file."""
    path = directory / "bench.db"
    write_times: list[float] = []
    sketch_sizes: list[int] = []
    merge_histograms: list[Histogram] = []
    merge_values: list[np.ndarray] = []
    merge_sketches: list[Any] = []
    sample_blobs: list[bytes] = []
    sample_sketch_blobs: list[bytes] = []
    trimmed_sketch_sizes: list[int] = []
    with Store(path) as store:
        for minute in range(sizes.minutes):
            records = []
            for op in OPS:
                values = latencies(rng, op, PER_MINUTE)
                h = Histogram()
                h.record_many(values)
                records.append(Record(HOST, TARGET, op, T0 + minute * MINUTE, h))
                sketch = sketch_of(values.tolist()) if DDSketch is not None else None
                if ddsketch_proto is not None:
                    blob = sketch_bytes(sketch)
                    sketch_sizes.append(len(blob))
                    if len(sample_sketch_blobs) < sizes.decode_blobs:
                        sample_sketch_blobs.append(blob)
                        trimmed_sketch_sizes.append(trimmed_sketch_bytes(sketch))
                if len(sample_blobs) < sizes.decode_blobs:
                    sample_blobs.append(codec.encode(h, moments=False))
                if op == MERGE_OP:
                    merge_histograms.append(h)
                    merge_values.append(values)
                    merge_sketches.append(sketch)
            t0 = time.perf_counter()
            store.write(records)
            write_times.append(time.perf_counter() - t0)
        conn = store.conn
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute("VACUUM")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        rows = conn.execute("SELECT count(*) FROM minutes").fetchone()[0]
        blob_sizes = np.array([r[0] for r in conn.execute("SELECT length(hist) FROM minutes")])
        table_bytes = dict(conn.execute(
            "SELECT name, sum(pgsize) FROM dbstat GROUP BY name ORDER BY 2 DESC"
        ).fetchall())
    return StoreData(
        path=path, rows=rows, file_bytes=path.stat().st_size, table_bytes=table_bytes,
        write_times=write_times, blob_sizes=blob_sizes,
        sketch_sizes=np.array(sketch_sizes) if sketch_sizes else None,
        merge_histograms=merge_histograms, merge_values=merge_values,
        merge_sketches=merge_sketches, sample_blobs=sample_blobs,
        sample_sketch_blobs=sample_sketch_blobs, trimmed_sketch_sizes=trimmed_sketch_sizes,
    )


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


def fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "n/a"
    if unit == "B":
        return f"{value:,.0f} B"
    for scale, name in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us")):
        if value >= scale:
            return f"{value / scale:.3g} {name}"
    return f"{value * 1e9:.3g} ns"


def combine(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median of the runs' medians per cell; the ratio is the median of the runs' ratios."""
    rows = []
    for cells in zip(*(run["rows"] for run in runs)):
        first = dict(cells[0])
        for field in ("ours", "anchor", "ratio"):
            values = [c[field] for c in cells if c[field] is not None]
            first[field] = statistics.median(values) if values else None
            first[field + "_range"] = (min(values), max(values)) if values else None
        rows.append(first)
    errors = {k: statistics.median(r["errors"][k] for r in runs) for k in runs[0]["errors"]}
    return {
        "rows": rows, "errors": errors, "runs": len(runs),
        "table_bytes": runs[0]["table_bytes"],
        "write_p99": statistics.median(r["write_p99"] for r in runs),
        "trimmed": runs[0]["trimmed"], "sample_blob_mean": runs[0]["sample_blob_mean"],
    }


def table(result: dict[str, Any]) -> str:
    lines = [TABLE_HEAD, "|---|---:|---:|---:|---:|---|"]
    for r in result["rows"]:
        goal = met = ""
        if r["goal"] is not None:
            goal = "< " + fmt(r["goal"], r["unit"])
            met = "yes" if r["ours"] < r["goal"] else "**NO**"
        ratio = "" if r["ratio"] is None else f"{r['ratio']:.2f}"
        lines.append(f"| {r['what']} | {fmt(r['ours'], r['unit'])} | "
                     f"{fmt(r['anchor'], r['unit'])} | {ratio} | {goal} | {met} |")
    return "\n".join(lines)


def spread(result: dict[str, Any]) -> str:
    lines = ["| key | ours, min..max of runs | anchor, min..max | ratio, min..max |",
             "|---|---:|---:|---:|"]
    for r in result["rows"]:
        cells = []
        for field in ("ours", "anchor", "ratio"):
            span = r.get(field + "_range")
            unit = r["unit"] if field != "ratio" else ""
            if span is None:
                cells.append("")
            elif field == "ratio":
                cells.append(f"{span[0]:.2f}..{span[1]:.2f}")
            else:
                cells.append(f"{fmt(span[0], unit)}..{fmt(span[1], unit)}")
        lines.append(f"| {r['key']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def environment() -> str:
    parts = [
        f"date {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
        f"Python {platform.python_version()}", f"numpy {np.__version__}",
        f"SQLite {sqlite3.sqlite_version}",
        f"ddsketch {getattr(ddsketch, '__version__', '?')}" if ddsketch else "ddsketch absent",
    ]
    if ddsketch_proto is not None:
        import google.protobuf

        parts.append(f"protobuf {google.protobuf.__version__}")
    else:
        parts.append("protobuf absent (no DDSketch sizes or decode)")
    parts.append(f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}")
    return "; ".join(parts)


def report(result: dict[str, Any], sizes: Sizes, directory: Path) -> str:
    errors = result["errors"]
    notes = [
        f"runs: {result['runs']}; repeats per timing: {sizes.repeats} (median); database in "
        f"{directory}",
        "quantile relative error vs exact, max over q50/q95/q99 of the merged minutes: ours "
        f"{errors['ours']:.4%}" + (f", DDSketch {errors['anchor']:.4%}" if "anchor" in errors
                                   else ""),
        "database bytes per row by b-tree (those above 0.5 B): " + ", ".join(
            f"{name} {size:.1f}" for name, size in result["table_bytes"].items() if size > 0.5),
        f"Store.write of one minute, p99: {fmt(result['write_p99'], 's')}",
    ]
    if result["trimmed"]:
        mean, n = result["trimmed"]
        notes.append(
            f"DDSketch protobuf with its bins cut to the occupied key range (ddsketch-py pads "
            f"its dense store in 128-bin chunks): mean {mean:,.0f} B over the first {n:,} "
            f"records, whose own encoding averages {result['sample_blob_mean']:,.0f} B")
    out = [environment(), "", table(result), ""]
    out += [f"- {n}" for n in notes]
    if result["runs"] > 1:
        out += ["", spread(result)]
    return "\n".join(out)


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
        command = [sys.executable, str(Path(__file__).resolve()), "--json"]
        command += ["--quick"] if args.quick else []
        command += ["--repeats", str(sizes.repeats)]
        command += ["--dir", str(args.dir)] if args.dir else []
        runs = []
        for i in range(args.runs):
            done = subprocess.run(command, check=True, stdout=subprocess.PIPE, text=True)
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
