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
``struct.iter_unpack`` (or ``numpy.frombuffer`` in batch paths); at scale 5 the indices
of 1 ns to 10^6 s fit in 16 bits and a minute's counts in 8, so a minute of 60 latencies
takes about 3 bytes per occupied bucket.
"""

from __future__ import annotations

import functools
import json
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from slowdown.analysis.histogram import Histogram, mapping_for
from slowdown.analysis.histogram.buckets import BucketCounts

if TYPE_CHECKING:
    import numpy as np

VERSION = 1
_HEAD = struct.Struct("<BBb")
_ZERO = struct.Struct("<Q")
_MOMENTS = struct.Struct("<dddd")
_FLAG_INDEX32 = 0x04
_FLAG_ZERO = 0x08
_FLAG_MOMENTS = 0x10
_COUNT_CODES = "BHIQ"  # struct codes of the count widths, by flags & 0x03
_COUNT_LIMITS = (0xFF, 0xFFFF, 0xFFFFFFFF)


class DecodeError(ValueError):
    """A blob that is not a histogram of a known version."""


def _pair_format(flags: int) -> str:
    return ("i" if flags & _FLAG_INDEX32 else "h") + _COUNT_CODES[flags & 0x03]


def encode(h: Histogram, moments: bool = True) -> bytes:
    """Binary form; ``moments=False`` leaves out sum, sumsq, min and max (stored elsewhere)."""
    pairs = sorted((i, c) for i, c in h.buckets.counts.items() if c)
    top = max((c for _, c in pairs), default=0)
    code = next((k for k, limit in enumerate(_COUNT_LIMITS) if top <= limit), 3)
    wide = bool(pairs) and (pairs[0][0] < -0x8000 or pairs[-1][0] > 0x7FFF)
    flags = code | (_FLAG_INDEX32 if wide else 0)
    flags |= _FLAG_ZERO if h.zero_count else 0
    flags |= _FLAG_MOMENTS if moments else 0
    parts = [_HEAD.pack(VERSION, flags, h.scale)]
    if h.zero_count:
        parts.append(_ZERO.pack(h.zero_count))
    if moments:
        parts.append(_MOMENTS.pack(h.sum, h.sumsq, h.min, h.max))
    flat = [x for pair in pairs for x in pair]
    parts.append(struct.pack("<" + _pair_format(flags) * len(pairs), *flat))
    return b"".join(parts)


def _header(blob: bytes) -> tuple[int, int, int, tuple | None, int]:
    """``(flags, scale, zero_count, moments-or-None, offset of the pairs)``."""
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
    except struct.error as exc:
        raise DecodeError(f"damaged histogram blob: {exc}") from None
    if (len(blob) - offset) % struct.calcsize("<" + _pair_format(flags)):
        raise DecodeError("damaged histogram blob: cut inside a bucket")
    return flags, scale, zero, moments, offset


@functools.lru_cache(maxsize=16)
def pair_dtype(flags: int) -> np.dtype:
    """The numpy record type of one (index, count) pair in a blob with these flags."""
    import numpy as np

    fmt = _pair_format(flags)
    return np.dtype([("i", "<" + fmt[0]), ("c", "<" + fmt[1])])


def moments_of(blob: bytes) -> tuple | None:
    """``(sum, sumsq, min, max)`` carried by the blob, or None (stored elsewhere)."""
    return _header(blob)[3]


def decode_pairs(blob: bytes) -> tuple[int, int, dict[int, int], tuple | None]:
    """``(scale, zero_count, {index: count}, moments-or-None)``, in pure Python."""
    flags, scale, zero, moments, offset = _header(blob)
    pairs = struct.iter_unpack("<" + _pair_format(flags), memoryview(blob)[offset:])
    return scale, zero, dict(pairs), moments


def decode_buckets(blob: bytes) -> tuple[int, int, np.ndarray, np.ndarray, tuple | None]:
    """``(scale, zero_count, indices, counts, moments-or-None)`` as numpy arrays."""
    import numpy as np

    flags, scale, zero, moments, offset = _header(blob)
    pairs = np.frombuffer(blob, dtype=pair_dtype(flags), offset=offset)
    return scale, zero, pairs["i"].astype(np.int64), pairs["c"].astype(np.int64), moments


def decode(blob: bytes, count: int | None = None, sum: float = 0.0, sumsq: float = 0.0,
           min: float | None = None, max: float | None = None) -> Histogram:
    """Histogram from its binary form; moments left out of the blob are given as arguments."""
    scale, zero, counts, moments = decode_pairs(blob)
    h = Histogram(scale)
    h.buckets = BucketCounts(counts)
    h.zero_count = zero
    h.count = zero + sum_of(counts)
    if count is not None and count != h.count:
        raise DecodeError(f"histogram holds {h.count} values, its record says {count}")
    if moments is not None:
        h.sum, h.sumsq, h.min, h.max = moments
    elif h.count:
        if min is None or max is None:
            raise DecodeError("histogram blob without moments needs min and max")
        h.sum, h.sumsq, h.min, h.max = sum, sumsq, min, max
    return h


@dataclass
class Pairs:
    """The (index, count) pairs of blobs of one encoding layout, in the blobs' order."""

    label: np.ndarray  # int32: the label of the blob each pair came from (non-decreasing)
    index: np.ndarray  # int32, at the common scale
    count: np.ndarray


