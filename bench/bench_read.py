"""Benchmark of the read side: the uptime-like ``slowdown`` and a 30-day ``history``.

Run from the repository root, best from a virtual environment with the package installed
(``pip install -e .``: the console script is then timed too), or with it on PYTHONPATH::

    python -m bench.bench_read              # the figures of docs/BENCHMARKS-read.md (~5 min)
    python -m bench.bench_read --quick      # 2 days, 3 runs, ~15 s (the smoke test)
    python -m bench.bench_read --profile    # then -X importtime and cProfile of both commands

The database (30 days of minute records, 2 targets x 6 ops, 60 lognormal samples each, written
through ``Store.write`` one transaction per day, each followed by ``baseline.maintain`` as the
service's hourly job would run it: the initial baseline after the first day; ~4 min) is built
once and kept in ``--dir``; a later run reuses it while its parameters match, and migrates it
when only the schema moved on. Every measured command is a fresh process, timed wall clock from
the fork to the exit (``subprocess.run``, output to /dev/null), so interpreter start-up and
imports are included, as a user sees them; bytecode is cached as after an installation (in
``DIR/pycache``). The commands run interleaved, in an order rotated round by round, after one
untimed warm-up each, so that the noise of a shared machine falls on all of them alike; each
row is the median and p90 of ``--runs`` rounds.

Anchors, measured in the same rounds: ``uptime`` (the tool ``slowdown`` imitates),
``python3 -c pass`` and ``python3 -c "import click, sqlite3"`` (the interpreter floor under
any click-based Python command line), and SQLite's own shell printing the numbers a 30-day
history prints, as CSV (``sqlite3 -csv DB "SELECT ... FROM minutes"``: the floor for reading
and printing every row).
"""

from __future__ import annotations

import argparse
import datetime
import io
import json
import os
import pstats
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.read_database import (
    OPS,
    PER_MINUTE,
    SQLITE_ANCHOR,
    TARGETS,
    database,
    write_config,
)
from bench.read_timing import (
    MIGRATIONS,
    Command,
    check_output,
    console_script,
    environment,
    fmt_time,
    load_average,
    measure,
    p90,
    peak_memory,
    script_interpreter,
    source_pycache,
    source_state,
)

GOAL_UPTIME = 0.100  # seconds, median wall of `slowdown`, process start included
GOAL_HISTORY = 1.0  # seconds, median wall of a 30-day history at 1-minute steps
DEFAULT_DIR = Path("/tmp/slowdown-bench")
TABLE_HEAD = "| command | median | p90 | min..max | CPU | peak RSS | goal | met? |"
RATIO_HEAD = "| ratio | median | per-run range |"


@dataclass(frozen=True)
class Sizes:
    days: int
    runs: int


FULL = Sizes(days=30, runs=11)
QUICK = Sizes(days=2, runs=3)


# -- the database ------------------------------------------------------------------------------


# -- the commands ------------------------------------------------------------------------------


def environments(config: Path, pycache: Path) -> tuple[dict[str, str], dict[str, str]]:
    """(for ``python -m`` and the anchors, for the console script).

    Bytecode is cached as after an installation (pip compiles it), but in a prefix tree in
    the benchmark's directory rather than ``__pycache__`` in the source tree; the warm-up
    run fills it. The console script runs without this process's PYTHONPATH, which could
    otherwise shadow the installed package.
    """
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(SLOWDOWN_CONFIG=str(config), PYTHONPYCACHEPREFIX=str(pycache))
    return env, {k: v for k, v in env.items() if k != "PYTHONPATH"}


