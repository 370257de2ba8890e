"""What the window rule costs the read commands: this tree against a git revision, side by side.

Run from the repository root, with the package installed (``pip install -e .``)::

    python -m bench.bench_windows --base 2bceea3          # docs/BENCHMARKS-read.md (~5 min)
    python -m bench.bench_windows --base 2bceea3 --rounds 3 --days 2

The database (``--days`` days of minute records, 2 targets x 6 ops, 60 lognormal samples a
minute, the first ``--days - 4`` days rolled up into hours, as after the retention) is built
once in ``--dir``. The base revision's ``analysis`` and ``probe`` are exported with ``git
archive`` and imported in its place through ``PYTHONPATH``. Each command runs as a fresh
process (``python -m slowdown.analysis.cli.main``), the two trees interleaved and their order
swapped round by round, after one untimed warm-up; a row is the median of ``--rounds``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DAY = 86400


def build(path: Path, days: int) -> int:
    """The database; returns the end of its data."""
    sys.path.insert(0, str(ROOT))
    from slowdown.analysis.store import Store
    from testdata.datakit import fill, lognormal, utc

    start = utc(2026, 11, 1)
    end = start + days * DAY
    marker = path.with_suffix(f".{days}d")
    if not marker.exists():
        for p in (path, marker):
            if p.exists():
                p.unlink()
        fill(path, start, days * 1440, lognormal(0.002, 0.3), targets=("home", "work"))
        with Store(path) as store:
            store.rollup(end - 4 * DAY)
        marker.touch()
    return end


def export(rev: str, directory: Path) -> Path:
    """``rev``'s packages under ``directory/slowdown``, importable through PYTHONPATH."""
    src, pkg = directory / "src", directory / "pkg" / "slowdown"
    src.mkdir(parents=True)
    pkg.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "analysis", "probe"],
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
    for name in ("analysis", "probe"):
        (pkg / name).symlink_to(src / name)
    return directory / "pkg"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="git revision to compare with")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--days", type=int, default=7)
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "slowdown-bw")
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    db = args.dir / "n1.db"
    end = build(db, args.days)
    since = f"{args.days}d"
    commands = {
        "slowdown": ["--db", str(db), "--at", f"@{end}"],
        f"history --since {since} --every 10m": ["history", "--db", str(db), "--at", f"@{end}",
                                                 "--since", since, "--every", "10m"],
        f"history --since {since} --every 1m": ["history", "--db", str(db), "--at", f"@{end}",
                                                "--since", since, "--every", "1m", "--jobs",
                                                "1"],
        f"report --since {since}": ["report", "--db", str(db), "--at", f"@{end}", "--since",
                                    since, "-o", str(args.dir / "report.html")],
    }
    with tempfile.TemporaryDirectory() as tmp:
        base = export(args.base, Path(tmp))
        trees = {args.base: {**os.environ, "PYTHONPATH": str(base)}, "this tree": dict(os.environ)}
        times: dict[tuple[str, str], list[float]] = {(c, t): [] for c in commands for t in trees}
        lines: dict[tuple[str, str], int] = {}
        for r in range(args.rounds + 1):
            for name, argv in commands.items():
                for tree in (list(trees) if r % 2 else list(trees)[::-1]):
                    t0 = time.perf_counter()
                    done = subprocess.run([sys.executable, "-m", "slowdown.analysis.cli.main",
                                           *argv], env=trees[tree], cwd=tempfile.gettempdir(),
                                          capture_output=True, check=True)
                    if r:
                        times[(name, tree)].append(time.perf_counter() - t0)
                    lines[(name, tree)] = done.stdout.count(b"\n")
    print(f"| command | {args.base} | this tree | ratio | output lines (base / this) |")
    print("| --- | --- | --- | --- | --- |")
    for name in commands:
        a, b = (statistics.median(times[(name, t)]) for t in trees)
        print(f"| `{name}` | {a:.2f} s | {b:.2f} s | {b / a:.2f} | "
              f"{lines[(name, args.base)]} / {lines[(name, 'this tree')]} |")


if __name__ == "__main__":
    main()
