"""What per-server records cost: their size in a node's file per day, and the time
``slowdown servers`` takes to read a fleet's files.

Size: one node's file with ``--tens`` ten minutes of data reads over ``--servers`` servers
(600 probes per ten, minute records beside them), against the same minutes without
per-server records; the difference per day, after ``VACUUM`` of both.
Read: ``--nodes`` node files of two hours over ``--servers`` servers, brick 3 planted 12x
in the last ten; ``slowdown servers --db 'DIR/*.db' --since 10m --json`` (and ``--since 2h``)
as a user runs it, the median of ``--rounds`` runs.

    python -m bench.bench_servers_read --dir /var/tmp/slowdown-servers
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from slowdown.analysis.store.server_records import TEN
from testdata import serverkit

START = 1_795_000_200  # a multiple of 600 (2026-11-18 ...)


def vacuumed_size(path: Path) -> int:
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.execute("VACUUM")
    conn.close()
    return path.stat().st_size


def size_per_day(directory: Path, servers: int, tens: int) -> dict:
    with_dir, without_dir = directory / "size-with", directory / "size-without"
    (path,) = serverkit.write_fleet(with_dir, 1, servers, START, tens, seed=1)
    (bare,) = serverkit.write_fleet(without_dir, 1, servers, START, tens, seed=1)
    conn = sqlite3.connect(bare)
    conn.execute("DELETE FROM server_tens")
    conn.execute("DELETE FROM server_series")
    conn.commit()
    conn.close()
    a, b = vacuumed_size(path), vacuumed_size(bare)
    conn = sqlite3.connect(path)
    rows = conn.execute("SELECT count(*) FROM server_tens").fetchone()[0]
    conn.close()
    per_day = (a - b) * 144 / tens
    return {"servers": servers, "tens": tens, "rows": rows, "file": a, "without": b,
            "bytes_per_row": (a - b) / rows, "per_day": per_day}


def read_times(directory: Path, nodes: int, servers: int, rounds: int) -> dict:
    fleet = directory / f"fleet-{nodes}x{servers}"
    if not fleet.is_dir():
        serverkit.write_fleet(fleet, nodes, servers, START, 12, slow={"h3:/bricks/b3": 12.0},
                              slow_tens=[11], seed=2)
    at = f"@{START + 12 * TEN}"
    out = {}
    for since in ("10m", "2h"):
        times = []
        for _ in range(rounds):
            began = time.perf_counter()
            done = subprocess.run(["slowdown", "servers", "--db", f"{fleet}/*.db", "--since",
                                   since, "--at", at, "--json"], capture_output=True, text=True)
            times.append(time.perf_counter() - began)
            if done.returncode != 0:
                raise SystemExit(done.stderr)
        out[since] = statistics.median(times)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", type=Path, default=None)
    ap.add_argument("--servers", type=int, default=100)
    ap.add_argument("--tens", type=int, default=36)
    ap.add_argument("--nodes", type=int, nargs="+", default=[10, 50])
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    directory = args.dir or Path(tempfile.mkdtemp(prefix="slowdown-servers-"))
    try:
        size = size_per_day(directory, args.servers, args.tens)
        print(f"size: {size['rows']} per-server rows in {size['tens']} tens over "
              f"{size['servers']} servers: {size['bytes_per_row']:.0f} bytes a row, "
              f"{size['per_day'] / 1e6:.2f} MB a day per node and op "
              f"(file {size['file']} bytes, {size['without']} without)")
        for nodes in args.nodes:
            times = read_times(directory, nodes, args.servers, args.rounds)
            print(f"read: {nodes} nodes x {args.servers} servers, 2 h: "
                  + ", ".join(f"--since {k} {v:.2f} s" for k, v in times.items())
                  + f" (median of {args.rounds})")
    finally:
        if args.dir is None:
            shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
