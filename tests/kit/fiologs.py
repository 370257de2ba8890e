"""Small fio logs written by hand: histogram logs in a bin layout, and latency logs."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from slowdown.analysis.fio.layout import Layout

NS = Layout(29)


def write_hist(path: Path, lines, layout: Layout = NS) -> Path:
    """A histogram log in fio's format from (time, ddir, {bin: count}) lines."""
    with open(path, "w") as f:
        for time, ddir, counts in lines:
            row = np.zeros(layout.bins, dtype=np.int64)
            for index, count in counts.items():
                row[index] = count
            f.write(f"{time}, {ddir}, 4096, " + ", ".join(map(str, row.tolist())) + "\n")
    return path


def write_lat(path: Path, rows, extra: str = ", 4096, 0") -> Path:
    """A latency log in fio's format from (time, value, ddir) rows."""
    with open(path, "w") as f:
        for time, value, ddir in rows:
            f.write(f"{time}, {value}, {ddir}{extra}\n")
    return path
