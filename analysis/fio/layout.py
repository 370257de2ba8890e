"""fio's latency bins: which layouts exist, where each bin's edges lie, which value it stands for.

fio counts latencies in ``FIO_IO_U_PLAT_GROUP_NR`` groups of ``FIO_IO_U_PLAT_VAL = 64`` bins
(``FIO_IO_U_PLAT_BITS = 6``; see the comment block in fio's ``stat.h`` and
``plat_val_to_idx``/``plat_idx_to_val`` in ``stat.c``). Bins 0 to 127 hold the values 0 to
127 exactly; from there on group ``g`` covers ``[2**(g+5), 2**(g+6))`` in 64 equal bins of
width ``2**(g-1)``, so every bin is at most 1/64 of its value wide. fio's own value of a
bin is its middle (the exact value below 128). Values above the last group land in the
last bin.

Two layouts exist: 19 groups (1216 bins) in microseconds before fio 3.0, 29 groups (1856
bins) in nanoseconds since. ``--log_hist_coarseness=c`` (0 to 6) sums ``2**c`` neighbouring
bins into one, so a histogram log has ``1216 / 2**c`` or ``1856 / 2**c`` bins. Since 19 and
29 are odd primes the bin count alone tells layout and coarseness apart.

Bin values here are the mean of fio's values of the fine bins a (coarse) bin holds: fio's
own value at coarseness 0. fiologparser_hist.py (``_plat_idx_to_val_coarse``) takes the
middle between a bin's lower edge and the upper edge of the *following* fine bin, half a
fine bin higher than fio's value; both lie inside the same bin, so percentiles agree within
one bin.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np

PLAT_BITS = 6  # FIO_IO_U_PLAT_BITS
PLAT_VAL = 1 << PLAT_BITS  # FIO_IO_U_PLAT_VAL: bins per group
GROUPS_NS = 29  # FIO_IO_U_PLAT_GROUP_NR since fio 3.0: 1856 bins, nanoseconds
GROUPS_US = 19  # before fio 3.0: 1216 bins, microseconds
MAX_COARSENESS = 6  # fio's log_hist_coarseness ranges 0..6
HEADER_COLUMNS = 3  # time_ms, ddir, bs

_UNITS = {GROUPS_NS: ("ns", 1e-9), GROUPS_US: ("us", 1e-6)}


@dataclass(frozen=True)
class Layout:
    """One bin layout of fio's histogram logs: fio's group count and the log's coarseness."""

    groups: int
    coarseness: int = 0

    def __post_init__(self) -> None:
        if self.groups not in _UNITS:
            raise ValueError(f"fio bin layouts have {GROUPS_NS} or {GROUPS_US} groups")
        if not 0 <= self.coarseness <= MAX_COARSENESS:
            raise ValueError(f"coarseness must be 0..{MAX_COARSENESS}, got {self.coarseness}")

    @classmethod
    def from_bins(cls, bins: int) -> Layout | None:
        """The layout whose logs have ``bins`` bins per line, or None."""
        for groups in (GROUPS_NS, GROUPS_US):
            fine = groups * PLAT_VAL
            for coarseness in range(MAX_COARSENESS + 1):
                if fine >> coarseness == bins:
                    return cls(groups, coarseness)
        return None

    @property
    def fine_bins(self) -> int:
        return self.groups * PLAT_VAL

    @property
    def bins(self) -> int:
        return self.fine_bins >> self.coarseness

    @property
    def columns(self) -> int:
        """Fields per histogram-log line."""
        return self.bins + HEADER_COLUMNS

    @property
    def unit(self) -> str:
        """The unit of bin values and latency-log values: ``ns`` or ``us``."""
        return _UNITS[self.groups][0]

    @property
    def unit_seconds(self) -> float:
        return _UNITS[self.groups][1]

    @property
    def family(self) -> str:
        """Layout without the coarseness: logs of one family merge, of two do not."""
        version = "fio >= 3.0" if self.groups == GROUPS_NS else "fio < 3.0"
        return f"{self.fine_bins}-bin layout ({version}, {self.unit})"

    def describe(self) -> str:
        return f"{self.family}, coarseness {self.coarseness} ({self.bins} bins)"

    # Arrays are cached per layout; callers must not modify them.

    @property
    def lower(self) -> np.ndarray:
        """Lower edge of every bin (inclusive), in the layout's unit."""
        return _edges(self.groups, self.coarseness)[0]

    @property
    def upper(self) -> np.ndarray:
        """Upper edge of every bin (exclusive), in the layout's unit."""
        return _edges(self.groups, self.coarseness)[1]

    @property
    def width(self) -> np.ndarray:
        return _edges(self.groups, self.coarseness)[2]

    @property
    def values(self) -> np.ndarray:
        """The value each bin stands for, in the layout's unit (fio's at coarseness 0)."""
        return _edges(self.groups, self.coarseness)[3]

    @property
    def max_value(self) -> float:
        """Upper edge of the last bin: no bin value lies beyond it."""
        return float(self.upper[-1])

    def index(self, values: np.ndarray) -> np.ndarray:
        """Bin of each value (non-negative integers in the layout's unit), as fio bins them."""
        return fine_index(values, self.fine_bins) >> self.coarseness

    def coarsen(self, counts: np.ndarray, coarseness: int) -> np.ndarray:
        """Counts of this layout's bins (last axis) summed into a coarser layout of its family."""
        shift = coarseness - self.coarseness
        if shift < 0:
            raise ValueError("bins can only be made coarser")
        if shift == 0:
            return counts
        shape = (*counts.shape[:-1], self.bins >> shift, 1 << shift)
        return counts.reshape(shape).sum(axis=-1)


