"""Benchmark of the probing service's own cost: CPU, memory and tick jitter at 1 Hz, two targets.

Run from the repository root with the package importable (installed, or on PYTHONPATH)::

    python -m bench.bench_service --runs 3       # the figures of docs/BENCHMARKS-probe.md (~31 min)
    python -m bench.bench_service                # one 10-minute run
    python -m bench.bench_service --quick        # one 15-second run, small workspaces (smoke)

Where the CPU goes and where a late tick's delay comes from: bench/service_cpu.py and
bench/service_ticks.py, on the same two targets (bench/workspaces.py).

Two targets are prepared with ``slowdown-probe prepare``: ``root``, a directory on the root
disk, and ``loop``, a directory on a loop-mounted ext4 image (needs root; ``--second dir`` uses
a second directory on the root disk instead). The service then runs as it runs in production,
``python -m slowdown.probe.command.main --config FILE run --duration 10m``, in a child process.

- CPU: this process makes itself a child subreaper (``PR_SET_CHILD_SUBREAPER``), so the probe
  workers, which the service kills at exit without waiting for them, are handed to it and
  reaped here; ``os.times()`` of the children before and after the run then holds user + sys
  of the service AND every worker it ever started, start-up and shutdown included. Divided by
  the run's wall time: the share of one core. The steady-state share (from psutil's per-process
  CPU times sampled every second, between the first sample after ``--warmup`` and the last
  one) leaves start-up (imports) and shutdown out.
- Memory: every second, the RSS of the service and all its descendants (psutil) is summed; the
  peak of that sum is the figure. RSS counts shared pages (the interpreter, libraries) once per
  process, so the sum is an upper bound; PSS and USS (smaps, ``smem``-style) are sampled every
  ``--full-every`` seconds per process for the breakdown.
- Tick jitter: the service's own exit log line ``tick start delay over N ticks: median X ms,
  p99 Y ms, max Z ms`` (how late each tick's job started behind its schedule).
- Sanity: the run's minute records are read back from its database (ops counted, errors,
  skipped ticks).

With ``--runs N`` the runs follow one another; each figure is the median of the runs.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from bench.workspaces import (
    GOAL_P99,
    HOST,
    MIB,
    add_target_options,
    load_average,
    parse_seconds,
    progress,
    reap_orphans,
    service_targets,
)
from slowdown.analysis.store import Store
from slowdown.probe.daemon.service import phase_of

GOAL_CPU = 0.5  # % of one core, service + workers
GOAL_RSS = 100 * MIB  # peak of the summed RSS
DELAY_LINE = re.compile(r"tick start delay over (\d+) ticks: median ([\d.]+) ms, "
                        r"p99 ([\d.]+) ms, max ([\d.]+) ms")
TABLE_HEAD = "| what | value | goal | met? |"
ANCHOR_OFFSET = 0.25  # seconds after the service's tick: clear of its tick and live-state jobs


def children_cpu() -> float:
    t = os.times()
    return t.children_user + t.children_system


@dataclass
class ProcStats:
    """What the sampler saw of one process."""

    role: str
    cpu_user: float = 0.0
    cpu_system: float = 0.0
    rss_max: int = 0
    rss: int = 0
    pss: int | None = None
    uss: int | None = None
    threads: int = 0
    thread_cpu: list = field(default_factory=list)  # [tid, user s, sys s], creation order
    # Per thread, tid -> [user + sys s, voluntary switches]: at the first steady sample, at
    # the last, and the times of both (seconds since start).
    steady_from: dict = field(default_factory=dict)
    steady_to: dict = field(default_factory=dict)
    steady_span: list = field(default_factory=list)


@dataclass
class Samples:
    times: list[float] = field(default_factory=list)  # seconds since start
    rss_sum: list[int] = field(default_factory=list)
    cpu_sum: list[float] = field(default_factory=list)  # user+sys of the processes alive
    wakeups: list[int] = field(default_factory=list)  # voluntary context switches, all threads
    procs: dict[int, ProcStats] = field(default_factory=dict)


def voluntary_switches(pids: list[int]) -> dict[int, int]:
    """Voluntary context switches of every thread of ``pids``, by thread id: how often each
    went to sleep, and so how often it was woken."""
    total: dict[int, int] = {}
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/status") as f:
                    for line in f:
                        if line.startswith("voluntary_ctxt_switches:"):
                            total[int(tid)] = int(line.split()[1])
                            break
            except OSError:
                continue
    return total


def role_of(proc: psutil.Process, service_pid: int, names: dict[str, str]) -> str:
    if proc.pid == service_pid:
        return "service"
    try:
        cmd = proc.cmdline()
    except psutil.Error:
        return "child"
    if "slowdown.probe.probes.worker" in cmd[:-1]:
        workspace = cmd[cmd.index("slowdown.probe.probes.worker") + 1]
        for path, name in names.items():
            if workspace.startswith(path):
                return f"worker {name}"
        return "worker"
    return " ".join(cmd[:3]) or "child"


def sample(service: psutil.Process, t: float, samples: Samples, names: dict[str, str],
           full: bool, steady: bool) -> None:
    try:
        procs = [service, *service.children(recursive=True)]
    except psutil.Error:
        return
    switches = voluntary_switches([p.pid for p in procs])
    rss_sum = 0
    cpu_sum = 0.0
    for p in procs:
        try:
            with p.oneshot():
                mem = p.memory_info()
                cpu = p.cpu_times()
                threads = p.threads()
            stats = samples.procs.get(p.pid)
            if stats is None:
                stats = samples.procs[p.pid] = ProcStats(role_of(p, service.pid, names))
            if full:
                info = p.memory_full_info()
                stats.pss, stats.uss = getattr(info, "pss", None), info.uss
        except psutil.Error:
            continue
        stats.cpu_user, stats.cpu_system = cpu.user, cpu.system
        stats.rss = mem.rss
        stats.rss_max = max(stats.rss_max, mem.rss)
        stats.threads = len(threads)
        stats.thread_cpu = sorted([t.id, t.user_time, t.system_time] for t in threads)
        if steady:
            now = {tid: [u + s, switches.get(tid, 0)] for tid, u, s in stats.thread_cpu}
            if not stats.steady_from:
                stats.steady_from, stats.steady_span = now, [t, t]
            stats.steady_to, stats.steady_span[1] = now, t
        rss_sum += mem.rss
        cpu_sum += cpu.user + cpu.system + cpu.children_user + cpu.children_system
    samples.times.append(t)
    samples.rss_sum.append(rss_sum)
    samples.cpu_sum.append(cpu_sum)
    samples.wakeups.append(sum(switches.values()))


def db_summary(database: Path) -> dict[str, Any]:
    """Ops, errors and skipped ticks per (target, op) in the run's database."""
    per: dict[str, dict[str, int]] = defaultdict(lambda: {"ops": 0, "errors": 0, "skipped": 0})
    store = Store(database, readonly=True)
    try:
        for rec in store.records():
            row = per[f"{rec.target} {rec.op}"]
            row["ops"] += rec.histogram.count
            row["errors"] += rec.errors
            row["skipped"] += rec.skipped
    finally:
        store.close()
    return dict(sorted(per.items()))


