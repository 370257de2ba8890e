"""Benchmark of cluster views: each read command over a fleet of 1 to 512 host files.

Run from the repository root with the package installed (``pip install -e .``)::

    python -m bench.bench_fleet                 # the figures of docs/BENCHMARKS-fleet.md
    python -m bench.bench_fleet --quick         # 2 days, 1-4 hosts, 64 small files (smoke)

**The fleet.** One host of 30 days (2 targets x 6 ops, 60 lognormal samples per op and
minute) is written by ``bench.read_database.build`` (through ``Store.write`` a day at a time,
``baseline.maintain`` after each day as the service runs it: the initial baseline after the
first day, the monthly one when February begins). Its minutes older than ``--minute-days``
are rolled up into hours (the service's retention, set short: 512 files of 30 days of
minutes would take 94 GB). Each host file is a copy of it, made different: its latencies
scaled per target by a whole number of histogram buckets (up to +-30 %, exactly: bucket
indices, sums and extremes move together), a start up to a day later, 1 % of its minutes
missing at random, every seventh host a missing hour, its host name; its baselines made anew
from its own data as the service would (initial after its first day, monthly on February 1),
and every eighth host rebaselined on February 10 (``slowdown rebaseline``). Files are built
once into ``--dir`` and reused; a fleet of N hosts is a directory of N links to them.

**The commands**, each in a fresh process at the fleet's last minute (``--at @END``):
``slowdown`` and ``slowdown check`` at N = 1, 8, 64, 512 (``--offset`` seconds earlier: by
default four minutes, so that the moment is six minutes into a ten, a typical one, not on a
ten-minute boundary, where a cluster's windows read the fewest records); ``history --since
7d --every 10m`` and ``report --since 7d`` at N = 1, 8, 64, 128; and 4,096 small host
files (two hours each, with a baseline) read by ``slowdown`` and ``check`` under ``ulimit -n
256``. Each cell is the median of ``--runs`` rounds, the commands interleaved in an order
rotated each round; peak RSS the largest GNU time saw in those runs. History and report at
128 hosts run for minutes each: by default once (``--wide-runs``), slowdown and check three
times (``--runs``).

**Before and after.** ``--before DIR`` times an older source tree too (``git archive
<commit> | tar -x -C DIR``), each of its commands beside the same command of this tree in
every round, with this interpreter and ``PYTHONPATH`` naming a package directory made under
``--dir`` whose ``slowdown.analysis`` and ``slowdown.probe`` are that tree's. A tree older
than the fleet's schema reads the same fleet kept at its own schema: ``--before-fleet DIR``
(a copy of ``--dir``'s ``hosts`` and ``fleet.json`` made before this tree migrated them;
``--dir``'s host files of an older schema are migrated in place, as the service does, not
built again). ``--kinds`` keeps some of the commands (for instance
``slowdown,check,history,report``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from bench import read_database, read_timing
from bench.read_database import utc_now
from bench.read_timing import Command, fmt_time, source_state
from slowdown.analysis.histogram import Histogram, codec
from slowdown.analysis.stats import baseline
from slowdown.analysis.store import Store, schema
from slowdown.analysis.store.records import HOUR, MINUTE, Record

DAY = 86400
T0 = 1_768_608_000  # 2026-01-17T00:00:00Z: 30 days that hold the start of February
FEBRUARY = 1_769_904_000  # 2026-02-01T00:00:00Z
REBASELINED = FEBRUARY + 9 * DAY + 12 * HOUR  # 2026-02-10 12:00 UTC
SEED = 20260117
DEFAULT_DIR = Path("/var/tmp/slowdown-fleet")
SMALL_NOFILE = 256
GIB = 2 ** 30


def fleet_params(days: int, minute_days: int) -> dict:
    return {"days": days, "t0": T0, "seed": SEED, "minute_days": minute_days,
            "perturbation": 1, "schema": schema.VERSION}


# -- the fleet ---------------------------------------------------------------------------------

def base(directory: Path, days: int, minute_days: int) -> Path:
    """The one host every host file is a copy of: 30 days, minutes of the last
    ``minute_days`` only (older ones rolled up into hours), vacuumed."""
    rolled = directory / f"base-{days}d-{minute_days}dmin.db"
    if rolled.exists():
        return rolled
    raw = directory / f"base-{days}d.db"
    if not raw.exists():
        print(f"building the base host ({days} days; a few minutes)", file=sys.stderr)
        read_database.build(raw, days, T0, "base", SEED)
    building = rolled.with_name(rolled.name + ".building")
    shutil.copy(raw, building)
    with Store(building) as store:
        store.rollup(T0 + (days - minute_days) * DAY)
        store.conn.execute("VACUUM")
        store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    os.replace(building, rolled)
    return rolled


def shift_blob(blob: bytes, buckets: int) -> bytes:
    """The histogram with every value moved up ``buckets`` buckets (its scale's)."""
    flags = blob[1]
    offset = 3 + 8 * bool(flags & 0x08) + 32 * bool(flags & 0x10)
    pairs = np.frombuffer(blob, codec.pair_dtype(flags), offset=offset).copy()
    pairs["i"] += buckets
    return blob[:offset] + pairs.tobytes()


def make_host(source: Path, path: Path, i: int, days: int) -> None:
    """Host ``i``: a copy of ``source`` made different (see the module's docstring)."""
    rng = np.random.default_rng([SEED, i])
    building = path.with_name(path.name + ".building")
    shutil.copy(source, building)
    host = path.stem
    first = T0 + int(rng.integers(0, 5)) * 6 * HOUR
    with Store(building) as store:
        conn = store.conn
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("UPDATE series SET host = ?", (host,))
        for table in ("minutes", "hours"):
            conn.execute(f"DELETE FROM {table} WHERE start < ?", (first,))
        keys = conn.execute("SELECT series, start FROM minutes").fetchall()
        gone = rng.choice(len(keys), len(keys) // 100, replace=False)
        conn.executemany("DELETE FROM minutes WHERE series = ? AND start = ?",
                         [keys[k] for k in gone.tolist()])
        if i % 7 == 3:  # an hour without any record (the host was down)
            hour = T0 + days * DAY - int(rng.integers(3, 40)) * HOUR
            conn.execute("DELETE FROM minutes WHERE start >= ? AND start < ?", (hour, hour + HOUR))
        for target in read_database.TARGETS:
            buckets = int(rng.integers(-12, 13))
            factor = 2.0 ** (buckets / 2 ** 5)
            for table in ("minutes", "hours"):
                rows = conn.execute(
                    f"SELECT r.series, r.start, r.hist FROM {table} r JOIN series s "
                    "ON s.id = r.series WHERE s.target = ?", (target,)).fetchall()
                conn.executemany(
                    f"UPDATE {table} SET hist = ?, sum = sum * ?, sumsq = sumsq * ?, "
                    "min = min * ?, max = max * ? WHERE series = ? AND start = ?",
                    [(shift_blob(blob, buckets), factor, factor * factor, factor, factor,
                      sid, start) for sid, start, blob in rows])
        for table in ("minutes", "hours"):
            schema.FILLS[5].run(conn, table, lambda rows: None)
        conn.execute("DELETE FROM baselines")
        conn.execute("DELETE FROM baseline_histograms")
        conn.execute("COMMIT")
        baseline.maintain(store, first + DAY, DAY, read_database.STATISTICS)
        baseline.maintain(store, FEBRUARY, DAY, read_database.STATISTICS)
        if i % 8 == 5:
            baseline.rebaseline(store, REBASELINED, "new OSTs", REBASELINED - DAY,
                                statistics=read_database.STATISTICS)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    os.replace(building, path)


def hosts(directory: Path, count: int, days: int, minute_days: int) -> list[Path]:
    """The first ``count`` host files (built when missing or of other parameters)."""
    store = directory / "hosts"
    meta = directory / "fleet.json"
    wanted = fleet_params(days, minute_days)
    found = json.loads(meta.read_text()).get("params") if meta.exists() else wanted
    if found != wanted:
        if {**found, "schema": wanted["schema"]} == wanted and found["schema"] < wanted["schema"]:
            migrate_all(sorted(store.glob("h*.db")))  # as the service upgrades them
        else:
            shutil.rmtree(store, ignore_errors=True)  # ours: made by this script
    store.mkdir(parents=True, exist_ok=True)
    meta.write_text(json.dumps({"params": wanted}) + "\n")
    source = base(directory, days, minute_days)
    paths = [store / f"h{i:04d}.db" for i in range(count)]
    began, made = time.perf_counter(), 0
    for i, path in enumerate(paths):
        if not path.exists():
            make_host(source, path, i, days)
            made += 1
            if made % 32 == 0:
                print(f"{made} host files made ({time.perf_counter() - began:.0f} s)",
                      file=sys.stderr)
    return paths


def migrate_all(paths: list[Path]) -> None:
    """Host files of an older schema brought to this one, each opened once for writing as the
    service opens it after an upgrade (two at a time)."""
    from concurrent.futures import ProcessPoolExecutor

    began = time.perf_counter()
    with ProcessPoolExecutor(2) as pool:
        for k, _ in enumerate(pool.map(_migrate_one, paths, chunksize=8), start=1):
            if k % 64 == 0:
                print(f"{k} host files migrated ({time.perf_counter() - began:.0f} s)",
                      file=sys.stderr)


def _migrate_one(path: Path) -> None:
    with Store(path) as store:
        store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def linked(directory: Path, name: str, paths: list[Path]) -> Path:
    """A directory of links to ``paths``: the fleet a glob names."""
    where = directory / name
    if where.exists() and len(list(where.iterdir())) == len(paths):
        return where
    shutil.rmtree(where, ignore_errors=True)
    where.mkdir()
    for path in paths:
        (where / path.name).symlink_to(path)
    return where


def small_hosts(directory: Path, count: int, end: int) -> Path:
    """``count`` small host files: two hours each, a baseline from the first."""
    where = directory / f"small{count}"
    if where.exists() and len(list(where.glob("*.db"))) == count:
        return where
    shutil.rmtree(where, ignore_errors=True)
    where.mkdir(parents=True)
    one = directory / "small-one.db"
    if one.exists():
        one.unlink()
    rng = np.random.default_rng(SEED)
    with Store(one) as store:
        batch = []
        for m in range(120):
            for target in read_database.TARGETS:
                for op in read_database.OPS:
                    h = Histogram()
                    h.record_many(rng.lognormal(np.log(2e-4), 0.5, 60))
                    batch.append(Record("s", target, op, end - 2 * HOUR + m * MINUTE, h))
        store.write(batch)
        baseline.rebaseline(store, end - HOUR, "bench", end - 2 * HOUR, end - HOUR)
        store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    for i in range(count):
        path = where / f"s{i:04d}.db"
        shutil.copy(one, path)
        with sqlite3.connect(path) as conn:
            conn.execute("UPDATE series SET host = ?", (path.stem,))
    return where


# -- the commands ------------------------------------------------------------------------------

def low_nofile() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (SMALL_NOFILE, SMALL_NOFILE))


def before_package(directory: Path, tree: Path) -> Path:
    """A directory for ``PYTHONPATH`` whose ``slowdown`` package is the source ``tree``'s."""
    if not (tree / "analysis" / "cli" / "main.py").is_file():
        raise SystemExit(f"{tree}: not a slowdown source tree (no analysis/cli/main.py)")
    where = directory / "before-package"
    package = where / "slowdown"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text("")
    for name in ("analysis", "probe"):
        link = package / name
        if link.is_symlink():
            link.unlink()  # ours: made here
        link.symlink_to(tree.resolve() / name)
    return where


def command_rows(directory: Path, sizes: list[int], wide: list[int], small: Path | None,
                 end: int, env: dict[str, str], tag: str = "", offset: int = 0
                 ) -> list[tuple[str, int, Command]]:
    """(kind, hosts, command) of every command timed; ``tag``: a prefix of the keys;
    ``offset``: seconds before ``end`` at which ``slowdown`` and ``check`` look."""
    python = [sys.executable, "-m", "slowdown.analysis.cli"]
    out = directory / f"report{tag}.html"
    rows = []
    for n in sizes:
        at = ["--db", str(directory / f"n{n}" / "*.db"), "--at", f"@{end - offset}"]
        rows.append(("slowdown", n, Command(f"{tag}slowdown-{n}", "slowdown", [*python, *at],
                                            env)))
        rows.append(("check", n, Command(f"{tag}check-{n}", "check", [*python, "check", *at],
                                         env)))
    for n in wide:
        at = ["--db", str(directory / f"n{n}" / "*.db"), "--at", f"@{end}"]
        rows.append(("history", n, Command(f"{tag}history-{n}", "history", [
            *python, "history", *at, "--since", "7d", "--every", "10m"], env)))
        rows.append(("report", n, Command(f"{tag}report-{n}", "report", [
            *python, "report", *at, "--since", "7d", "-o", str(out)], env)))
    if small is not None:
        count = len(list(small.glob("*.db")))
        at = ["--db", str(small / "*.db"), "--at", f"@{end}"]
        rows.append(("slowdown-small", count, Command(
            f"{tag}small-slowdown-{count}", "slowdown", [*python, *at], env)))
        rows.append(("check-small", count, Command(
            f"{tag}small-check-{count}", "check", [*python, "check", *at], env)))
    return rows


def run_once(command: Command, limited: bool, scratch: Path) -> tuple[float, int | None]:
    """Wall time from the fork to the exit, and peak RSS (GNU time's), of one run."""
    rss_file = scratch / "rss.txt"
    began = time.perf_counter()
    done = subprocess.run(["/usr/bin/time", "-o", str(rss_file), "-f", "%M", *command.argv],
                          env=command.env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, preexec_fn=low_nofile if limited else None)
    took = time.perf_counter() - began
    if done.returncode not in (0, 1, 2) or (done.returncode and "check" not in command.key):
        raise SystemExit(f"{' '.join(command.argv)}: exit {done.returncode}: "
                         f"{done.stderr.decode(errors='replace')[-2000:]}")
    text = rss_file.read_text().strip().splitlines()[-1:] or [""]
    return took, int(text[0]) * 1024 if text[0].isdigit() else None


def measure(rows: list[tuple[str, int, Command]], runs: int, wide_runs: int,
            scratch: Path) -> tuple[dict, dict]:
    """``runs`` rounds of slowdown and check, the first ``wide_runs`` of them with history
    and report too; the commands of a round in an order rotated round by round."""
    times: dict[str, list[float]] = {c.key: [] for _, _, c in rows}
    memory: dict[str, int | None] = {c.key: None for _, _, c in rows}
    for r in range(max(runs, wide_runs)):
        now = [row for row in rows if r < (wide_runs if row[0] in ("history", "report")
                                           else runs)]
        shift = r % len(now)
        for kind, _, command in now[shift:] + now[:shift]:
            took, rss = run_once(command, kind.endswith("-small"), scratch)
            times[command.key].append(took)
            if rss is not None:
                memory[command.key] = max(memory[command.key] or 0, rss)
        print(f"round {r + 1} done", file=sys.stderr)
    return times, memory


# -- the report --------------------------------------------------------------------------------

GOALS = {  # kind: (hosts, seconds or None, RSS bytes, what)
    "slowdown": (512, None, GIB, "within 10x of one host, under 1 GiB"),
    "check": (512, None, GIB, "within 10x of one host, under 1 GiB"),
    "history": (128, 10.0, GIB, "under 10 s and 1 GiB"),
    "report": (128, 30.0, 2 * GIB, "under 30 s and 2 GiB"),
}


def cell(times: list[float], rss: int | None) -> str:
    return f"{fmt_time(statistics.median(times))} / " + \
        ("n/a" if rss is None else f"{rss / 2**20:,.0f} MiB")


def tables(rows, times, memory) -> str:
    kinds = list(dict.fromkeys(kind for kind, _, _ in rows))
    sizes = sorted({n for _, n, _ in rows})
    lines = ["| command | " + " | ".join(f"{n} host{'s' if n > 1 else ''}" for n in sizes)
             + " |", "|---|" + "---:|" * len(sizes)]
    by = {(kind, n): c for kind, n, c in rows}
    for kind in kinds:
        label = next(c.label for k, _, c in rows if k == kind)
        extra = {"history": " --since 7d --every 10m", "report": " --since 7d"}.get(kind, "")
        if kind.endswith("-small"):
            extra = f" (ulimit -n {SMALL_NOFILE}, small files)"
        lines.append(f"| `{label}{extra}` | " + " | ".join(
            cell(times[by[(kind, n)].key], memory[by[(kind, n)].key]) if (kind, n) in by
            else "" for n in sizes) + " |")
    lines += ["", "| goal | measured | met? |", "|---|---|---|"]
    for kind, (n, limit, rss_limit, what) in GOALS.items():
        c = by.get((kind, n))
        if c is None:
            continue
        t, rss = statistics.median(times[c.key]), memory[c.key]
        if limit is None:
            one = by.get((kind, 1))
            base_time = statistics.median(times[one.key]) if one else None
            ratio = t / base_time if base_time else None
            met = ratio is not None and ratio <= 10 and rss is not None and rss < rss_limit
            shown = f"{fmt_time(t)} ({ratio:.1f}x of 1 host), " if ratio else f"{fmt_time(t)}, "
        else:
            met = t < limit and rss is not None and rss < rss_limit
            shown = f"{fmt_time(t)}, "
        shown += "n/a" if rss is None else f"{rss / 2**20:,.0f} MiB"
        lines.append(f"| `{kind}` over {n} hosts {what} | {shown} | "
                     f"{'yes' if met else '**no**'} |")
    for kind in ("slowdown-small", "check-small"):
        found = [c for k, _, c in rows if k == kind]
        if found:
            lines.append(f"| `{found[0].label}` over {found[0].key.rsplit('-', 1)[1]} files "
                         f"with `ulimit -n {SMALL_NOFILE}` | "
                         f"{fmt_time(statistics.median(times[found[0].key]))} | yes |")
    return "\n".join(lines)


def comparison(after_rows, before_rows, times, memory) -> str:
    """Each command of both trees: medians, peak RSS and the ratio after / before."""
    lines = ["| command | hosts | before | after | after / before |", "|---|---:|---:|---:|---:|"]
    for (kind, n, now), (_, _, then) in zip(after_rows, before_rows):
        extra = {"history": " --since 7d --every 10m", "report": " --since 7d"}.get(kind, "")
        ratio = statistics.median(times[now.key]) / statistics.median(times[then.key])
        lines.append(f"| `{now.label}{extra}` | {n} | {cell(times[then.key], memory[then.key])} "
                     f"| {cell(times[now.key], memory[now.key])} | {ratio:.2f} |")
    return "\n".join(lines)


def sizes_of(paths: list[Path]) -> str:
    total = sum(p.stat().st_size for p in paths)
    return (f"{len(paths)} files, {total / 2**30:.2f} GiB "
            f"({total / len(paths) / 2**20:.1f} MiB each)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="2 days, 1, 2 and 4 hosts, 64 small files, 1 round (smoke test)")
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    parser.add_argument("--runs", type=int, default=3, help="rounds of slowdown and check")
    parser.add_argument("--wide-runs", type=int, default=1,
                        help="rounds of history and report (each run long at 128 hosts)")
    parser.add_argument("--hosts", default="1,8,64,512", help="fleet sizes of slowdown, check")
    parser.add_argument("--wide", default="1,8,64,128", help="fleet sizes of history, report")
    parser.add_argument("--small", type=int, default=4096, help="small files (ulimit -n 256)")
    parser.add_argument("--minute-days", type=int, default=2,
                        help="days of minute records kept (older ones are hours)")
    parser.add_argument("--build-only", action="store_true")
    parser.add_argument("--before", type=Path, default=None, metavar="DIR",
                        help="an older source tree timed beside this one (see the docstring)")
    parser.add_argument("--before-fleet", type=Path, default=None, metavar="DIR",
                        help="the fleet directory --before reads (default: --dir), for a tree "
                             "that cannot read this one's schema")
    parser.add_argument("--offset", type=int, default=4 * 60,
                        help="seconds before the fleet's last minute at which slowdown and check "
                             "look (a whole number of minutes; 0: on a ten-minute boundary)")
    parser.add_argument("--kinds", default="",
                        help="commands to time, of slowdown,check,history,report,"
                             "slowdown-small,check-small (default: all)")
    args = parser.parse_args(argv)
    days = 2 if args.quick else 30
    sizes = [1, 2, 4] if args.quick else [int(n) for n in args.hosts.split(",")]
    wide = [1, 2] if args.quick else [int(n) for n in args.wide.split(",") if n]
    small_count = 64 if args.quick else args.small
    runs = 1 if args.quick else args.runs
    wide_runs = 1 if args.quick else args.wide_runs
    minute_days = 1 if args.quick else args.minute_days
    directory = args.dir
    directory.mkdir(parents=True, exist_ok=True)
    began = time.perf_counter()
    every = hosts(directory, max([*sizes, *wide]), days, minute_days)
    for n in sorted({*sizes, *wide}):
        linked(directory, f"n{n}", every[:n])
    end = T0 + days * DAY
    small = small_hosts(directory, small_count, end) if small_count else None
    built = time.perf_counter() - began
    print(f"fleet: {sizes_of(every)}; small: "
          f"{sizes_of(sorted(small.glob('*.db'))) if small else 'none'}; "
          f"ready in {built:.0f} s", file=sys.stderr)
    if args.build_only:
        return 0
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(PYTHONPYCACHEPREFIX=str(directory / "pycache"),
               SLOWDOWN_CONFIG=str(read_database.write_config(directory, directory / "none.db")))
    if args.offset % 60 or args.offset < 0:
        parser.error("--offset: a whole number of minutes, in seconds")
    rows = command_rows(directory, sizes, wide, small, end, env, offset=args.offset)
    kinds = {k for k in args.kinds.split(",") if k}
    if kinds:
        rows = [row for row in rows if row[0] in kinds]
    after_rows, before_rows = rows, []
    if args.before is not None:
        before_env = {**env, "PYTHONPATH": str(before_package(directory, args.before))}
        fleet, small_before = directory, small
        if args.before_fleet is not None:  # the same fleet at an older schema
            fleet = args.before_fleet
            theirs = sorted((fleet / "hosts").glob("h*.db"))
            for n in sorted({*sizes, *wide}):
                linked(fleet, f"n{n}", theirs[:n])
            small_before = fleet / f"small{small_count}" if small else None
        before_rows = [row for row in command_rows(fleet, sizes, wide, small_before, end,
                                                   before_env, "before-", args.offset)
                       if not kinds or row[0] in kinds]
        rows = [row for pair in zip(after_rows, before_rows) for row in pair]
    for kind, _, command in rows:  # a warm-up of the short ones: a failure before any timing
        if kind not in ("history", "report"):
            run_once(command, kind.endswith("-small"), directory)
    times, memory = measure(rows, runs, wide_runs, directory)
    print(f"# fleet benchmark, {utc_now()}\n")
    print(f"{source_state()}; load average {read_timing.load_average()}; {runs} rounds of "
          f"slowdown and check (at @{end - args.offset}, {args.offset // 60} min before the "
          f"last), {wide_runs} of history and report; {read_timing.environment(None)}\n")
    print(f"fleet: {sizes_of(every)}; small files: "
          f"{sizes_of(sorted(small.glob('*.db'))) if small else 'none'}\n")
    print(tables(after_rows, times, memory))
    if before_rows:
        print(f"\nBefore ({args.before}) and after, side by side:\n")
        print(comparison(after_rows, before_rows, times, memory))
    return 0


if __name__ == "__main__":
    sys.exit(main())
