"""Databases filled with known distributions, written through the store (not the probe)."""

from __future__ import annotations

import calendar
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np

from slowdown.analysis.histogram import Histogram
from slowdown.analysis.store import Store
from slowdown.analysis.store.records import Record

OPS = ("data-read", "data-write", "md-stat", "md-read", "md-delete", "md-write")


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> int:
    return calendar.timegm((year, month, day, hour, minute, 0))


def fill(path: Path, start: int, minutes: int, sampler: Callable[[np.random.Generator, int],
         np.ndarray], *, host: str = "n1", targets: Iterable[str] = ("work",),
         ops: Iterable[str] = OPS, seed: int = 0, per_minute: int = 60,
         stuck: dict[int, float] | None = None) -> list[np.ndarray]:
    """Write ``minutes`` minute records per (target, op); returns the raw samples written.
    ``stuck``: per minute start, the age of an op still in flight at that minute's end (its
    ``stuck`` and ``stuck_end``)."""
    rng = np.random.default_rng(seed)
    raw: list[np.ndarray] = []
    targets, ops = tuple(targets), tuple(ops)
    with Store(path) as store:
        for chunk in range(0, minutes, 1440):
            batch = []
            for m in range(chunk, min(minutes, chunk + 1440)):
                t = start + 60 * m
                for target in targets:
                    for op in ops:
                        values = sampler(rng, per_minute)
                        raw.append(values)
                        h = Histogram()
                        h.record_many(values)
                        age = (stuck or {}).get(t, 0.0)
                        batch.append(Record(host, target, op, t, h, stuck=age, stuck_end=age))
            store.write(batch)
    return raw


def lognormal(median: float, sigma: float = 0.3) -> Callable:
    return lambda rng, n: rng.lognormal(np.log(median), sigma, n)
