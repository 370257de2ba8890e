"""A block of a fio log once parsed: the ``Block`` both log readers return.

Guarantees: a ``Block`` knows whether its times are in order and its latest time, and maps
each row back to its line in the raw block; ``check_directions`` lets through only fio's
directions 0 (read), 1 (write) and 2 (trim).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from slowdown.analysis.fio.blockparse import BlockError

DIRECTIONS = ("read", "write", "trim")  # fio's ddir 0, 1, 2 (io_ddir_name)


@dataclass
class Block:
    """Parsed lines of one file: times and directions, and either bins or latencies."""

    times: np.ndarray  # int64, ms as written by fio
    ddir: np.ndarray  # int64, 0 read, 1 write, 2 trim
    counts: np.ndarray | None = None  # (lines, bins) int64, histogram logs
    values: np.ndarray | None = None  # int64, latency logs (the log's unit)
    rows: np.ndarray | None = None  # 0-based line offset of each row in the raw block
    ordered: bool = True  # times never decrease
    last: int = 0  # the latest time

    def __post_init__(self) -> None:
        times = self.times
        if times.size:
            self.ordered = bool((times[1:] >= times[:-1]).all())
            self.last = int(times[-1] if self.ordered else times.max())

    def __len__(self) -> int:
        return int(self.times.size)

    def offset(self, row: int) -> int:
        return row if self.rows is None else int(self.rows[row])


def check_directions(ddir: np.ndarray, rows: np.ndarray | None) -> None:
    """Directions must be fio's 0 (read), 1 (write) or 2 (trim)."""
    bad = np.flatnonzero((ddir < 0) | (ddir > 2))
    if bad.size:
        row = int(bad[0])
        raise BlockError(row if rows is None else int(rows[row]),
                         "field 3 (direction): expected 0 (read), 1 (write) or 2 (trim), "
                         f"found {int(ddir[row])}")


__all__ = ["DIRECTIONS", "Block", "check_directions"]
