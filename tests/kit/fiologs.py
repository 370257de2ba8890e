"""fio logs for tests: small ones written by hand (histogram logs in a bin layout, latency
logs), a log's counts read the slow, obvious way, and `slowdown import-fio` run in-process."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import numpy as np

from slowdown.analysis.cli.import_fio import import_fio
from slowdown.analysis.fio.layout import Layout
from tests.kit.cli_runner import runner

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


def run(*args: object, code: int = 0):
    result = runner().invoke(import_fio, [str(a) for a in args], catch_exceptions=False)
    assert result.exit_code == code, (result.output, result.stderr)
    return result


def table(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text), skipinitialspace=True))


def file_counts(path: Path) -> np.ndarray:
    """(lines, 3 + bins) of a histogram log, read the slow, obvious way."""
    return np.array([[int(x) for x in line.split(",")] for line in path.read_text().splitlines()])
