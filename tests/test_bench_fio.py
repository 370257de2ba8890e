"""bench/bench_fio.py still runs: import-fio and Debian's fiologparser_hist.py side by side,
their outputs checked to agree before a figure is printed. Needs fio and pandas (see
tests/kit/fio_requirements.txt)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAD = ("| logs | mode | files | MiB | import-fio | fiologparser_hist.py | ratio (wall) | "
        "ratio (CPU) | goal | met? |")


@pytest.mark.slow  # two runs of each tool, one of each start-up floor: about 5 s
def test_bench_fio_prints_the_side_by_side_table(tmp_path, fio_sample):
    done = subprocess.run(
        [sys.executable, "-m", "bench.bench_fio", "--runs", "1", "--sizes", "1",
         "--modes", "noweight", "--skip-latency", "--floor-runs", "1", "--dir", str(tmp_path),
         "--sample", str(fio_sample.logs)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert HEAD in lines
    (row,) = [line for line in lines[lines.index(HEAD) + 2:] if line.startswith("|")]
    cells = [c.strip() for c in row.strip("|").split("|")]
    # The sample's span (its last line's time, in whole seconds) and size, read off the files.
    last_ms = int(fio_sample.hist[0].read_text().splitlines()[-1].split(",", 1)[0])
    mib = sum(p.stat().st_size for p in fio_sample.hist) / 2**20
    assert cells[:4] == [f"{-(-last_ms // 1000)} s x 4 jobs", "--noweight", "4", f"{mib:.1f}"]
    assert re.fullmatch(r"[\d.]+ s \(\d+ MiB\)", cells[4]) and \
        re.fullmatch(r"[\d.]+ s \(\d+ MiB\)", cells[5])
    assert float(cells[6].rstrip("x")) > 1  # faster, start-up and all
    assert cells[8:] == ["-", "-"]  # the goal counts from 8 MiB up
    assert any(line.startswith("Start-up alone (no input): import-fio ") for line in lines)
