"""Where a running service's CPU goes, thread by thread: two builds side by side.

    python -m bench.service_threads --config bench-service.toml \\
        --python /venv-a/bin/python --python /venv-b/bin/python --pairs 2

Each ``--python`` is an interpreter with one build of slowdown installed. The builds run the
service in turn (a, b, a, b, ...), each for ``--warmup`` then ``--window`` seconds, on the same
configuration (``bench_service --keep`` leaves one prepared); over the window every thread of
the service and of its workers is measured from ``/proc/PID/task/TID``: CPU from
``schedstat`` (nanoseconds on a CPU, not the tick-sampled ``stat`` times) and wake-ups from
``voluntary_ctxt_switches``. Alternating the builds puts a shared machine's drift on both
alike; compare builds within a pair. One JSON line per run on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time
from pathlib import Path


def threads(pids: list[int]) -> dict[tuple[int, int], tuple[int, int]]:
    """(pid, tid) -> (ns on a CPU, voluntary context switches)."""
    out = {}
    for pid in pids:
        try:
            tids = sorted(map(int, os.listdir(f"/proc/{pid}/task")))
        except OSError:
            continue
        for tid in tids:
            try:
                ns = int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
                status = Path(f"/proc/{pid}/task/{tid}/status").read_text().splitlines()
            except OSError:
                continue
            switches = next(int(line.split()[1]) for line in status
                            if line.startswith("voluntary_ctxt_switches:"))
            out[(pid, tid)] = (ns, switches)
    return out


def children(pid: int) -> list[int]:
    """The processes any thread of ``pid`` started (the workers)."""
    found = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            found += map(int, Path(f"/proc/{pid}/task/{tid}/children").read_text().split())
        except OSError:
            continue
    return found


def measure(python: str, config: Path, warmup: float, window: float) -> dict:
    duration = int(warmup + window + 10)
    service = subprocess.Popen(
        [python, "-m", "slowdown.probe.command.main", "--config", str(config), "run", "--duration",
         f"{duration}s"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd="/")
    try:
        time.sleep(warmup)
        pids = [service.pid, *children(service.pid)]
        before, start = threads(pids), time.monotonic()
        time.sleep(window)
        after, span = threads(pids), time.monotonic() - start
    finally:
        service.wait()
    rows = [{"pid": pid, "tid": tid, "service": pid == service.pid,
             "cpu_pct": round((after[k][0] - before[k][0]) / 1e9 / span * 100, 4),
             "wakeups_per_s": round((after[k][1] - before[k][1]) / span, 2)}
            for k in sorted(after) if k in before for pid, tid in [k]]
    own = sum(r["cpu_pct"] for r in rows if r["service"])
    workers = sum(r["cpu_pct"] for r in rows if not r["service"])
    return {"python": python, "service_pct": round(own, 3), "workers_pct": round(workers, 3),
            "total_pct": round(own + workers, 3), "threads": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--python", action="append", required=True,
                        help="an interpreter with one build installed (give two)")
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--warmup", type=float, default=30.0)
    parser.add_argument("--window", type=float, default=150.0)
    args = parser.parse_args()
    for _ in range(args.pairs):
        for python in args.python:
            print(json.dumps(measure(python, args.config, args.warmup, args.window)), flush=True)


if __name__ == "__main__":
    main()
