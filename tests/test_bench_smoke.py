"""The histogram benchmark still runs: its quick mode prints the whole table."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEAD = "| what | ours | anchor | ratio | goal | met? |"


def test_bench_histogram_quick_prints_its_table(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "bench.bench_histogram", "--quick", "--dir", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert HEAD in lines
    rows = [line for line in lines[lines.index(HEAD) + 2:] if line.startswith("|")]
    for section in ("1.", "2.", "3a.", "3b.", "3c.", "3d.", "4.", "5.", "6."):
        assert any(r.startswith(f"| {section} ") for r in rows), f"no row {section}"
    for r in rows:
        ours = r.split(" | ")[1]
        assert re.fullmatch(r"[\d.,]+ (ns|us|ms|s|B)", ours), r
    goals = [r for r in rows if "< " in r.split(" | ")[4]]
    assert len(goals) == 2
    assert all(r.rstrip(" |").endswith(("yes", "**NO**")) for r in goals)
    assert list(tmp_path.iterdir()) == []  # the benchmark's database is cleaned up
