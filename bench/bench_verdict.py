"""What the verdict costs ``slowdown``: the same command with and without a ``[fleet]`` of
published databases, side by side in interleaved rounds, for fleets of several sizes.

Each host file holds two hours of minute records of the six ops of one target (an hour of
baseline, the last ten minutes slower on two hosts in three) and its baseline; this node is
``h001``. Medians of the rounds are printed with the ratio.

    python -m bench.bench_verdict --dir /var/tmp/slowdown-verdict --hosts 50 200 --rounds 5
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import time
from pathlib import Path

import numpy as np

from slowdown.analysis.histogram import Histogram
from slowdown.analysis.stats import baseline
from slowdown.analysis.store import Store
from slowdown.analysis.store.records import Record, minute_of

OPS = ("data-read", "data-write", "md-stat", "md-read", "md-delete", "md-write")
MINUTES = 120


def host_file(path: Path, host: str, slow: float, start: int) -> None:
    rng = np.random.default_rng(sum(map(ord, host)))
    records = []
    for m in range(MINUTES):
        factor = slow if m >= MINUTES - 10 else 1.0
        for op in OPS:
            h = Histogram()
            h.record_many(rng.lognormal(np.log(0.002 * factor), 0.2, 60))
            records.append(Record(host, "work", op, start + 60 * m, h))
    with Store(path) as store:
        store.write(records)
        baseline.rebaseline(store, start + 3600, "first hour", start, start + 3600)


def fleet(directory: Path, hosts: int) -> tuple[Path, Path]:
    """The host files (made once) and two configurations of h001: with and without [fleet]."""
    files = directory / f"hosts-{hosts}"
    if not files.is_dir():
        files.mkdir(parents=True)
        start = minute_of(time.time()) - (MINUTES - 3) * 60
        for i in range(hosts):
            host_file(files / f"h{i:03d}.db", f"h{i:03d}", 10.0 if i % 3 else 1.0, start)
    plain = (f'host = "h001"\ndatabase = "{files / "h001.db"}"\n'
             f'[[target]]\nname = "work"\npath = "{directory}"\n')
    without, with_fleet = directory / f"plain-{hosts}.toml", directory / f"fleet-{hosts}.toml"
    without.write_text(plain)
    with_fleet.write_text(plain + f'[fleet]\ndatabases = "{files}/*.db"\nstale = "1d"\n')
    return without, with_fleet


def seconds(config: Path) -> float:
    began = time.perf_counter()
    subprocess.run(["slowdown", "--config", str(config)], check=True, capture_output=True)
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, default=Path("/var/tmp/slowdown-verdict"))
    parser.add_argument("--hosts", type=int, nargs="+", default=[50, 200])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    configs = {n: fleet(args.dir, n) for n in args.hosts}
    times: dict[tuple[int, str], list[float]] = {}
    for _ in range(args.rounds):
        for n, (without, with_fleet) in configs.items():
            times.setdefault((n, "without"), []).append(seconds(without))
            times.setdefault((n, "with"), []).append(seconds(with_fleet))
    print("hosts  without [fleet]  with [fleet]  ratio")
    for n in args.hosts:
        a, b = (statistics.median(times[(n, k)]) for k in ("without", "with"))
        print(f"{n:>5}  {a:>13.2f} s  {b:>10.2f} s  {b / a:5.2f}")


if __name__ == "__main__":
    main()