def fine_lower(index: np.ndarray) -> np.ndarray:
    """Lower edge of fine bins (fio's bin numbers at coarseness 0)."""
    index = np.asarray(index, dtype=np.int64)
    error_bits = np.maximum((index >> PLAT_BITS) - 1, 0)
    grouped = (np.int64(1) << (error_bits + PLAT_BITS)) + (index & (PLAT_VAL - 1)) * (
        np.int64(1) << error_bits
    )
    return np.where(index < 2 * PLAT_VAL, index, grouped)


def fine_width(index: np.ndarray) -> np.ndarray:
    """Width of fine bins: 1 below 128, ``2**(group - 1)`` above."""
    index = np.asarray(index, dtype=np.int64)
    return np.int64(1) << np.maximum((index >> PLAT_BITS) - 1, 0)


def fine_value(index: np.ndarray) -> np.ndarray:
    """fio's value of fine bins: the value itself below 128, the middle of the bin above."""
    index = np.asarray(index, dtype=np.int64)
    lower = fine_lower(index).astype(np.float64)
    return np.where(index < 2 * PLAT_VAL, lower, lower + fine_width(index) / 2.0)


def fine_index(values: np.ndarray, fine_bins: int) -> np.ndarray:
    """fio's bin number of non-negative integer values: the most significant bit picks the
    group, the next six bits the bin in it; values past the last bin go into the last bin."""
    values = np.asarray(values, dtype=np.int64)
    if values.size and values.min() < 0:
        raise ValueError("latencies are never negative")
    # frexp is exact for integers below 2**53: values = m * 2**e with m in [0.5, 1).
    msb = np.frexp(values.astype(np.float64))[1].astype(np.int64) - 1
    error_bits = np.maximum(msb - PLAT_BITS, 0)
    grouped = ((error_bits + 1) << PLAT_BITS) + ((values >> error_bits) & (PLAT_VAL - 1))
    index = np.where(msb <= PLAT_BITS, values, grouped)
    return np.minimum(index, fine_bins - 1)


@cache
def _edges(groups: int, coarseness: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    fine = np.arange(groups * PLAT_VAL, dtype=np.int64)
    stride = 1 << coarseness
    lower_fine = fine_lower(fine).astype(np.float64)
    upper_fine = lower_fine + fine_width(fine)
    lower = lower_fine[::stride].copy()
    upper = upper_fine[stride - 1::stride].copy()
    values = fine_value(fine).reshape(-1, stride).mean(axis=1)
    arrays = (lower, upper, upper - lower, values)
    for array in arrays:
        array.flags.writeable = False
    return arrays


__all__ = [
    "GROUPS_NS",
    "GROUPS_US",
    "HEADER_COLUMNS",
    "MAX_COARSENESS",
    "Layout",
    "fine_index",
    "fine_lower",
    "fine_value",
    "fine_width",
]
