"""Dense (row, bucket) count tables, one per histogram scale, for histograms folded a
record at a time (``stats.folded``): a row per cell, counts that are whole numbers (exact
in float64 in any order), a bucket range that grows as indices come. A cell's merge at the
coarsest scale among its records is read back with ``at_scale``."""

from __future__ import annotations

import numpy as np


class BucketTables:
    """Dense (row, bucket) count tables, one per histogram scale, their bucket range grown as
    indices come."""

    def __init__(self, rows: int) -> None:
        self.rows = rows
        self.by_scale: dict[int, list] = {}  # scale -> [lowest index, table (rows, width)]

    def add(self, scale: int, row: np.ndarray, index: np.ndarray, weight: np.ndarray) -> None:
        if not index.size:
            return
        lo, hi = int(index.min()), int(index.max())
        entry = self.by_scale.get(scale)
        if entry is None:
            entry = self.by_scale[scale] = [lo, np.zeros((self.rows, hi - lo + 1))]
        lowest, table = entry
        width = table.shape[1]
        if lo < lowest or hi >= lowest + width:  # grow, with room for the next few files
            new_lo, new_hi = min(lo, lowest), max(hi, lowest + width - 1)
            pad = (new_hi - new_lo + 1) // 4
            new_lo, new_hi = new_lo - pad, new_hi + pad
            grown = np.zeros((self.rows, new_hi - new_lo + 1))
            grown[:, lowest - new_lo:lowest - new_lo + width] = table
            entry[0], entry[1] = lowest, table = new_lo, grown
            width = table.shape[1]
        np.add.at(table.reshape(-1), row * width + (index - lowest), weight)

    def at_scale(self, scale: int, rows: np.ndarray, shared: BucketTables | None = None,
                 shared_rows: np.ndarray | None = None, times: float = 1.0) \
            -> tuple[int, np.ndarray]:
        """The counts of ``rows`` merged at ``scale`` (coarser tables' buckets are unions of
        finer ones: index >> k), trimmed to the buckets with counts: (lowest, table); plus
        ``times`` the counts of ``shared`` at ``shared_rows`` (none where -1)."""
        sources = [(s, lowest, table, rows, 1.0) for s, (lowest, table) in self.by_scale.items()]
        if shared is not None and (shared_rows >= 0).any():
            sources += [(s, lowest, table, shared_rows, times)
                        for s, (lowest, table) in shared.by_scale.items()]
        parts = []
        for s, lowest, table, at, factor in sources:
            if s < scale:
                continue
            part = table[np.maximum(at, 0)]
            if factor != 1.0 or (at < 0).any():
                part = part * np.where(at >= 0, factor, 0.0)[:, None]
            index = (lowest + np.arange(part.shape[1])) >> (s - scale)
            if s > scale:  # add the fine columns into their coarse bucket
                first = index - index[0]
                coarse = np.zeros((len(rows), int(first[-1]) + 1))
                for j in range(part.shape[1]):
                    coarse[:, first[j]] += part[:, j]
                part, index = coarse, index[0] + np.arange(coarse.shape[1])
            parts.append((int(index[0]), part))
        used = [(lo, p, np.flatnonzero(p.any(axis=0))) for lo, p in parts]
        used = [(lo, p, nz) for lo, p, nz in used if nz.size]
        if not used:
            return 0, np.zeros((len(rows), 1))
        lowest = min(lo + int(nz[0]) for lo, _, nz in used)
        highest = max(lo + int(nz[-1]) for lo, _, nz in used)
        out = np.zeros((len(rows), highest - lowest + 1))
        for lo, p, nz in used:
            a, b = lo + int(nz[0]), lo + int(nz[-1]) + 1
            out[:, a - lowest:b - lowest] += p[:, a - lo:b - lo]
        return lowest, out


__all__ = ["BucketTables"]
