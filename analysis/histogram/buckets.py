"""Bucket storage of the exponential histogram: index -> count, nothing else.

A latency histogram of one minute touches a few dozen buckets out of a range of a thousand,
so a dict is both the smallest and the fastest store for one value at a time; arrays come in
and go out through numpy for the vectorised paths.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # numpy is imported where arrays are used: short commands start faster
    import numpy as np


class BucketCounts:
    """Sparse counts per bucket index."""

    __slots__ = ("counts",)

    def __init__(self, counts: dict[int, int] | None = None) -> None:
        self.counts: dict[int, int] = {} if counts is None else counts

    def __len__(self) -> int:
        return len(self.counts)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BucketCounts) and self.counts == other.counts

    def __repr__(self) -> str:
        return f"BucketCounts({dict(sorted(self.counts.items()))})"

    def add(self, index: int, count: int = 1) -> None:
        counts = self.counts
        counts[index] = counts.get(index, 0) + count

    def add_arrays(self, indices: np.ndarray, counts: np.ndarray | None = None) -> None:
        """Add many (index, count) pairs at once; repeated indices are summed."""
        import numpy as np

        indices = np.asarray(indices, dtype=np.int64)
        if indices.size == 0:
            return
        lo = int(indices.min())  # a latency histogram spans a few thousand indices at most
        summed = np.bincount(indices - lo, weights=counts)
        nonzero = np.flatnonzero(summed)
        add = self.add
        for offset, count in zip(nonzero.tolist(), summed[nonzero].astype(np.int64).tolist()):
            add(offset + lo, count)

    def merge(self, other: BucketCounts) -> None:
        add = self.add
        for index, count in other.counts.items():
            add(index, count)

    def downscaled(self, shift: int) -> BucketCounts:
        """Counts at a scale ``shift`` steps coarser: bucket ``i`` goes to ``i >> shift``."""
        if shift < 0:
            raise ValueError("a histogram's scale can only be reduced")
        result = BucketCounts()
        for index, count in self.counts.items():
            result.add(index >> shift, count)
        return result

    def total(self) -> int:
        return sum(self.counts.values())

    def items(self) -> Iterator[tuple[int, int]]:
        """Non-empty buckets in ascending index order."""
        return ((i, c) for i, c in sorted(self.counts.items()) if c)

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """Ascending indices and their counts as int64 arrays."""
        import numpy as np

        pairs = sorted((i, c) for i, c in self.counts.items() if c)
        if not pairs:
            return np.empty(0, np.int64), np.empty(0, np.int64)
        indices, counts = zip(*pairs)
        return np.array(indices, dtype=np.int64), np.array(counts, dtype=np.int64)

    def copy(self) -> BucketCounts:
        return BucketCounts(dict(self.counts))


def sum_arrays(parts: Iterable[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Merge many (indices, counts) pairs of one scale in a single vectorised pass."""
    import numpy as np

    parts = list(parts)
    if not parts:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    indices = np.concatenate([p[0] for p in parts]).astype(np.int64, copy=False)
    counts = np.concatenate([p[1] for p in parts]).astype(np.int64, copy=False)
    if indices.size == 0:
        return indices, counts
    lo = int(indices.min())
    dense = np.bincount(indices - lo, weights=counts).astype(np.int64)
    nonzero = np.flatnonzero(dense)
    return nonzero + lo, dense[nonzero]