def commands(db: Path, config: Path, end: int, days: int, script: Path | None,
             pycache: Path) -> list[Command]:
    python = sys.executable
    env, installed_env = environments(config, pycache)
    at = ["--db", str(db), "--at", f"@{end}"]
    since = f"{days}d"
    history_args = ["history", *at, "--since", since, "--every", "1m"]
    history_label = f"history --db DB --at @END --since {since} --every 1m > /dev/null"
    module = [python, "-m", "slowdown.analysis.cli"]
    history_goal = GOAL_HISTORY if days == FULL.days else None
    rows: list[Command] = []
    if script is not None:
        rows.append(Command("uptime-script", "slowdown --db DB --at @END",
                            [str(script), *at], installed_env, GOAL_UPTIME))
        # As a shell with PYTHONDONTWRITEBYTECODE=1 runs it: the package's own modules are
        # compiled at every start unless their __pycache__ exists (the rest are installed
        # with theirs).
        rows.append(Command("uptime-script-nopyc",
                            "slowdown --db DB --at @END, bytecode not cached "
                            "(PYTHONDONTWRITEBYTECODE=1)", [str(script), *at],
                            {**{k: v for k, v in installed_env.items()
                                if k != "PYTHONPYCACHEPREFIX"},
                             "PYTHONDONTWRITEBYTECODE": "1"}))
    rows.append(Command("uptime-module", "python3 -m slowdown.analysis.cli --db DB --at @END",
                        [*module, *at], env, None if script else GOAL_UPTIME))
    # The default splits the series between processes (one per free CPU); --jobs 1 shows
    # the work of one process.
    one = history_label.replace(" > /dev/null", " --jobs 1 > /dev/null")
    if script is not None:
        rows.append(Command("history", f"slowdown {history_label}",
                            [str(script), *history_args], installed_env, history_goal))
        rows.append(Command("history-one", f"slowdown {one}",
                            [str(script), *history_args, "--jobs", "1"], installed_env))
    else:
        rows.append(Command("history", f"python3 -m slowdown.analysis.cli {history_label}",
                            [*module, *history_args], env, history_goal))
        rows.append(Command("history-one", f"python3 -m slowdown.analysis.cli {one}",
                            [*module, *history_args, "--jobs", "1"], env))
    uptime = shutil.which("uptime")
    if uptime:
        rows.append(Command("uptime", "uptime", [uptime], env))
    rows.append(Command("python-pass", "python3 -c pass", [python, "-c", "pass"], env))
    rows.append(Command("python-click", 'python3 -c "import click, sqlite3"',
                        [python, "-c", "import click, sqlite3"], env))
    other = script_interpreter(script) if script is not None else None
    if other and Path(other).exists() and Path(other) != Path(python):
        rows.append(Command("script-python-pass", f"{other} -c pass",
                            [other, "-c", "pass"], installed_env))
        rows.append(Command("script-python-click", f'{other} -c "import click, sqlite3"',
                            [other, "-c", "import click, sqlite3"], installed_env))
    sqlite_cli = shutil.which("sqlite3")
    if sqlite_cli:
        rows.append(Command("sqlite-all", f'sqlite3 -csv DB "{SQLITE_ANCHOR}" > /dev/null',
                            [sqlite_cli, "-csv", str(db), SQLITE_ANCHOR], env))
    return rows


# -- the report --------------------------------------------------------------------------------


def table(rows: list[Command], times: dict[str, list[float]], cpu: dict[str, list[float]],
          memory: dict[str, int | None]) -> str:
    lines = [TABLE_HEAD, "|---|---:|---:|---:|---:|---:|---:|---|"]
    for c in rows:
        t = times[c.key]
        med = statistics.median(t)
        rss = memory.get(c.key)
        goal = f"<= {fmt_time(c.goal)}" if c.goal else ""
        met = ("yes" if med <= c.goal else "**NO**") if c.goal else ""
        lines.append(f"| `{c.label}` | {fmt_time(med)} | {fmt_time(p90(t))} | "
                     f"{fmt_time(min(t))}..{fmt_time(max(t))} | "
                     f"{fmt_time(statistics.median(cpu[c.key]))} | "
                     f"{'n/a' if rss is None else f'{rss / 2**20:,.0f} MiB'} | {goal} | {met} |")
    return "\n".join(lines)


def ratio_pairs(times: dict[str, list[float]]) -> list[tuple[str, str]]:
    """(ours, anchor) keys; the console script against its own interpreter's anchors."""
    own = "script-python" if "script-python-pass" in times else "python"
    pairs = [("uptime-script", "uptime"), ("uptime-script", f"{own}-pass"),
             ("uptime-script", f"{own}-click"), ("uptime-script-nopyc", "uptime-script"),
             ("uptime-module", "uptime"), ("uptime-module", "python-pass"),
             ("uptime-module", "python-click"), ("history", "sqlite-all"),
             ("history-one", "sqlite-all"), ("history", "history-one")]
    history_own = own if "uptime-script" in times else "python"
    pairs.append(("history", f"{history_own}-pass"))
    return [(a, b) for a, b in pairs if a in times and b in times]


