"""Detection and run time of ``slowdown trends`` on a fleet with planted effects.

Run from the repository root with the package installed (``pip install -e .``)::

    python -m bench.bench_trends                      # 16 hosts, 60 days, the six ops
    python -m bench.bench_trends --hosts 4 --per-hour 60

**The fleet** is ``testdata.trendkit.planted``: one file per host (hour records, see that
module for why), five targets: steady; shifted (md-stat 2x from day 12.5); shifted-down
(data-read 0.6x from day 40.25); cyclic (every op: daily 1.6x peak over trough at 02:30 UTC,
Sundays 1.4x); cached (data-read and md-read half as slow for a week from day 30). Built once
into ``--dir`` (kept: a file already there is reused).

**What is measured.** ``slowdown trends --json`` over the merged fleet (``--db 'DIR/*.db'``)
in a fresh process, its wall and CPU time; then over each host file alone (in this process):
planted shifts found within a day and with their factor within 20 %, the factor errors, the
cycles found, and false findings (a change or an episode on a series with nothing planted)
per 100 host-days (all the host's steady series together) and per 100 series-days.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from click.testing import CliRunner

from slowdown.analysis.cli.main import main
from slowdown.analysis.stats import trends
from testdata import trendkit

DAY = 86400


def score(found: list[dict], fleet: trendkit.Fleet) -> dict:
    """Planted shifts found (within a day, factor within 20 %), their factor errors, false
    findings on the steady series, cycles found on the cyclic target."""
    changes = [f for f in found if f["kind"] == "change"]
    hits, errors = 0, []
    for target, op, moment, factor in trendkit.planted_changes(fleet):
        near = [c for c in changes if (c["target"], c["op"]) == (target, op)
                and abs(c["at"] - moment) <= DAY]
        if near:
            error = near[0]["factor"] / factor - 1
            errors.append(error)
            hits += abs(error) <= 0.2
    steady = set(trendkit.steady_pairs(fleet))
    false = [f for f in found if f["kind"] in ("change", "episode")
             and (f["target"], f["op"]) in steady]
    cyclic = [t for t in fleet.targets if t.effects.daily != 1.0]
    wanted = {(t.name, op, kind) for t in cyclic for op in t.ops if op in fleet.ops
              for kind in ("daily", "weekly")}
    cycles = {(f["target"], f["op"], f["kind"]) for f in found
              if f["kind"] in ("daily", "weekly")}
    dips = {(t.name, op) for t in fleet.targets if t.effects.dip for op in t.ops
            if op in fleet.ops and sum(t.effects.dip[:2]) < fleet.days}
    episodes = {(f["target"], f["op"]) for f in found if f["kind"] == "episode"}
    return {"planted": len(trendkit.planted_changes(fleet)), "found": hits,
            "episodes_found": len(dips & episodes), "episodes_planted": len(dips),
            "factor_errors": [round(e, 4) for e in errors], "false": len(false),
            "steady_series": len(steady), "cycles_found": len(wanted & cycles),
            "cycles_planted": len(wanted), "cycles_extra": len(cycles - wanted)}


def run_trends(args: list[str]) -> list[dict]:
    result = CliRunner().invoke(main, ["trends", "--json", *args], catch_exceptions=False)
    if result.exit_code:
        raise SystemExit(result.output)
    return json.loads(result.output)


def timed_fleet_run(directory: Path, fleet: trendkit.Fleet) -> tuple[float, float, list]:
    """Wall and CPU seconds of ``slowdown trends --json`` over the merged fleet, in a fresh
    process, and its findings."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "slowdown.analysis.cli", "trends", "--json",
                           "--db", str(directory / "*.db"), "--at", f"@{fleet.end}"],
                          capture_output=True, text=True, check=True)
    wall = time.perf_counter() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, json.loads(done.stdout)


def minutes_fleet(directory: Path, hosts: int, days: int) -> Path:
    """``hosts`` files of minute records (md-stat and data-read of one target: 2x from day
    12.5, daily 1.6x, Sundays 1.4x): one written, the others copies under their own host
    name. Returns their directory."""
    import shutil

    from slowdown.analysis.store import Store

    effects = trendkit.Effects(shifts=((12.5, 2.0),), daily=1.6, weekly=1.4)
    where = directory / f"minutes-{hosts}h-{days}d"
    where.mkdir(parents=True, exist_ok=True)
    first = where / "m01.db"
    if not first.exists():
        building = where / "m01.building"
        trendkit.write_minutes(building, effects, days=days)
        building.rename(first)
    for i in range(2, hosts + 1):
        path = where / f"m{i:02d}.db"
        if not path.exists():
            building = where / f"m{i:02d}.building"
            shutil.copy(first, building)
            with Store(building) as store:
                store.conn.execute("UPDATE series SET host = ?", (f"m{i:02d}",))
            building.rename(path)
    return where


