"""Benchmark of the long migration (schema 4 -> 5: the derived columns of every record).

Run from the repository root, with slowdown installed (``pip install -e .``) or on PYTHONPATH::

    python -m bench.bench_migrate                 # 90 days, 3 runs of each way (~6 min)
    python -m bench.bench_migrate --days 7        # a week (~30 s)

The schema-4 database (``--days`` of minute records, 2 targets x 6 ops, one record a minute,
60 lognormal latencies each; histograms drawn from a pool of 1,024 per op, so that it builds
in seconds: ``build`` in testdata/migrationdata.py, also used by tests/test_migration.py) is
built once in ``--dir`` and copied before each run. Two ways migrate the copies, interleaved,
the order alternating round by round: ``sql``, release 5's migration as it was (its
statements, then ``UPDATE ... SET`` the ``hist_derived`` SQL function per column and record),
and ``batched``, ``schema.migrate`` as the service runs it now (``derived_rows``, numpy a
batch at a time). Each is timed from ``BEGIN IMMEDIATE`` to the end of ``COMMIT`` (the WAL
checkpoint it triggers included), on a connection set up as the store's (WAL,
``synchronous = FULL``). Then every row of both results is compared, typed (a float by its
bits): the rows must match.
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from slowdown.analysis.store import schema
from testdata.migrationdata import build, connect, copy_database, digest, migrate_sql

# -- the batched way (the other, release 5's, is testdata.migrationdata.migrate_sql) -------------

def migrate_batched(path: Path) -> tuple[float, float, float]:
    """``schema.migrate`` as the store runs it. Returns the seconds from BEGIN to the end of
    COMMIT, the longest gap between two progress reports (the start and the first one
    included) and the seconds from the report ``committing`` to the end."""
    conn = connect(path)
    reports: list[float] = []
    committing = [0.0]

    def progress(p: schema.Progress) -> None:
        reports.append(time.perf_counter())
        if p.committing:
            committing[0] = reports[-1]

    try:
        t0 = time.perf_counter()
        schema.migrate(conn, str(path), target=5, progress=progress)  # migration 5 alone
        t1 = time.perf_counter()
    finally:
        conn.close()
    gaps = np.diff([t0, *reports]) if reports else np.array([t1 - t0])
    return t1 - t0, float(gaps.max()), t1 - committing[0]


# -- the run -------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--days", type=int, default=90)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=None,
                        help="where the databases go (default: a temporary directory)")
    args = parser.parse_args(argv)
    directory = args.dir or Path(tempfile.mkdtemp(prefix="slowdown-bench-migrate-"))
    directory.mkdir(parents=True, exist_ok=True)
    source = directory / f"schema4-{args.days}d.db"
    if not source.exists():
        t = time.perf_counter()
        records = build(source, args.days)
        print(f"built {source}: {records:,} records in {time.perf_counter() - t:.1f} s")
    with sqlite3.connect(source) as conn:
        records = conn.execute("SELECT count(*) FROM minutes").fetchone()[0]
    print(f"database: {records:,} minute records at schema 4, "
          f"{source.stat().st_size / 2**20:.0f} MiB")
    ways = {"sql": lambda p: (migrate_sql(p), None, None), "batched": migrate_batched}
    seconds: dict[str, list[float]] = {way: [] for way in ways}
    gaps, commits = [], []
    digests: dict[str, tuple[int, str]] = {}
    for run in range(args.runs):
        for way in (list(ways) if run % 2 == 0 else list(ways)[::-1]):
            work = directory / f"work-{way}.db"
            copy_database(source, work)
            took, gap, commit = ways[way](work)
            seconds[way].append(took)
            if gap is not None:
                gaps.append(gap)
                commits.append(commit)
            print(f"run {run + 1} {way:8s} {took:7.2f} s  {records / took:9,.0f} records/s")
            if way not in digests:
                digests[way] = digest(work)
    print()
    print("| way | median | records/s | us a record |")
    print("| --- | --- | --- | --- |")
    for way, times in seconds.items():
        median = statistics.median(times)
        print(f"| {way} | {median:.2f} s | {records / median:,.0f} | "
              f"{median / records * 1e6:.1f} |")
    print()
    print(f"batched: longest gap between progress reports {max(gaps):.2f} s; "
          f"commit (with its checkpoint) {max(commits):.2f} s at most")
    same = digests["sql"] == digests["batched"]
    print(f"rows compared: {digests['sql'][0]:,}, "
          f"{'identical' if same else 'DIFFERENT'} ({digests['batched'][1][:16]})")
    if args.dir is None:
        shutil.rmtree(directory)
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
