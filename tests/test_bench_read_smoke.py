"""The read-side benchmark still runs: its quick mode builds, times and reports, and a later
run reuses its database."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAD = "| command | median | p90 | min..max | CPU | peak RSS | goal | met? |"
TIME = r"[\d.,]+ (ms|s)"
REUSED = """
import json, sys
from pathlib import Path
from bench.bench_read import QUICK, database
db, info, built = database(Path(sys.argv[1]), QUICK.days, rebuild=False)
print(json.dumps([db.name, info["records"], built]))
"""


def run_quick(directory: Path) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-m", "bench.bench_read", "--quick", "--dir", str(directory)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


@pytest.mark.slow
def test_bench_read_quick_prints_its_table_and_reuses_its_database(tmp_path):
    lines = run_quick(tmp_path)
    assert any(line.startswith("database: ") and "(built now)" in line for line in lines)
    assert any("34,560 minute records" in line for line in lines)
    assert HEAD in lines
    rows = []
    for line in lines[lines.index(HEAD) + 2:]:
        if not line.startswith("| `"):
            break
        rows.append(line)
    labels = [r.split("`")[1] for r in rows]
    assert any(label.startswith("slowdown --db DB --at @END") or
               label.startswith("python3 -m slowdown.analysis.cli --db DB --at @END")
               for label in labels)
    assert any(label.endswith("history --db DB --at @END --since 2d --every 1m > /dev/null")
               for label in labels)
    assert any(label.endswith("--since 2d --every 1m --jobs 1 > /dev/null") for label in labels)
    assert 'python3 -c "import click, sqlite3"' in labels
    assert "python3 -c pass" in labels
    for r in rows:
        cells = r.split(" | ")
        assert re.fullmatch(TIME, cells[1]) and re.fullmatch(TIME, cells[2]), r
        assert re.fullmatch(TIME, cells[4]), r  # CPU
    goals = [r for r in rows if "<= " in r.split(" | ")[6]]
    assert len(goals) == 1  # the uptime-like default; the history goal is for 30 days
    assert goals[0].rstrip(" |").endswith(("yes", "**NO**"))
    assert any(line.startswith("| `") and " / `" in line for line in lines)  # the ratios

    assert sorted(p.name for p in tmp_path.glob("*.db*")) == ["read-2d-2x6.db",
                                                              "read-2d-2x6.db.json"]
    # The benchmark's own cache, asked in a process of its own (tests never import bench/).
    done = subprocess.run(
        [sys.executable, "-c", REUSED, str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=True,
    )
    name, records, built = json.loads(done.stdout)
    assert not built and name == "read-2d-2x6.db" and records == 34_560
