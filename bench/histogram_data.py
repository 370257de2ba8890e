"""The histogram benchmark's data: latencies as the probe sees them, the anchor (DDSketch of
``ddsketch``, optional, and its protobuf form), and a store of 30 days of minutes written through
``Store`` whose blobs and rows the benchmark reads back."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from slowdown.analysis.histogram import Histogram, codec
from slowdown.analysis.store import Store
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


T0 = 1_767_225_600  # 2026-01-01T00:00:00Z


HOST, TARGET = "node01", "work"


OPS = ("data-read", "data-write", "md-stat", "md-read", "md-delete", "md-write")


MERGE_OP = "md-stat"  # its 30 days of minutes are the merge and quantile input


MD_MEDIAN, DATA_MEDIAN, SIGMA = 100e-6, 5e-3, 0.7  # lognormal latencies, seconds


PER_MINUTE = 60  # samples per op and minute


@dataclass(frozen=True)
class Sizes:
    repeats: int
    record_calls: int  # Histogram.record calls per repeat
    many_values: int  # values per record_many call
    minutes: int  # minutes of records written to the store (and merged)
    quantile_calls: int  # q50+q95+q99 evaluations per repeat
    decode_blobs: int  # blobs decoded per repeat


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
