"""What ``[baseline] expected = "weekly"`` costs: ``slowdown`` and ``slowdown check`` over a
month's database with the setting on and off, in interleaved rounds (medians), and the
maintenance that makes the month's baselines with and without their hours of the week.

One host's file of minute records (testdata/trendkit.py ``write_minutes``: 60 samples a
minute, the six ops of one target, a nightly job 3x from 02:00 to 04:00 UTC) ending at the
minute this runs, its initial baseline made by the service's maintenance from the month with
the hours of the week kept (so both settings read the same file, the same flat baseline).

    python -m bench.bench_weekly --rounds 11
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from slowdown.analysis.stats import baseline
from slowdown.analysis.store import Store
from slowdown.analysis.store.records import minute_of
from testdata import trendkit

DAY = 86400


def month(directory: Path, days: int, ops: tuple[str, ...]) -> tuple[Path, float]:
    """The database of ``days`` of minutes ending now; returns it and the moment it ends."""
    db = directory / "m01.db"
    now = minute_of(time.time())
    trendkit.write_minutes(db, trendkit.Effects(nightly=(2.0, 4.0, 3.0)), ops=ops,
                           start=now - days * DAY, days=days)
    return db, now


def maintained(db: Path, now: float, weekly: str | None) -> float:
    """Seconds the maintenance takes to make the baselines of a copy of ``db``."""
    copy = db.with_name(f"{db.stem}-{weekly or 'flat'}.db")
    shutil.copy(db, copy)
    t0 = time.perf_counter()
    with Store(copy) as store:
        made = baseline.maintain(store, now, 86400.0, (), dt.timezone.utc, weekly)
    seconds = time.perf_counter() - t0
    assert made, "no baseline made"
    if weekly is not None:
        shutil.copy(copy, db)  # the file both settings read: its hours of the week kept
    copy.unlink()
    return seconds


def config(directory: Path, db: Path, expected: str) -> Path:
    path = directory / f"{expected}.toml"
    path.write_text(f"host = \"m01\"\ndatabase = {json.dumps(str(db))}\n"
                    f"[[target]]\nname = \"work\"\npath = {json.dumps(str(directory))}\n"
                    f"[baseline]\nexpected = \"{expected}\"\nzone = \"UTC\"\n")
    return path


def in_process(db: Path, now: float, expected: str, rounds: int) -> list[float]:
    """Seconds of the work behind ``slowdown``'s line in this process (no start-up): the
    book made and the three windows of the six ops divided by their expected values."""
    from slowdown.analysis.stats.baseline import BaselineBook
    from slowdown.analysis.stats.slowdown import target_slowdowns

    out = []
    with Store(db, readonly=True) as store:
        for _ in range(rounds):
            t0 = time.perf_counter()
            book = BaselineBook([store], expected, zone=("UTC", dt.timezone.utc))
            target_slowdowns([store], book, ["work"], {"work": trendkit.OPS},
                             [60.0, 600.0, 3600.0], "median", now)
            out.append(time.perf_counter() - t0)
    return out


def timed(argv: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--ops", default=",".join(trendkit.OPS))
    args = parser.parse_args()
    ops = tuple(args.ops.split(","))
    exe = str(Path(sys.executable).with_name("slowdown"))
    with tempfile.TemporaryDirectory(prefix="bench-weekly-") as tmp:
        directory = Path(tmp)
        t0 = time.perf_counter()
        db, now = month(directory, args.days, ops)
        print(f"database: {args.days} days of minutes, {len(ops)} ops, "
              f"{db.stat().st_size / 2**20:.0f} MiB, written in {time.perf_counter() - t0:.0f} s")
        print(f"maintenance making the month's baselines: flat {maintained(db, now, None):.2f} s,"
              f" weekly {maintained(db, now, 'UTC'):.2f} s")
        commands = {}
        for expected in ("same", "weekly"):
            cfg = str(config(directory, db, expected))
            commands[("slowdown", expected)] = [exe, "--config", cfg]
            commands[("slowdown -v", expected)] = [exe, "--config", cfg, "-v"]
            commands[("slowdown check", expected)] = [exe, "--config", cfg, "check"]
        said = json.loads(subprocess.run(commands[("slowdown", "weekly")] + ["--json"],
                                         capture_output=True, text=True, check=True).stdout)
        bases = [o.get("expected_basis") for t in said["targets"] for w in t["windows"]
                 for o in w["ops"]]
        print(f"the weekly expected value in use: {bases.count('weekly')} of {len(bases)} "
              "ops and windows")
        inner = {e: in_process(db, now, e, args.rounds * 3) for e in ("same", "weekly")}
        times: dict[tuple[str, str], list[float]] = {k: [] for k in commands}
        for r in range(args.rounds + 2):  # two rounds of warm-up
            keys = list(commands) if r % 2 else list(reversed(list(commands)))
            for key in keys:
                t = timed(commands[key])
                if r >= 2:
                    times[key].append(t)
    print(f"{'in process':<16} {statistics.median(inner['same']) * 1e3:>9.1f} "
          f"{statistics.median(inner['weekly']) * 1e3:>10.1f} "
          f"{statistics.median(inner['weekly']) / statistics.median(inner['same']):>6.2f}"
          "   (the line's windows and expected values, no start-up)")
    print(f"{'command':<16} {'flat ms':>9} {'weekly ms':>10} {'ratio':>6}   "
          f"(medians of {args.rounds} rounds; min..max)")
    for name in ("slowdown", "slowdown -v", "slowdown check"):
        flat, weekly = times[(name, "same")], times[(name, "weekly")]
        mf, mw = statistics.median(flat) * 1e3, statistics.median(weekly) * 1e3
        print(f"{name:<16} {mf:>9.1f} {mw:>10.1f} {mw / mf:>6.2f}   "
              f"({min(flat) * 1e3:.0f}..{max(flat) * 1e3:.0f}; "
              f"{min(weekly) * 1e3:.0f}..{max(weekly) * 1e3:.0f})")


if __name__ == "__main__":
    main()
