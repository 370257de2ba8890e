"""Encodings of a histogram: compact binary for SQLite, JSON for SQL's ``json_each``.

Binary layout (little-endian), version 1::

    u8  version (1)
    u8  flags: bits 0-1 count width (u8, u16, u32, u64), bit 2 index width (i16 / i32),
               bit 3 zero count present, bit 4 moments present
    i8  scale
    [u64 zero count]                       if bit 3
    [f64 sum, sumsq, min, max]             if bit 4
    (index, count) pairs, ascending index  the rest of the blob

Fixed-width, interleaved pairs cost a few bytes more than varints but decode with one
``numpy.frombuffer``; at scale 5 the indices of 1 ns to 10^6 s fit in 16 bits and a minute's
counts in 8, so a minute of 60 latencies takes about 3 bytes per occupied bucket.
"""

from __future__ import annotations

import json
import struct
from typing import Any

import numpy as np

from .buckets import BucketCounts
from .histogram import Histogram, mapping_for

VERSION = 1
_COUNT_TYPES = ("<u1", "<u2", "<u4", "<u8")
_HEAD = struct.Struct("<BBb")
_ZERO = struct.Struct("<Q")
_MOMENTS = struct.Struct("<dddd")
_FLAG_INDEX32 = 0x04
_FLAG_ZERO = 0x08
_FLAG_MOMENTS = 0x10


class DecodeError(ValueError):
    """A blob that is not a histogram of a known version."""


def _count_code(max_count: int) -> int:
    for code, limit in enumerate((0xFF, 0xFFFF, 0xFFFFFFFF)):
        if max_count <= limit:
            return code
    return 3


def encode(h: Histogram, moments: bool = True) -> bytes:
    """Binary form; ``moments=False`` leaves out sum, sumsq, min and max (stored elsewhere)."""
    indices, counts = h.buckets.arrays()
    code = _count_code(int(counts.max()) if counts.size else 0)
    wide = bool(indices.size) and (indices.min() < -0x8000 or indices.max() > 0x7FFF)
    flags = code | (_FLAG_INDEX32 if wide else 0)
    flags |= _FLAG_ZERO if h.zero_count else 0
    flags |= _FLAG_MOMENTS if moments else 0
    parts = [_HEAD.pack(VERSION, flags, h.scale)]
    if h.zero_count:
        parts.append(_ZERO.pack(h.zero_count))
    if moments:
        parts.append(_MOMENTS.pack(h.sum, h.sumsq, h.min, h.max))
    pairs = np.empty(indices.size, dtype=_pair_dtype(flags))
    pairs["i"] = indices
    pairs["c"] = counts
    parts.append(pairs.tobytes())
    return b"".join(parts)


def _pair_dtype(flags: int) -> np.dtype:
    index = "<i4" if flags & _FLAG_INDEX32 else "<i2"
    return np.dtype([("i", index), ("c", _COUNT_TYPES[flags & 0x03])])


def decode_buckets(blob: bytes) -> tuple[int, int, np.ndarray, np.ndarray, tuple | None]:
    """``(scale, zero_count, indices, counts, moments-or-None)`` of a binary histogram."""
    if len(blob) < _HEAD.size:
        raise DecodeError(f"histogram blob of {len(blob)} bytes is too short")
    version, flags, scale = _HEAD.unpack_from(blob)
    if version != VERSION:
        raise DecodeError(f"histogram encoding version {version} is not supported")
    offset = _HEAD.size
    zero = 0
    moments = None
    try:
        if flags & _FLAG_ZERO:
            (zero,) = _ZERO.unpack_from(blob, offset)
            offset += _ZERO.size
        if flags & _FLAG_MOMENTS:
            moments = _MOMENTS.unpack_from(blob, offset)
            offset += _MOMENTS.size
        pairs = np.frombuffer(blob, dtype=_pair_dtype(flags), offset=offset)
    except (struct.error, ValueError) as exc:
        raise DecodeError(f"damaged histogram blob: {exc}") from None
    return scale, zero, pairs["i"].astype(np.int64), pairs["c"].astype(np.int64), moments


def decode(blob: bytes, count: int | None = None, sum: float = 0.0, sumsq: float = 0.0,
           min: float | None = None, max: float | None = None) -> Histogram:
    """Histogram from its binary form; moments left out of the blob are given as arguments."""
    scale, zero, indices, counts, moments = decode_buckets(blob)
    h = Histogram(scale)
    h.buckets = BucketCounts(dict(zip(indices.tolist(), counts.tolist())))
    h.zero_count = zero
    h.count = zero + int(counts.sum())
    if count is not None and count != h.count:
        raise DecodeError(f"histogram holds {h.count} values, its record says {count}")
    if moments is not None:
        h.sum, h.sumsq, h.min, h.max = moments
    elif h.count:
        if min is None or max is None:
            raise DecodeError("histogram blob without moments needs min and max")
        h.sum, h.sumsq, h.min, h.max = sum, sumsq, min, max
    return h


def to_json_obj(h: Histogram) -> dict[str, Any]:
    """JSON-ready form; ``json_each(doc, '$.buckets')`` yields one row per non-empty bucket."""
    indices, counts = h.buckets.arrays()
    lower, upper = h.mapping.bounds(indices)
    return {
        "scale": h.scale,
        "count": h.count,
        "sum": h.sum,
        "sumsq": h.sumsq,
        "min": h.min if h.count else None,
        "max": h.max if h.count else None,
        "zero_count": h.zero_count,
        "buckets": [
            {"index": i, "lower": lo, "upper": hi, "count": c}
            for i, lo, hi, c in zip(indices.tolist(), lower.tolist(), upper.tolist(),
                                    counts.tolist())
        ],
    }


def to_json(h: Histogram) -> str:
    return json.dumps(to_json_obj(h), separators=(",", ":"))


def from_json(text: str | dict[str, Any]) -> Histogram:
    doc = json.loads(text) if isinstance(text, str) else text
    try:
        h = Histogram(int(doc["scale"]))
        for bucket in doc["buckets"]:
            h.buckets.add(int(bucket["index"]), int(bucket["count"]))
        h.zero_count = int(doc["zero_count"])
        h.count = int(doc["count"])
        h.sum = float(doc["sum"])
        h.sumsq = float(doc["sumsq"])
        if h.count:
            h.min, h.max = float(doc["min"]), float(doc["max"])
    except (KeyError, TypeError, ValueError) as exc:
        raise DecodeError(f"not a histogram JSON document: {exc}") from None
    if h.count != h.zero_count + h.buckets.total():
        raise DecodeError("histogram JSON: count does not match its buckets")
    return h


__all__ = [
    "DecodeError",
    "decode",
    "decode_buckets",
    "encode",
    "from_json",
    "mapping_for",
    "to_json",
    "to_json_obj",
]
