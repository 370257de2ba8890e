"""Timing a read command as a user runs it: a process per run, its wall and CPU time, its peak
memory, its output checked, and the source and environment the figures come from
(bench_read.py, bench_fleet.py)."""

from __future__ import annotations

import os
import platform
import resource
import shutil
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import slowdown.analysis
from bench.read_database import (
    utc_now,
)


@dataclass(frozen=True)
class Command:
    key: str
    label: str  # the command as a user types it (for the table)
    argv: list[str]
    env: dict[str, str]
    goal: float | None = None


def console_script(explicit: str | None) -> Path | None:
    """The installed ``slowdown`` script: ``--console``, else beside this interpreter, else
    on PATH."""
    if explicit:
        return Path(explicit)
    beside = Path(sys.executable).parent / "slowdown"
    if beside.is_file():
        return beside
    found = shutil.which("slowdown")
    return Path(found) if found else None


def script_interpreter(script: Path) -> str | None:
    """The interpreter on the script's ``#!`` line."""
    with open(script, "rb") as f:
        first = f.readline().decode(errors="replace").strip()
    return first[2:].split()[0] if first.startswith("#!") and len(first) > 2 else None


STALE_SCHEMA = "open it once for writing"  # the store's message for a schema behind the code


def run_timed(command: Command, errors: Path, db: Path | None = None) -> tuple[float, float]:
    """Wall time from the fork to the exit, and CPU time (user and system, of the command
    and the processes it waited for).

    When the schema moved on under the benchmark (the code is edited while it runs), the
    database is migrated once, as the service would, and the command timed again.
    """
    for attempt in (1, 2):
        with open(errors, "wb") as err:
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            began = time.perf_counter()
            done = subprocess.run(command.argv, env=command.env, stdin=subprocess.DEVNULL,
                                  stdout=subprocess.DEVNULL, stderr=err)
            took = time.perf_counter() - began
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode == 0:
            return took, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        message = errors.read_text(errors="replace").strip()
        if attempt == 1 and db is not None and STALE_SCHEMA in message:
            migrate(db, command.env)
            continue
        raise SystemExit(f"{command.label}: exit {done.returncode}: {message[-2000:]}")
    raise AssertionError("unreachable")


MIGRATIONS: list[str] = []  # when the database was migrated during the run


def migrate(db: Path, env: dict[str, str]) -> None:
    """Open the database for writing in a fresh process (with the code as it is now)."""
    subprocess.run([sys.executable, "-c", "import sys\nfrom slowdown.analysis.store import "
                    "Store\nStore(sys.argv[1]).close()", str(db)],
                   env={**env, "PYTHONPATH": os.environ.get("PYTHONPATH", "")}, check=True)
    MIGRATIONS.append(utc_now())


def measure(rows: list[Command], runs: int, scratch: Path, db: Path) \
        -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """One untimed warm-up of each, then ``runs`` rounds, each in a rotated order: the wall
    and the CPU times of each command."""
    errors = scratch / "stderr.txt"
    for command in rows:
        run_timed(command, errors, db)
    times: dict[str, list[float]] = {c.key: [] for c in rows}
    cpu: dict[str, list[float]] = {c.key: [] for c in rows}
    for r in range(runs):
        shift = r % len(rows)
        for command in rows[shift:] + rows[:shift]:
            wall, used = run_timed(command, errors, db)
            times[command.key].append(wall)
            cpu[command.key].append(used)
        print(f"round {r + 1}/{runs} done", file=sys.stderr)
    errors.unlink(missing_ok=True)
    return times, cpu


def peak_memory(command: Command) -> int | None:
    """The command's peak RSS in bytes, from one more run under GNU time (None without it).

    Not from this process's own wait: a child forked from here inherits the high-water mark
    of the (large) benchmark process.
    """
    gnu_time = Path("/usr/bin/time")
    if not gnu_time.exists():
        return None
    done = subprocess.run([str(gnu_time), "-f", "%M", *command.argv], env=command.env,
                          stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    last = done.stderr.strip().splitlines()[-1:] or [""]
    return int(last[0]) * 1024 if done.returncode == 0 and last[0].isdigit() else None


def check_output(command: Command, expect_lines: int | None, db: Path) -> str:
    """The command's output once (to show it, and to check it is what is claimed)."""
    done = subprocess.run(command.argv, env=command.env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True)
    if done.returncode != 0 and STALE_SCHEMA in done.stderr:
        migrate(db, command.env)
        done = subprocess.run(command.argv, env=command.env, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{command.label}: exit {done.returncode}: {done.stderr[-2000:]}")
    lines = done.stdout.count("\n")
    if expect_lines is not None and lines != expect_lines:
        raise SystemExit(f"{command.label}: {lines} lines of output, expected {expect_lines}")
    return done.stdout


def source_state() -> str:
    """The commit of the code measured, and its files changed since (the tree is shared)."""
    root = Path(slowdown.analysis.__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
        changed = subprocess.run(["git", "-C", str(root), "status", "--porcelain",
                                  "--untracked-files=no", "analysis"],
                                 capture_output=True, text=True, check=True).stdout.split("\n")
    except (OSError, subprocess.CalledProcessError):
        return f"code in {root} (not a git checkout)"
    changed = [line[3:] for line in changed if line.strip()]
    return f"code: commit {head} in {root}" + (
        f", with uncommitted changes to {', '.join(changed)}" if changed else "")


def fmt_time(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.2f} s"
    return f"{seconds * 1000:.1f} ms" if seconds < 0.1 else f"{seconds * 1000:.0f} ms"


def p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]


def environment(script: Path | None) -> str:
    parts = [
        f"date {utc_now()}",
        f"Python {platform.python_version()} ({sys.executable})",
        f"click {_version('click')}", f"numpy {np.__version__}",
        f"SQLite {sqlite3.sqlite_version}",
        f"console script {script}" if script else "no console script (python -m only)",
        f"{platform.machine()}, {os.cpu_count()} CPUs "
        f"({len(os.sched_getaffinity(0))} usable), {platform.platform()}",
    ]
    return "; ".join(parts)


def _version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "?"


def source_pycache() -> Path:
    return Path(slowdown.analysis.__file__).parent / "__pycache__"


def load_average() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"