def ratios(rows: list[Command], times: dict[str, list[float]]) -> str:
    """Ours / anchor: the ratio of the medians, and the range of the per-round ratios."""
    label = {c.key: c.label.split(", bytecode")[0] + (" (no bytecode cache)"
                                                      if "bytecode" in c.label else "")
             for c in rows}
    lines = [RATIO_HEAD, "|---|---:|---:|"]
    for ours, anchor in ratio_pairs(times):
        a, b = times[ours], times[anchor]
        per_run = [x / y for x, y in zip(a, b)]
        ratio = statistics.median(a) / statistics.median(b)
        lines.append(f"| `{label[ours]}` / `{label[anchor]}` | {ratio:.2f} | "
                     f"{min(per_run):.2f}..{max(per_run):.2f} |")
    return "\n".join(lines)


# -- the profile -------------------------------------------------------------------------------

def _interpreter(command: Command) -> tuple[str, list[str]]:
    """The Python that runs the command, and what follows it on its command line."""
    if command.argv[0] == sys.executable:
        return sys.executable, command.argv[1:]
    return script_interpreter(Path(command.argv[0])) or sys.executable, command.argv


def import_times(command: Command, top: int = 25) -> str:
    """``-X importtime`` of the command: the slowest imports by cumulative time, in ms."""
    python, rest = _interpreter(command)
    done = subprocess.run([python, "-X", "importtime", *rest], env=command.env,
                          stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    entries = []
    for line in done.stderr.splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)", line)
        if m:
            entries.append((int(m.group(2)), int(m.group(1)), len(m.group(3)) // 2, m.group(4)))
    total = sum(self_us for _, self_us, _, _ in entries)
    own = sum(self_us for _, self_us, _, name in entries if name.startswith("slowdown"))
    lines = [f"imports of `{command.label}` (-X importtime, which inflates them): "
             f"{total / 1000:.1f} ms in all (sum of self times), {own / 1000:.1f} ms in the "
             f"package's own modules; slowest by cumulative time:", "",
             "| import | cumulative | self | depth |", "|---|---:|---:|---:|"]
    for cum, self_us, depth, name in sorted(entries, reverse=True)[:top]:
        lines.append(f"| {name} | {cum / 1000:.1f} ms | {self_us / 1000:.1f} ms | {depth} |")
    return "\n".join(lines)


def cprofile(command: Command, directory: Path, top: int = 25) -> str:
    """cProfile of the command in its own process (``python -m cProfile``), by cumulative
    and by own time."""
    out = directory / "bench-read.prof"
    python, rest = _interpreter(command)
    subprocess.run([python, "-m", "cProfile", "-o", str(out), *rest], env=command.env,
                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, check=True)
    parts = []
    for key in ("cumulative", "tottime"):
        text = io.StringIO()
        pstats.Stats(str(out), stream=text).sort_stats(key).print_stats(top)
        body = text.getvalue()
        body = body[body.find("   ncalls"):] if "   ncalls" in body else body
        parts.append(f"cProfile of `{command.label}`, by {key} time:\n\n```\n"
                     f"{body.rstrip()}\n```")
    out.unlink()
    return "\n\n".join(parts)


# -- main --------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help=f"{QUICK.days} days of data and {QUICK.runs} runs (smoke test)")
    parser.add_argument("--runs", type=int, default=None,
                        help=f"timed runs of each command ({FULL.runs}; at least 3)")
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR,
                        help=f"where the database is built and kept (default: {DEFAULT_DIR})")
    parser.add_argument("--rebuild", action="store_true", help="build the database anew")
    parser.add_argument("--console", default=None, metavar="PATH",
                        help="the installed `slowdown` script (default: beside this "
                             "interpreter, else on PATH)")
    parser.add_argument("--profile", action="store_true",
                        help="also -X importtime and cProfile of both commands")
    parser.add_argument("--json", type=Path, default=None, metavar="FILE",
                        help="also write the raw timings to FILE")
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    runs = args.runs if args.runs is not None else sizes.runs
    if runs < 3:
        parser.error("--runs must be at least 3")
    directory = args.dir.resolve()

    db, info, built = database(directory, sizes.days, args.rebuild)
    config = write_config(directory, db)
    script = console_script(args.console)
    rows = commands(db, config, info["end"], sizes.days, script, directory / "pycache")
    by_key = {c.key: c for c in rows}
    uptime_cmd = by_key.get("uptime-script", by_key["uptime-module"])
    history_cmd = by_key["history"]
    state_before = source_state()
    shown = check_output(uptime_cmd, len(TARGETS), db)
    # A header and a row per minute record; the same text from one process as from several.
    if check_output(history_cmd, info["records"] + 1, db) != \
            check_output(by_key["history-one"], info["records"] + 1, db):
        raise SystemExit("history: one process and several wrote different text")

    load_before = load_average()
    began = time.perf_counter()
    times, cpu = measure(rows, runs, directory, db)
    elapsed = time.perf_counter() - began
    memory = {c.key: peak_memory(c) for c in rows}

    mib = info["bytes"] / 2**20
    out = [
        environment(script), state_before, "",
        f"database: {db} ({'built now' if built else 'reused, built ' + info['built']}"
        f"{', schema migrated ' + info['migrated'] if 'migrated' in info else ''}); "
        f"{info['records']:,} minute records ({sizes.days} days x 1440 minutes x "
        f"{len(TARGETS)} targets x {len(OPS)} ops, {PER_MINUTE} samples each); "
        f"{mib:,.1f} MiB ({info['bytes'] / info['records']:.0f} B per record); "
        f"build: Store.write {info['write_seconds']:.1f} s (one transaction per day), "
        f"baseline.maintain {info['maintain_seconds']:.2f} s ({info['baselines']} baselines)",
        f"end of the data (--at): @{info['end']} = "
        f"{datetime.datetime.fromtimestamp(info['end'], datetime.timezone.utc):%Y-%m-%dT%H:%MZ}"
        f"; configuration: {config}",
        f"runs: {runs} per command, interleaved (rotated order), after one warm-up each; "
        f"{elapsed:.0f} s in all; load average before: {load_before}, after: {load_average()}",
        "",
        "output of the measured `slowdown`:", "", "```", shown.rstrip(), "```", "",
        table(rows, times, cpu, memory), "",
        "CPU: user and system time of the command and the processes it waited for (median); "
        "peak RSS: from one more run of each under /usr/bin/time -f %M (the largest of the "
        "process and its children).", "",
        "ours / anchor, ratio of the medians (and the range of the per-round ratios):", "",
        ratios(rows, times), "",
        "the commands exactly as run (DB, END and the interpreters spelled out; SLOWDOWN_CONFIG"
        f"={config}, PYTHONPYCACHEPREFIX={directory / 'pycache'} unless said otherwise):", "",
        "```", *(f"{c.key}: {shlex.join(c.argv)}" for c in rows), "```", "",
        *([f"the schema moved on during the run: database migrated at {', '.join(MIGRATIONS)}"
           ] if MIGRATIONS else []),
        f"at the end of the run, {source_state()}",
        f"own modules' __pycache__ beside the source: "
        f"{'present' if source_pycache().exists() else 'absent'} ({source_pycache()})",
    ]
    print("\n".join(out))
    if args.json:
        args.json.write_text(json.dumps({
            "database": info, "runs": runs,
            "commands": [{"key": c.key, "label": c.label, "argv": c.argv, "goal": c.goal,
                          "seconds": times[c.key], "cpu_seconds": cpu[c.key],
                          "peak_rss": memory[c.key]} for c in rows],
        }, indent=1) + "\n")
    if args.profile:
        with tempfile.TemporaryDirectory(prefix="slowdown-bench-prof-") as tmp:
            for command in (uptime_cmd, by_key["history-one"]):  # one process: all of it
                print("\n" + import_times(command))
                print("\n" + cprofile(command, Path(tmp)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
