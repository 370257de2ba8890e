"""How long ``slowdown`` and ``slowdown motd`` take from start to exit, against Python's own
start (``python -c pass``, the interpreter slowdown runs on), in interleaved rounds.

One host's database (two hours of the six ops of one target, the last ten minutes 12 times
slower, its baseline) with the live state of a running service, and a configuration with
[motd] on: ``slowdown`` prints its line, ``slowdown motd`` its notice. Each round runs the
three commands once each, in turn; medians of the rounds are printed with the ratios.

    python -m bench.bench_startup --rounds 31
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from slowdown.analysis.histogram import Histogram
from slowdown.analysis.stats import baseline
from slowdown.analysis.store import Store
from slowdown.analysis.store.live import LiveFile, live_path
from slowdown.analysis.store.records import Record, minute_of

OPS = ("data-read", "data-write", "md-stat", "md-read", "md-delete", "md-write")
MINUTES = 120


def node(directory: Path) -> Path:
    """The database, its live state (this process as the service) and the configuration."""
    db = directory / "h1.db"
    start = minute_of(time.time()) - MINUTES * 60
    rng = random.Random(7)
    records = []
    for m in range(MINUTES + 1):  # to the minute under way: a minute's edge met while
        # it runs leaves the shortest window its records
        factor = 12.0 if m > MINUTES - 10 else 1.0
        for op in OPS:
            h = Histogram()
            for _ in range(60):
                h.record(rng.lognormvariate(-6.2, 0.2) * factor)
            records.append(Record("h1", "work", op, start + 60 * m, h))
    with Store(db) as store:
        store.write(records)
        baseline.rebaseline(store, start + 3600, "first hour", start, start + 3600)
    config = directory / "slowdown.toml"
    config.write_text(f'host = "h1"\ndatabase = {json.dumps(str(db))}\n'
                      '[motd]\nenabled = true\ndeadline = "2s"\n'
                      f'[[target]]\nname = "work"\npath = {json.dumps(str(directory))}\n')
    return config


def fresh_live(config: Path) -> None:
    """The live state of a running service, renewed before each round (fresh for 10 s)."""
    now = time.time()
    db = config.with_name("h1.db")
    LiveFile(live_path(db)).write({
        "host": "h1", "pid": os.getpid(), "started": now - MINUTES * 60, "updated": now,
        "interval": 1.0, "database": str(db), "pending_minutes": 0,
        "records": {"ok": True, "path": str(db), "since": None, "reason": None, "moved": 0,
                    "episodes": []},
        "targets": {"work": {"mode": "probe", "last_tick": now, "ticks": 7200, "skipped": 0,
                             "errors": 0, "abandoned_workers": 0, "in_flight": [],
                             "last": {}, "space": None}}})


def seconds(argv: list[str], expect: str) -> float:
    began = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True)
    took = time.perf_counter() - began
    if done.returncode != 0 or expect not in done.stdout:
        raise SystemExit(f"{' '.join(argv)}: {done.returncode} {done.stdout!r} {done.stderr!r}")
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=31)
    args = parser.parse_args()
    found = shutil.which("slowdown")
    if found is None:
        raise SystemExit("slowdown is not on PATH")
    directory = Path(tempfile.mkdtemp(prefix="slowdown-startup-"))
    try:
        config = node(directory)
        commands = {
            "python -c pass": ([sys.executable, "-c", "pass"], ""),
            "slowdown": ([found, "--config", str(config)], "slowdown median"),
            "slowdown motd": ([found, "motd", "--config", str(config)], "slower than usual"),
        }
        times: dict[str, list[float]] = {k: [] for k in commands}
        for _ in range(3):  # warm: bytecode written, files in the page cache
            fresh_live(config)
            for argv, expect in commands.values():
                seconds(argv, expect)
        for _ in range(args.rounds):
            fresh_live(config)
            for name, (argv, expect) in commands.items():
                times[name].append(seconds(argv, expect))
    finally:
        shutil.rmtree(directory)
    anchor = statistics.median(times["python -c pass"])
    print(f"{sys.executable} (Python {sys.version.split()[0]}), {args.rounds} rounds")
    print(f"{'command':<16} {'median':>9} {'min':>9} {'max':>9}  ratio")
    for name, values in times.items():
        m = statistics.median(values)
        print(f"{name:<16} {m * 1e3:7.1f}ms {min(values) * 1e3:7.1f}ms "
              f"{max(values) * 1e3:7.1f}ms  {m / anchor:5.2f}")


if __name__ == "__main__":
    main()
