"""Time and peak memory of ``slowdown report`` over 60 days of a fleet, with and without its
long-period figures, and of ``slowdown trends`` over the same fleet.

Run from the repository root with the package installed (``pip install -e .``)::

    python -m bench.bench_report_long --hosts 16 --runs 3
    python -m bench.bench_report_long --hosts 128 --runs 2 --dir /var/tmp/slowdown-longview

**The fleet** is ``testdata.trendkit.planted`` (one file per host of hour records, five
targets, the six ops; see ``bench/bench_trends.py``) with the baselines the service would
have made (``trendkit.maintain_baselines``), in ``--dir``/``<hosts>h-<days>d``: built once
and kept (files already there are reused as they are).

**What is measured**, each as a fresh process (``/usr/bin/time``: wall and peak RSS), in
rounds that alternate the three so that the machine's load falls on all alike:
``slowdown report --no-long`` and ``slowdown report`` (long figures, on from 14 days) over
``--db 'DIR/*.db' --since 60d``, and ``slowdown trends --json`` over the same files. Medians
(and min..max) of ``--runs`` rounds.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

from testdata import trendkit

KINDS = {"report without long figures": ("report", "--no-long"),
         "report with long figures": ("report", "--long"),
         "trends --json": ("trends", "--json")}


def fleet_dir(directory: Path, hosts: int, days: int) -> tuple[Path, trendkit.Fleet]:
    kit = trendkit.planted(hosts=hosts, days=days)
    where = directory / f"{hosts}h-{days}d"
    began = time.perf_counter()
    fresh = not where.exists() or len(list(where.glob("*.db"))) < hosts
    paths = trendkit.write_fleet(where, kit)
    if fresh:
        trendkit.maintain_baselines(paths, kit)
    print(f"fleet: {where} ({len(paths)} hosts, "
          f"{sum(p.stat().st_size for p in paths) / 2**20:.0f} MiB; "
          f"{'built' if fresh else 'found'} in {time.perf_counter() - began:.0f} s)")
    return where, kit


def once(kind: tuple[str, str], where: Path, kit: trendkit.Fleet, days: int,
         out: Path) -> tuple[float, float, int]:
    """Wall and CPU seconds (user and system, forked children included) and peak RSS (KiB)
    of one run."""
    command, flag = kind
    argv = ["/usr/bin/time", "-f", "%M %U %S", sys.executable, "-m", "slowdown.analysis.cli",
            command, "--db", str(where / "*.db"), "--at", f"@{kit.end}", "--since",
            f"{days}d", flag]
    if command == "report":
        argv += ["-o", str(out)]
    began = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True)
    took = time.perf_counter() - began
    if done.returncode:
        raise SystemExit(f"{' '.join(argv)} failed: {done.stderr[-2000:]}")
    rss, user, system = done.stderr.strip().splitlines()[-1].split()
    return took, float(user) + float(system), int(rss)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=16)
    parser.add_argument("--days", type=int, default=60)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=Path("/var/tmp/slowdown-longview"))
    args = parser.parse_args(argv)
    where, kit = fleet_dir(args.dir, args.hosts, args.days)
    results: dict[str, list[tuple[float, float, int]]] = {k: [] for k in KINDS}
    for r in range(args.runs):
        for name, kind in KINDS.items():
            got = once(kind, where, kit, args.days, args.dir / f"report-{args.hosts}h.html")
            results[name].append(got)
            print(f"round {r + 1}: {name}: {got[0]:.1f} s wall, {got[1]:.1f} s CPU, "
                  f"{got[2] / 1024:.0f} MiB", flush=True)
    print(f"machine: Python {platform.python_version()}, {platform.machine()}, "
          f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}")
    print(f"| {args.hosts} hosts x {args.days} days | wall, median (min..max) | "
          "CPU, median (min..max) | peak RSS, median (min..max) |")
    print("| --- | --- | --- | --- |")

    def cell(values: list[float], unit: str, form: str = ".1f") -> str:
        return (f"{statistics.median(values):{form}} {unit} ({min(values):{form}}.."
                f"{max(values):{form}})")

    for name, got in results.items():
        print(f"| {name} | {cell([g[0] for g in got], 's')} | {cell([g[1] for g in got], 's')}"
              f" | {cell([g[2] / 1024 for g in got], 'MiB', '.0f')} |")
    with_, without = (results[k] for k in list(KINDS)[1::-1])
    print(f"| with / without long figures, per round | "
          f"{cell([a[0] / b[0] for a, b in zip(with_, without)], 'x', '.2f')} | "
          f"{cell([a[1] / b[1] for a, b in zip(with_, without)], 'x', '.2f')} | "
          f"{cell([a[2] / b[2] for a, b in zip(with_, without)], 'x', '.2f')} |")

if __name__ == "__main__":
    main()