def decode_blobs(blobs: list[bytes], labels: np.ndarray, scale: int | None = None) \
        -> tuple[list[Pairs], np.ndarray, int]:
    """Every blob's pairs, decoded with numpy a layout at a time, with each blob's label
    (non-decreasing over ``blobs``); also each blob's zero count and the common scale: the
    coarsest of the blobs', or ``scale`` if given (no coarser than any of them).

    The headers are read as arrays from one joined buffer, not blob by blob.
    """
    import numpy as np

    n = len(blobs)
    lengths = np.fromiter(map(len, blobs), np.int64, n)
    buf = np.frombuffer(b"".join(blobs), np.uint8)
    starts = np.cumsum(lengths) - lengths
    if n and (lengths < _HEAD.size).any():
        _header(blobs[int(np.argmax(lengths < _HEAD.size))])  # raises, naming what is wrong
    if n and (buf[starts] != VERSION).any():
        _header(blobs[int(np.argmax(buf[starts] != VERSION))])
    flags = buf[starts + 1].astype(np.int64)
    scales = buf[starts + 2].view(np.int8).astype(np.int64)
    if scale is None:
        scale = int(scales.min()) if n else 5
    elif n and scale > int(scales.min()):
        raise ValueError(f"cannot raise the scale of a blob from {int(scales.min())} to {scale}")
    has_zero = (flags & _FLAG_ZERO) != 0
    head = _HEAD.size + _ZERO.size * has_zero + _MOMENTS.size * ((flags & _FLAG_MOMENTS) != 0)
    if n and (lengths < head).any():  # a header cut short: its own message
        _header(blobs[int(np.argmax(lengths < head))])
    zero = np.zeros(n, np.int64)
    if has_zero.any():
        at = starts[has_zero] + 3
        zero[has_zero] = buf[at[:, None] + np.arange(8)].copy().view("<u8").ravel()
    group = (flags & 0x07) * 256 + scales + 128
    groups: list[Pairs] = []
    for key in np.unique(group).tolist():
        members = np.flatnonzero(group == key)
        dtype = pair_dtype(key // 256)
        body = lengths[members] - head[members]
        if (body % dtype.itemsize).any():  # (every header is whole: checked above)
            raise DecodeError("damaged histogram blob: cut inside a bucket")
        # The members' bodies: every byte of their blobs but the headers' (one pass).
        first, last = starts[members], starts[members] + lengths[members]
        if len(members) == n:
            keep = np.ones(buf.size, dtype=bool)
        else:  # inside [first, last) of a member: +1 at each first, -1 at each last
            edge = np.zeros(buf.size + 1, np.int8)
            edge[first] += 1
            edge[last] -= 1
            keep = np.cumsum(edge[:-1], dtype=np.int8) > 0
        skip = head[members]
        keep[np.repeat(first - (np.cumsum(skip) - skip), skip) + np.arange(int(skip.sum()))] \
            = False
        pairs = buf[keep].view(dtype)
        groups.append(Pairs(
            label=np.repeat(labels[members].astype(np.int32), body // dtype.itemsize),
            index=pairs["i"].astype(np.int32) >> (key % 256 - 128 - scale),
            count=pairs["c"]))
    return groups, zero, scale


# Blobs; numpy wins from a handful of blobs on, but importing it costs ~80 ms, which a short
# command (the uptime-like default merges at most 60 blobs a window) should not pay.
VECTOR_FROM = 200


def merge_blobs(blobs: list[bytes], vector_from: int = VECTOR_FROM) -> Histogram:
    """The buckets of many blobs merged (at the coarsest scale among them), moments unset.

    A few blobs merge through dicts, many (``vector_from`` or more) through numpy in one
    vectorised pass.
    """
    if len(blobs) < vector_from:
        by_scale: dict[int, BucketCounts] = {}
        zero = 0
        for blob in blobs:
            scale, z, counts, _ = decode_pairs(blob)
            zero += z
            target = by_scale.setdefault(scale, BucketCounts())
            add = target.add
            for index, count in counts.items():
                add(index, count)
        if not by_scale:
            return Histogram()
        scale = min(by_scale)
        h = Histogram(scale)
        for s, buckets in by_scale.items():
            h.buckets.merge(buckets.downscaled(s - scale) if s != scale else buckets)
    else:
        import numpy as np

        from slowdown.analysis.histogram.buckets import sum_arrays

        groups, zeros, scale = decode_blobs(blobs, np.zeros(len(blobs), np.int32))
        zero = int(zeros.sum())
        indices, counts = sum_arrays((g.index, g.count) for g in groups)
        h = Histogram(scale)
        h.buckets = BucketCounts(dict(zip(indices.tolist(), counts.tolist())))
    h.zero_count = zero
    h.count = zero + h.buckets.total()
    return h


def sum_of(counts: dict[int, int]) -> int:
    total = 0
    for c in counts.values():
        total += c
    return total


def to_json_obj(h: Histogram) -> dict[str, Any]:
    """JSON-ready form; ``json_each(doc, '$.buckets')`` yields one row per non-empty bucket."""
    lower, upper = h.mapping.lower_bound, h.mapping.upper_bound
    return {
        "scale": h.scale,
        "count": h.count,
        "sum": h.sum,
        "sumsq": h.sumsq,
        "min": h.min if h.count else None,
        "max": h.max if h.count else None,
        "zero_count": h.zero_count,
        "buckets": [
            {"index": i, "lower": lower(i), "upper": upper(i), "count": c}
            for i, c in h.buckets.items()
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
    "decode_pairs",
    "encode",
    "from_json",
    "mapping_for",
    "merge_blobs",
    "to_json",
    "to_json_obj",
]
