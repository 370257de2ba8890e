"""What a publish costs (probe/exporters/publish.py) against the plainest copy of the same file.

For databases of several sizes, in one directory on one filesystem, repeats alternate:

- ours: ``publish()``, the backup API into a temporary file, the header set, the mark, fsync,
  rename, directory fsync;
- anchor: ``shutil.copyfile`` of the database into a temporary file, fsync, rename (what a
  cron job with ``cp`` and ``mv`` does, without its consistency: it may copy half a write).

Prints a Markdown table: median seconds of each, MiB/s of ours, and the ratio ours / anchor.

    python -m bench.bench_publish --runs 3 --dir /var/tmp
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from slowdown.analysis.store import Store
from slowdown.probe.exporters.publish import publish

MIB = 1 << 20


def make_database(path: Path, size: int) -> None:
    """A slowdown database (WAL, checkpointed) of about ``size`` bytes."""
    Store(path).close()
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("CREATE TABLE filler (blob BLOB)")
        conn.executemany("INSERT INTO filler VALUES (?)",
                         [(os.urandom(1 << 16),) for _ in range(size >> 16)])
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()


def plain_copy(source: Path, directory: Path) -> float:
    started = time.perf_counter()
    temp, target = directory / ".plain.tmp", directory / "plain.db"
    shutil.copyfile(source, temp)
    fd = os.open(temp, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(temp, target)
    return time.perf_counter() - started


def one_run(sizes: list[int], repeats: int, base: Path) -> dict[int, tuple[float, float]]:
    results = {}
    with tempfile.TemporaryDirectory(dir=base) as work:
        work = Path(work)
        shared = work / "shared"
        shared.mkdir()
        for size in sizes:
            source = work / f"node-{size}.db"
            make_database(source, size)
            ours, anchor = [], []
            for _ in range(repeats):
                ours.append(publish(source, shared, "n1").seconds)
                anchor.append(plain_copy(source, shared))
            results[size] = (statistics.median(ours), statistics.median(anchor))
            source.unlink()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="16,64,256", help="MiB, comma-separated")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--runs", type=int, default=3, help="fresh processes")
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = [int(s) * MIB for s in args.sizes.split(",")]
    if args.one:
        for size, (ours, anchor) in one_run(sizes, args.repeats, args.dir).items():
            print(size, ours, anchor)
        return
    runs: dict[int, list[tuple[float, float]]] = {s: [] for s in sizes}
    for _ in range(args.runs):
        out = subprocess.run([sys.executable, "-m", "bench.bench_publish", "--one", "--sizes",
                              args.sizes, "--repeats", str(args.repeats), "--dir",
                              str(args.dir)], check=True, capture_output=True, text=True).stdout
        for line in out.splitlines():
            size, ours, anchor = line.split()
            runs[int(size)].append((float(ours), float(anchor)))
    print("| database | publish (ours) | MiB/s | cp + fsync + mv (anchor) | ratio | "
          "ratio min..max |")
    print("| --- | --- | --- | --- | --- | --- |")
    for size, pairs in runs.items():
        ours = statistics.median(p[0] for p in pairs)
        anchor = statistics.median(p[1] for p in pairs)
        ratios = [p[0] / p[1] for p in pairs]
        print(f"| {size // MIB} MiB | {ours:.2f} s | {size / MIB / ours:.0f} | {anchor:.2f} s "
              f"| {statistics.median(ratios):.2f} | {min(ratios):.2f}..{max(ratios):.2f} |")


if __name__ == "__main__":
    main()