def run_once(config: Path, database: Path, log: Path, duration: float, warmup: float,
             full_every: float, names: dict[str, str], phase: float) -> dict[str, Any]:
    """One run of the service; every figure of it."""
    for stale in (database, database.with_name(database.name + "-wal"),
                  database.with_name(database.name + "-shm"),
                  database.with_name(database.name + ".live.json")):
        stale.unlink(missing_ok=True)
    reap_orphans(0)
    cpu_before = children_cpu()
    t0 = time.monotonic()
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "slowdown.probe.command.main", "--config", str(config), "run",
             "--duration", f"{duration:g}s"],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
    ended: list[float] = []
    waiter = threading.Thread(target=lambda: (proc.wait(), ended.append(time.monotonic())),
                              daemon=True)
    waiter.start()
    service = psutil.Process(proc.pid)
    samples = Samples()
    next_full = 0.0
    # The sampler wakes every second at a fixed offset from the service's tick schedule; how
    # late its plain time.sleep() wakes is the machine's own wake-up delay (the anchor).
    wake = (time.time() - phase) // 1 + 1 + phase + ANCHOR_OFFSET
    late: list[float] = []
    try:
        while True:
            time.sleep(max(0.0, wake - time.time()))
            late.append(time.time() - wake)
            if ended:
                break
            t = time.monotonic() - t0
            full = t >= next_full
            if full:
                next_full = t + full_every
            sample(service, t, samples, names, full, t >= warmup)
            wake += 1
            while wake < time.time():
                wake += 1
    except BaseException:
        proc.send_signal(signal.SIGTERM)
        proc.wait()
        raise
    waiter.join()
    wall = ended[0] - t0
    left = reap_orphans(10.0)
    cpu = children_cpu() - cpu_before
    text = log.read_text()
    m = DELAY_LINE.search(text)
    delay = ({"ticks": int(m[1]), "p50": float(m[2]) / 1e3, "p99": float(m[3]) / 1e3,
              "max": float(m[4]) / 1e3} if m else None)

    first = next((i for i, t in enumerate(samples.times) if t >= warmup), None)
    steady = wakeups = None
    if first is not None and len(samples.times) - first >= 2:
        span = samples.times[-1] - samples.times[first]
        steady = (samples.cpu_sum[-1] - samples.cpu_sum[first]) / span * 100
        wakeups = (samples.wakeups[-1] - samples.wakeups[first]) / span
    late.sort()
    anchor = ({"ticks": len(late), "p50": late[len(late) // 2],
               "p99": late[min(len(late) - 1, int(0.99 * len(late)))], "max": late[-1]}
              if late else None)
    return {
        "returncode": proc.returncode, "anchor": anchor, "wall": wall, "cpu": cpu,
        "cpu_share": cpu / wall * 100,
        "cpu_steady": steady, "wakeups": wakeups, "rss_peak": max(samples.rss_sum, default=0),
        "delay": delay, "left_alive": left, "samples": len(samples.times),
        "procs": {str(pid): vars(s) for pid, s in samples.procs.items()},
        "db": db_summary(database) if database.exists() else {},
        "log_tail": text.splitlines()[-8:],
    }


def median_of(runs: list[dict[str, Any]], get) -> float | None:
    values = [v for v in (get(r) for r in runs) if v is not None]
    return statistics.median(values) if values else None


def met(value: float | None, goal: float) -> str:
    if value is None:
        return "n/a"
    return "yes" if value <= goal else "**NO**"


def table(runs: list[dict[str, Any]]) -> str:
    n = len(runs)
    of = f"median of {n} runs" if n > 1 else "1 run"
    cpu = median_of(runs, lambda r: r["cpu_share"])
    steady = median_of(runs, lambda r: r["cpu_steady"])
    rss = median_of(runs, lambda r: r["rss_peak"])
    p50 = median_of(runs, lambda r: r["delay"] and r["delay"]["p50"])
    p99 = median_of(runs, lambda r: r["delay"] and r["delay"]["p99"])
    mx = median_of(runs, lambda r: r["delay"] and r["delay"]["max"])

    def ms(v: float | None) -> str:
        return "n/a" if v is None else f"{v * 1e3:.2f} ms"

    def each(get, fmt) -> str:
        return ", ".join(fmt(get(r)) for r in runs) if n > 1 else ""

    pct = lambda v: "n/a" if v is None else f"{v:.3f} %"  # noqa: E731
    mib = lambda v: f"{v / MIB:.1f} MiB"  # noqa: E731
    rows = [
        (f"CPU, service + workers, whole run incl. start-up and exit, % of one core ({of})",
         pct(cpu), each(lambda r: r["cpu_share"], pct), "<= 0.5 %", met(cpu, GOAL_CPU)),
        (f"CPU, service + workers, steady state, % of one core ({of})", pct(steady),
         each(lambda r: r["cpu_steady"], pct), "<= 0.5 %", met(steady, GOAL_CPU)),
        (f"peak RSS, service + workers summed ({of})", mib(rss),
         each(lambda r: r["rss_peak"], mib), "<= 100 MiB", met(rss, GOAL_RSS)),
        (f"tick start delay, median ({of})", ms(p50),
         each(lambda r: r["delay"] and r["delay"]["p50"], ms), "", ""),
        (f"tick start delay, p99 ({of})", ms(p99),
         each(lambda r: r["delay"] and r["delay"]["p99"], ms), "<= 5 ms", met(p99, GOAL_P99)),
        (f"tick start delay, max ({of})", ms(mx),
         each(lambda r: r["delay"] and r["delay"]["max"], ms), "", ""),
    ]
    wakes = median_of(runs, lambda r: r.get("wakeups"))
    rows.insert(2, (f"wake-ups per second, service + workers, all threads, steady state ({of})",
                    "n/a" if wakes is None else f"{wakes:.1f}",
                    each(lambda r: r.get("wakeups"),
                         lambda v: "n/a" if v is None else f"{v:.1f}"), "", ""))
    for key in ("p50", "p99", "max"):
        v = median_of(runs, lambda r, k=key: r["anchor"] and r["anchor"][k])
        rows.append((f"anchor: plain time.sleep() wake-up delay, same machine, {key} ({of})",
                     ms(v), each(lambda r, k=key: r["anchor"] and r["anchor"][k], ms), "", ""))
    out = [TABLE_HEAD, "|---|---|---|---|"]
    for what, value, runs_text, goal, ok in rows:
        shown = f"{value} (runs: {runs_text})" if runs_text else value
        out.append(f"| {what} | {shown} | {goal} | {ok} |")
    return "\n".join(out)


def breakdown(run: dict[str, Any]) -> str:
    out = ["| process | user s | sys s | CPU % of one core | RSS max | PSS | USS | threads |",
           "|---|---|---|---|---|---|---|---|"]
    wall = run["wall"]

    def mib(v: int | None) -> str:
        return "n/a" if v is None else f"{v / MIB:.1f} MiB"

    for pid, p in sorted(run["procs"].items(), key=lambda kv: kv[1]["role"]):
        share = (p["cpu_user"] + p["cpu_system"]) / wall * 100
        out.append(f"| {p['role']} (pid {pid}) | {p['cpu_user']:.2f} | {p['cpu_system']:.2f} "
                   f"| {share:.3f} % | {mib(p['rss_max'])} | {mib(p['pss'])} "
                   f"| {mib(p['uss'])} | {p['threads']} |")
    service = next((p for p in run["procs"].values() if p["role"] == "service"), None)
    if service and service["thread_cpu"]:
        shown = ", ".join(f"{u + s:.2f} s" for _, u, s in service["thread_cpu"])
        out.append(f"\nservice threads in order of creation (main first), user+sys: {shown}")
    out.append("\nsteady state, per thread in order of creation (% of one core, wake-ups/s):")
    for p in sorted(run["procs"].values(), key=lambda p: p["role"]):
        first, last = p.get("steady_from") or {}, p.get("steady_to") or {}
        start, end = p.get("steady_span") or (0.0, 0.0)
        span = end - start
        if span <= 0:
            continue
        shown = ", ".join(
            f"{(last[tid][0] - first[tid][0]) / span * 100:.3f} % "
            f"({(last[tid][1] - first[tid][1]) / span:.1f}/s)"
            for tid in sorted(last, key=int) if tid in first)
        out.append(f"- {p['role']}: {shown}")
    return "\n".join(out)


def report(runs: list[dict[str, Any]], header: list[str]) -> str:
    out = [*header, "", table(runs), ""] if runs else [*header, ""]
    for i, run in enumerate(runs, 1):
        d = run["delay"] or {}
        ops = sum(v["ops"] for v in run["db"].values())
        errors = sum(v["errors"] for v in run["db"].values())
        skipped = sum(v["skipped"] for v in run["db"].values())
        wakes = run.get("wakeups")
        out += [f"run {i}: wall {run['wall']:.1f} s, CPU {run['cpu']:.2f} s "
                f"({run['cpu_share']:.3f} % whole run; steady "
                f"{run['cpu_steady'] if run['cpu_steady'] is None else round(run['cpu_steady'], 3)}"
                f" %), peak RSS sum {run['rss_peak'] / MIB:.1f} MiB, {d.get('ticks', 0)} ticks, "
                f"{ops} ops recorded in the database over {len(run['db'])} (target, op) series, "
                f"{errors} errors, {skipped} skipped; exit status {run['returncode']}; "
                f"steady state: {wakes if wakes is None else round(wakes, 1)} voluntary context "
                "switches (sleeps, and so wake-ups) per second, all threads of all processes"
                + (f"; still alive after exit: {run['left_alive']}" if run["left_alive"] else ""),
                "", breakdown(run), ""]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="one 15 s run, 64 MiB data files, two plain directories (smoke)")
    parser.add_argument("--runs", type=int, default=1, help="runs one after another (1)")
    parser.add_argument("--duration", default=None, help="each run's length (10m)")
    add_target_options(parser, quick=" (--quick's default)")
    parser.add_argument("--warmup", default="30s", help="steady state starts after (30s)")
    parser.add_argument("--full-every", default="10s", help="PSS/USS sampled every (10s)")
    parser.add_argument("--json", type=Path, default=None, help="also write results here")
    args = parser.parse_args(argv)

    duration = parse_seconds(args.duration or ("15s" if args.quick else "10m"))
    warmup = min(parse_seconds(args.warmup), duration / 3)
    runs: list[dict[str, Any]] = []
    with service_targets(args, quick=args.quick) as bench:
        base, config, database, header = bench.base, bench.config, bench.database, bench.header
        header.append(f"prepared in {bench.prepared_in:.0f} s; interval 1 s; each run "
                      f"`{sys.executable} -m slowdown.probe.command.main --config {config} run "
                      f"--duration {duration:g}s`")
        names = {str(t.path): t.name for t in bench.targets}
        for i in range(args.runs):
            progress(f"run {i + 1}/{args.runs}: {duration:g} s")
            run = run_once(config, database, base / f"service-{i + 1}.log", duration, warmup,
                           parse_seconds(args.full_every), names, phase_of(HOST, 1.0))
            runs.append(run)
            d = run["delay"] or {}
            progress(f"run {i + 1}: CPU {run['cpu_share']:.3f} % (steady {run['cpu_steady']}),"
                     f" peak RSS {run['rss_peak'] / MIB:.1f} MiB, tick delay p99 "
                     f"{d.get('p99', float('nan')) * 1e3:.2f} ms")
            if args.json:
                args.json.write_text(json.dumps({"header": header, "runs": runs}, indent=1))
        if not args.keep:
            for i in range(args.runs):
                (base / f"service-{i + 1}.log").unlink(missing_ok=True)
    header.append(load_average())
    print(report(runs, header))
    return 0


if __name__ == "__main__":
    sys.exit(main())