def main_(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=16)
    parser.add_argument("--days", type=int, default=60)
    parser.add_argument("--per-hour", type=int, default=240)
    parser.add_argument("--sigma", type=float, default=0.4)
    parser.add_argument("--wander", type=float, default=0.0,
                        help="spread of a slow AR(1) wander of each series' log level")
    parser.add_argument("--wander-hours", type=float, default=12.0)
    parser.add_argument("--penalty", type=float, default=None,
                        help="the penalty factor of the runs over each host alone (default: "
                             "stats/trends.py's PENALTY): its margin")
    parser.add_argument("--dir", type=Path, default=Path("/var/tmp/slowdown-trends"))
    parser.add_argument("--minutes", action="store_true",
                        help="time trends over --hosts files of minute records instead "
                             "(two series each; see minutes_fleet)")
    args = parser.parse_args(argv)
    if args.minutes:
        where = minutes_fleet(args.dir, args.hosts, args.days)
        wall, cpu, found = timed_fleet_run(where, trendkit.Fleet((), days=args.days))
        changes = [(f["op"], f["kind"], f["factor"]) for f in found]
        print(f"minutes, {args.hosts} hosts merged ({where}): trends in {wall:.1f} s wall, "
              f"{cpu:.1f} s CPU; {changes}")
        return
    kit = trendkit.planted(hosts=args.hosts, days=args.days)
    fleet = trendkit.Fleet(kit.targets, hosts=args.hosts, days=args.days,
                           per_hour=args.per_hour, sigma=args.sigma, wander=args.wander,
                           wander_hours=args.wander_hours)
    directory = args.dir / (f"{args.hosts}h-{args.days}d-{args.per_hour}ph-{args.sigma:g}s"
                            + (f"-{args.wander:g}w{args.wander_hours:g}h" if args.wander else ""))
    began = time.perf_counter()
    paths = trendkit.write_fleet(directory, fleet)
    print(f"fleet: {directory} ({len(paths)} hosts; built or found in "
          f"{time.perf_counter() - began:.0f} s; "
          f"{sum(p.stat().st_size for p in paths) / 2**20:.0f} MiB)")
    wall, cpu, found = timed_fleet_run(directory, fleet)
    merged = score(found, fleet)
    print(f"merged fleet: trends in {wall:.1f} s wall, {cpu:.1f} s CPU; {json.dumps(merged)}")
    if args.penalty is not None:
        trends.PENALTY = args.penalty
    print(f"penalty {trends.PENALTY:g} * noise^2 * log(n) for the hosts alone")
    totals = {"found": 0, "planted": 0, "false": 0, "errors": [], "cycles": 0, "cycles_of": 0,
              "extra": 0, "episodes": 0, "episodes_of": 0}
    for path in paths:
        one = score(run_trends(["--db", str(path), "--at", f"@{fleet.end}"]), fleet)
        print(f"{path.stem}: {json.dumps(one)}")
        totals["found"] += one["found"]
        totals["planted"] += one["planted"]
        totals["false"] += one["false"]
        totals["errors"] += one["factor_errors"]
        totals["cycles"] += one["cycles_found"]
        totals["cycles_of"] += one["cycles_planted"]
        totals["extra"] += one["cycles_extra"]
        totals["episodes"] += one["episodes_found"]
        totals["episodes_of"] += one["episodes_planted"]
    host_days = len(paths) * fleet.days
    series_days = host_days * len(trendkit.steady_pairs(fleet))
    worst = max((abs(e) for e in totals["errors"]), default=float("nan"))
    print(f"hosts alone: shifts found {totals['found']} of {totals['planted']}, largest "
          f"factor error {worst:.1%}; cycles found {totals['cycles']} of "
          f"{totals['cycles_of']} (+{totals['extra']} not planted); caching weeks found "
          f"{totals['episodes']} of {totals['episodes_of']}; false changes "
          f"{totals['false']}: {100 * totals['false'] / host_days:.2f} per 100 host-days "
          f"({100 * totals['false'] / series_days:.3f} per 100 series-days)")
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main_()
