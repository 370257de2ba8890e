"""Benchmark of the probing service's own cost: CPU, memory and tick jitter at 1 Hz, two targets.

Run from the repository root with the package importable (installed, or on PYTHONPATH)::

    python -m bench.bench_service --runs 3       # the figures of docs/BENCHMARKS-probe.md (~31 min)
    python -m bench.bench_service                # one 10-minute run
    python -m bench.bench_service --quick        # one 15-second run, small workspaces (smoke)

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

Where a late tick's delay comes from (``--trace DURATION``, after the runs, or alone with
``--runs 0``): the service runs in a child as ``run`` runs it, instrumented: when APScheduler's
thread woke, when a pool thread picked the tick job up, when ``Service.tick`` started; spans of
the other jobs, of the reader threads' message handling and of every garbage collection.
Meanwhile this process sleeps until each tick's scheduled moment and notes how late it woke:
the anchor at the same moments. ``--variants`` runs the service as it is (``as-is``) and with
a change applied in the child (``direct-tick``: the tick job run by APScheduler's own thread;
``tick-thread``: a thread of its own sleeping until each tick), alternating, each twice.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
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
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from bench.workspaces import (
    GIB,
    HOST,
    MIB,
    BenchTarget,
    cleanup,
    filesystem_of,
    loop_ext4,
    machine,
    prepare,
    write_config,
)
from slowdown.analysis.store import Store
from slowdown.probe.daemon.service import phase_of

DEFAULT_DIR = Path("/var/tmp/slowdown-bench-service")
GOAL_CPU = 0.5  # % of one core, service + workers
GOAL_RSS = 100 * MIB  # peak of the summed RSS
GOAL_P99 = 5e-3  # tick start delay, seconds
PR_SET_CHILD_SUBREAPER = 36
DELAY_LINE = re.compile(r"tick start delay over (\d+) ticks: median ([\d.]+) ms, "
                        r"p99 ([\d.]+) ms, max ([\d.]+) ms")
TABLE_HEAD = "| what | value | goal | met? |"
ANCHOR_OFFSET = 0.25  # seconds after the service's tick: clear of its tick and live-state jobs


def become_subreaper() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


def reap_orphans(deadline: float) -> list[int]:
    """Wait for every child left (the service's workers, handed to us); return any still alive
    at ``deadline`` (seconds from now)."""
    end = time.monotonic() + deadline
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return []
        if pid == 0:
            if time.monotonic() >= end:
                return [p.pid for p in psutil.Process().children()]
            time.sleep(0.05)


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


# --- diagnostics: where the CPU goes ----------------------------------------------------


def wakeup_floor(rate: float, seconds: float) -> float:
    """CPU seconds one Python thread is charged per wake-up when it does nothing else."""
    event = threading.Event()
    n = max(1, int(rate * seconds))
    c0 = time.thread_time()
    for _ in range(n):
        event.wait(1.0 / rate)
    return (time.thread_time() - c0) / n


def worker_ops_cpu(workspace: Path, ticks: int) -> dict[str, dict[str, float]]:
    """CPU (thread time) of each part of a worker's tick, ticks 1 s apart (as in service)
    and back to back; medians, seconds. Saves the md position afterwards, so the service
    carries on from where this left the pool."""
    from slowdown.probe.probes.data import DataProbe
    from slowdown.probe.probes.md import MdProbe

    data = DataProbe(workspace / "data.bin")
    md = MdProbe.from_workspace(workspace)
    clock = time.thread_time
    parts = {"data-read": data.read_block, "data-write": data.write_block, "md step": md.step}
    out = {}
    try:
        for mode, pause in (("1 s apart", 1.0), ("back to back", 0.0)):
            seen: dict[str, list[float]] = {k: [] for k in parts}
            for _ in range(ticks):
                if pause:
                    time.sleep(pause)
                for name, call in parts.items():
                    c0 = clock()
                    call()
                    seen[name].append(clock() - c0)
            out[mode] = {k: statistics.median(v) for k, v in seen.items()}
    finally:
        md.save_position()
        data.close()
    return out


def profile_child(config_path: Path, seconds: float, top: int) -> int:
    """Run the service in this process under yappi (CPU clock, every thread); print where
    its CPU goes. yappi's own overhead inflates every figure: read the shares, not the sums."""
    import yappi

    from slowdown.analysis.config import load_config
    from slowdown.probe.daemon.service import run_service
    from slowdown.probe.runtime import logs

    logs.setup(False)
    config = load_config(config_path)
    yappi.set_clock_type("cpu")
    yappi.start(builtins=True, profile_threads=True)
    rc = run_service(config, duration=seconds)
    yappi.stop()
    threads = sorted(yappi.get_thread_stats(), key=lambda t: -t.ttot)
    total = sum(t.ttot for t in threads) or 1.0
    print("| thread | CPU s (profiled) | share |\n|---|---|---|")
    for t in threads:
        print(f"| {t.name} ({t.id}) | {t.ttot:.3f} | {t.ttot / total * 100:.1f} % |")
    funcs = yappi.get_func_stats()
    for key, title in (("tsub", "own CPU"), ("ttot", "CPU including callees")):
        print(f"\n| function ({title}) | calls | own s | incl. s | share of all |")
        print("|---|---|---|---|---|")
        for f in sorted(funcs, key=lambda f: -getattr(f, key))[:top]:
            where = f"{Path(f.module).name}:{f.lineno}" if f.lineno else Path(f.module).name
            print(f"| {f.name} ({where}) | {f.ncall} | {f.tsub:.3f} | {f.ttot:.3f} "
                  f"| {getattr(f, key) / total * 100:.1f} % |")
    return rc


def scheduler_child(mode: str, seconds: float) -> int:
    """Tick start delay and CPU of a scheduler alone, without probes; prints JSON.

    ``apscheduler``: the service's scheduler set-up (BackgroundScheduler, a pool of 4 threads,
    a tick job every second at the host's phase and a live-state job half a second later),
    both jobs doing nothing but note the time. ``thread``: one thread that sleeps until each
    tick and notes the time."""
    import datetime as dt

    from apscheduler.executors.pool import ThreadPoolExecutor
    from apscheduler.schedulers.background import BackgroundScheduler
    from apscheduler.triggers.interval import IntervalTrigger

    phase = phase_of(HOST, 1.0)
    late: list[float] = []

    def tick() -> None:
        lag = (time.time() - phase) % 1.0
        late.append(lag if lag < 0.5 else lag - 1.0)

    first = (time.time() // 1 + 1) + phase
    c0, w0 = os.times(), time.monotonic()
    if mode == "apscheduler":
        scheduler = BackgroundScheduler(
            timezone=dt.timezone.utc, executors={"default": ThreadPoolExecutor(4)},
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": 1})
        start = dt.datetime.fromtimestamp(first, dt.timezone.utc)
        scheduler.add_job(tick, IntervalTrigger(seconds=1, start_date=start))
        scheduler.add_job(lambda: None, IntervalTrigger(
            seconds=1, start_date=start + dt.timedelta(seconds=0.5)))
        scheduler.start()
        time.sleep(seconds)
        scheduler.shutdown(wait=True)
    else:
        stop = threading.Event()

        def loop() -> None:
            due = first
            while not stop.wait(max(0.0, due - time.time())):
                tick()
                due += 1.0

        thread = threading.Thread(target=loop, daemon=True)
        thread.start()
        time.sleep(seconds)
        stop.set()
        thread.join()
    c1, wall = os.times(), time.monotonic() - w0
    late.sort()
    print(json.dumps({
        "ticks": len(late), "p50": late[len(late) // 2],
        "p99": late[min(len(late) - 1, int(0.99 * len(late)))], "max": late[-1],
        "cpu": (c1.user + c1.system - c0.user - c0.system) / wall * 100}))
    return 0


# --- diagnostics: where a late tick's delay comes from -------------------------------------


def _patch(owner: Any, name: str, before) -> None:
    """Call ``before()`` first thing whenever ``owner.name`` is called."""
    original = getattr(owner, name)

    def wrapper(*args, **kwargs):
        before()
        return original(*args, **kwargs)

    setattr(owner, name, wrapper)


def _span(owner: Any, name: str, kind: str, spans: list) -> None:
    """Note (kind, thread, start, end) of every call of ``owner.name``."""
    original = getattr(owner, name)

    def wrapper(*args, **kwargs):
        t0 = time.time()
        try:
            return original(*args, **kwargs)
        finally:
            spans.append((kind, threading.current_thread().name, t0, time.time()))

    setattr(owner, name, wrapper)


def _tick_in_scheduler_thread(service: Any) -> None:
    """The tick job runs in APScheduler's own thread (its ``DebugExecutor`` calls the job
    directly): no hand-off to a pool thread. The tick only writes a line to each idle
    worker's pipe, so it cannot hold the scheduler up. Since commit 56b564a the service
    does this itself, and ``as-is`` is the same."""
    from apscheduler.executors.debug import DebugExecutor

    try:
        service.scheduler._lookup_executor("direct")  # the service does it itself (56b564a)
    except KeyError:
        service.scheduler.add_executor(DebugExecutor(), "direct")
    add_job = service.scheduler.add_job

    def add(func, *args, **kwargs):
        if kwargs.get("id") == "tick":
            kwargs["executor"] = "direct"
        return add_job(func, *args, **kwargs)

    service.scheduler.add_job = add


_TRACE: dict[str, list[float]] = {}  # the trace child's wake and pick-up lists


def _tick_thread(service: Any) -> None:
    """No scheduler for the tick: a thread of its own sleeps until each tick is due
    (``Event.wait``) and calls ``Service.tick`` itself; the other jobs stay as they are."""
    add_job = service.scheduler.add_job

    def add(func, *args, **kwargs):
        if kwargs.get("id") != "tick":
            return add_job(func, *args, **kwargs)
        interval = service.config.interval
        due = args[0].start_date.timestamp()

        def loop() -> None:
            nonlocal due
            while not service.stop_event.wait(max(0.0, due - time.time())):
                woke = time.time()
                _TRACE["wakes"].append(woke)
                _TRACE["picks"].append(woke)
                service.tick()
                due += interval
                while due < time.time():
                    due += interval

        threading.Thread(target=loop, name="tick", daemon=True).start()
        return None

    service.scheduler.add_job = add


VARIANTS: dict[str, Callable[[Any], None] | None] = {
    "as-is": None,
    "direct-tick": _tick_in_scheduler_thread,
    "tick-thread": _tick_thread,
}


def trace_child(config_path: Path, seconds: float, variant: str, out: Path) -> int:
    """Run the service in this process as ``run`` runs it, instrumented; write JSON to ``out``.

    For every tick: when the scheduler thread woke (entry of APScheduler's ``_process_jobs``),
    when a pool thread picked the job up (entry of APScheduler's ``run_job``) and when
    ``Service.tick`` started. Spans of the other jobs (minute flush, live state), of the
    reader threads' message handling and of every garbage collection (``gc.callbacks``)."""
    import gc

    import apscheduler.executors.debug as debug
    import apscheduler.executors.pool as pool
    from apscheduler.schedulers.base import BaseScheduler

    from slowdown.analysis.config import load_config
    from slowdown.analysis.store.live import LiveFile
    from slowdown.probe.daemon.service import Service
    from slowdown.probe.runtime import logs
    from slowdown.probe.runtime.runner import TargetRunner

    logs.setup(False)
    config = load_config(config_path)
    wakes: list[float] = []
    picks: list[float] = []
    starts: list[float] = []
    spans: list = []
    _TRACE.update(wakes=wakes, picks=picks)
    _patch(BaseScheduler, "_process_jobs", lambda: wakes.append(time.time()))
    for executor in (pool, debug):  # each imported run_job by name
        _patch(executor, "run_job", lambda: picks.append(time.time()))
    _patch(Service, "tick", lambda: starts.append(time.time()))
    _span(Service, "flush", "flush", spans)
    _span(LiveFile, "write", "live", spans)
    _span(Service, "_watch_scheduler", "main beat", spans)
    _span(TargetRunner, "_message", "worker message", spans)
    gc_open: dict[int, float] = {}

    def on_gc(phase: str, info: dict) -> None:
        ident = threading.get_ident()
        if phase == "start":
            gc_open[ident] = time.time()
        elif ident in gc_open:
            spans.append((f"gc gen{info['generation']}", threading.current_thread().name,
                          gc_open.pop(ident), time.time()))

    gc.callbacks.append(on_gc)
    service = Service(config, duration=seconds)
    change = VARIANTS[variant]
    if change is not None:
        change(service)
    rc = service.run()
    gc.callbacks.remove(on_gc)
    out.write_text(json.dumps({"variant": variant, "phase": service.phase, "wakes": wakes,
                               "picks": picks, "starts": starts, "spans": spans,
                               "objects": len(gc.get_objects())}))
    return rc


def _late(t: float, phase: float) -> float:
    late = (t - phase) % 1.0
    return late if late < 0.5 else late - 1.0


def _quantiles(values: list[float]) -> dict[str, float]:
    v = sorted(values) or [float("nan")]
    return {"n": len(v), "p50": v[len(v) // 2], "p99": v[min(len(v) - 1, int(0.99 * len(v)))],
            "max": v[-1]}


def trace(config: Path, base: Path, seconds: float, variants: list[str], progress,
          raw: Path | None = None) -> str:
    """Each variant: the instrumented service for ``seconds``; meanwhile this process sleeps
    until every tick's scheduled moment (the anchor at the same moments) and notes how late
    it woke. Variants run one after another, alternating, twice if there are several."""
    phase = phase_of(HOST, 1.0)
    order = variants * 2 if len(variants) > 1 else variants
    rows, late_rows = [], []
    for i, variant in enumerate(order, 1):
        out = base / f"trace-{i}.json"
        progress(f"trace {i}/{len(order)}: {variant} for {seconds:g} s")
        child = subprocess.Popen(
            [sys.executable, "-m", "bench.bench_service", "--trace-child", str(config),
             f"{seconds:g}", variant, str(out)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            text=True)
        anchor: dict[int, float] = {}
        wake = (time.time() - phase) // 1 + 1 + phase
        while child.poll() is None:
            time.sleep(max(0.0, wake - time.time()))
            anchor[round(wake - phase)] = time.time() - wake
            wake += 1
            while wake < time.time():
                wake += 1
        err = child.stderr.read()
        reap_orphans(5.0)
        if child.returncode or not out.exists():
            rows.append(f"| {variant} | failed ({child.returncode}): {err.strip()[-200:]} |")
            continue
        t = json.loads(out.read_text())
        if raw is not None:  # keep the raw trace, with the anchor, beside --json
            t["anchor"] = anchor
            raw.with_name(f"{raw.stem}-trace-{i}.json").write_text(json.dumps(t))
        out.unlink()
        starts, wakes, picks, spans = t["starts"], t["wakes"], t["picks"], t["spans"]
        delays = [_late(s, phase) for s in starts]
        # The scheduler wakes for every job (tick, live, flush); the tick's wake is the last
        # one before its start, and its pick-up the last one before its start.
        wake_late, pick_late = [], []
        late_ticks = []
        for s, d in zip(starts, delays):
            scheduled = s - d
            w = max((x for x in wakes if scheduled - 0.1 <= x <= s), default=None)
            p = max((x for x in picks if scheduled - 0.1 <= x <= s), default=None)
            if w is None or p is None:
                continue
            wake_late.append(w - scheduled)
            pick_late.append(p - w)
            if d > GOAL_P99:
                overlap = sorted({f"{k} ({th})" for k, th, a, b in spans
                                  if a <= s and b >= scheduled - 0.001})
                gcs = [b - a for k, _, a, b in spans if k.startswith("gc")
                       and a <= s and b >= scheduled - 0.001]
                late_ticks.append((scheduled, d, w - scheduled, p - w, s - p,
                                   anchor.get(round(scheduled - phase)), overlap, sum(gcs)))
        anchor_values = [anchor[round(s - d - phase)] for s, d in zip(starts, delays)
                         if round(s - d - phase) in anchor]
        q, qa = _quantiles(delays), _quantiles(anchor_values)
        qw, qp = _quantiles(wake_late), _quantiles(pick_late)
        progress(f"  {variant}: tick start delay p50 {q['p50'] * 1e3:.2f} p99 "
                 f"{q['p99'] * 1e3:.2f} max {q['max'] * 1e3:.2f} ms; anchor p99 "
                 f"{qa['p99'] * 1e3:.2f} ms; {len(late_ticks)} ticks > 5 ms")
        gc_spans = [(k, b - a) for k, _, a, b in spans if k.startswith("gc")]
        gc2 = [x for k, x in gc_spans if k == "gc gen2"]
        rows.append(
            f"| {variant} | {q['n']} | {q['p50'] * 1e3:.2f} / {q['p99'] * 1e3:.2f} / "
            f"{q['max'] * 1e3:.2f} ms | {qw['p99'] * 1e3:.2f} ms | {qp['p99'] * 1e3:.2f} ms | "
            f"{qa['p50'] * 1e3:.2f} / {qa['p99'] * 1e3:.2f} / {qa['max'] * 1e3:.2f} ms | "
            f"{sum(d > GOAL_P99 for d in delays)} | {len(gc2)} gen2, longest "
            f"{max(gc2, default=0) * 1e3:.1f} ms; {len(gc_spans)} in all |")
        for sch, d, w, p, r, a, overlap, gct in late_ticks:
            late_rows.append(
                f"| {variant} | {time.strftime('%H:%M:%S', time.localtime(sch))} "
                f"| {d * 1e3:.2f} ms | {w * 1e3:.2f} ms | {p * 1e3:.2f} ms | {r * 1e3:.2f} ms "
                f"| {'n/a' if a is None else f'{a * 1e3:.2f} ms'} | {gct * 1e3:.1f} ms "
                f"| {', '.join(overlap) or '-'} |")
    return "\n".join([
        "## Where a late tick's delay comes from", "",
        f"The service in-process, instrumented (`--trace-child`), {seconds:g} s per variant; "
        "the anchor is this process sleeping until each tick's scheduled moment.", "",
        "| variant | ticks | tick start delay p50 / p99 / max | the tick's thread woke late "
        "(APScheduler's, or the tick thread), p99 | from that wake to the tick's run_job "
        "(hand-off to a pool thread, or in-thread), p99 | anchor at the same moments "
        "p50 / p99 / max "
        "| ticks > 5 ms | garbage collections |",
        "|---|---|---|---|---|---|---|---|", *rows, "",
        "Every tick later than 5 ms: delay = thread wake + hand-off + run_job to tick; "
        "what overlapped it:", "",
        "| variant | scheduled | delay | thread woke | hand-off | run_job to tick | anchor "
        "| GC inside | overlapping (thread) |", "|---|---|---|---|---|---|---|---|---|",
        *late_rows])


def diagnose(config: Path, workspace: Path, seconds: float, progress) -> str:
    out = ["## Where the CPU goes", ""]
    progress("diagnostics: wake-up floor")
    rows = [(rate, wakeup_floor(rate, 5.0)) for rate in (1.0, 10.0, 100.0)]
    out += ["CPU one Python thread is charged per wake-up when it does nothing but "
            "`threading.Event().wait(1 / rate)`:", "",
            "| wake-ups per second | CPU per wake-up | % of one core |", "|---|---|---|"]
    out += [f"| {rate:g} | {cpu * 1e6:,.0f} us | {cpu * rate * 100:.3f} % |"
            for rate, cpu in rows]
    progress("diagnostics: CPU of a worker's tick")
    ops = worker_ops_cpu(workspace, 15)
    out += ["", f"CPU (thread time) of each part of a worker's tick on {workspace}, median of "
            "15 ticks:", "", "| part | " + " | ".join(ops) + " |", "|---|---|---|"]
    for part in next(iter(ops.values())):
        out.append(f"| {part} | " + " | ".join(f"{ops[m][part] * 1e6:,.0f} us" for m in ops)
                   + " |")
    out += ["", f"A scheduler alone, without probes or workers, {seconds:g} s each (tick "
            "start delay as the service computes it; CPU of the whole process after its "
            "imports):", "", "| scheduler | ticks | p50 | p99 | max | CPU, % of one core |",
            "|---|---|---|---|---|---|"]
    for mode in ("apscheduler", "thread"):
        progress(f"diagnostics: {mode} alone for {seconds:g} s")
        done = subprocess.run([sys.executable, "-m", "bench.bench_service", "--scheduler-child",
                               mode, f"{seconds:g}"], capture_output=True, text=True)
        if done.returncode:
            out.append(f"| {mode} | failed: {done.stderr.strip()[-300:]} | | | | |")
            continue
        r = json.loads(done.stdout)
        name = ("APScheduler as the service sets it up (tick + live jobs)" if mode ==
                "apscheduler" else "one plain thread sleeping until each tick")
        out.append(f"| {name} | {r['ticks']} | {r['p50'] * 1e3:.2f} ms | {r['p99'] * 1e3:.2f} ms "
                   f"| {r['max'] * 1e3:.2f} ms | {r['cpu']:.3f} % |")
    progress(f"diagnostics: the service under yappi for {seconds:g} s")
    done = subprocess.run([sys.executable, "-m", "bench.bench_service", "--profile-child",
                           str(config), f"{seconds:g}"], capture_output=True, text=True)
    out += ["", f"The service under yappi (CPU clock, all threads) for {seconds:g} s "
            "(workers are other processes, not in it):", "", done.stdout.strip()]
    if done.returncode:
        out.append(f"(exit status {done.returncode}: {done.stderr.strip()[-500:]})")
    return "\n".join(out)


def parse_seconds(text: str) -> float:
    from slowdown.analysis.units import parse_duration

    return float(parse_duration(text))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="one 15 s run, 64 MiB data files, two plain directories (smoke)")
    parser.add_argument("--runs", type=int, default=1,
                        help="runs one after another (1); 0 with --diagnose: diagnostics only")
    parser.add_argument("--duration", default=None, help="each run's length (10m)")
    parser.add_argument("--dir", type=Path, default=None,
                        help=f"where everything goes (default {DEFAULT_DIR}; the root disk)")
    parser.add_argument("--second", choices=("loop", "dir"), default=None,
                        help="second target on a loop-mounted ext4 image (default; root) or in "
                        "a second directory on the root disk (--quick's default)")
    parser.add_argument("--size", default=None, help="data.bin size per target in GiB (2)")
    parser.add_argument("--pool-files", type=int, default=None, help="md pool size (10000)")
    parser.add_argument("--warmup", default="30s", help="steady state starts after (30s)")
    parser.add_argument("--full-every", default="10s", help="PSS/USS sampled every (10s)")
    parser.add_argument("--keep", action="store_true",
                        help="keep the workspaces (and image) for the next run")
    parser.add_argument("--json", type=Path, default=None, help="also write results here")
    parser.add_argument("--diagnose", default=None, metavar="DURATION",
                        help="after the runs: wake-up floor, a worker's tick CPU per part, "
                        "and the service under yappi for DURATION (pip install yappi)")
    parser.add_argument("--trace", default=None, metavar="DURATION",
                        help="after the runs: the service instrumented for DURATION per "
                        "variant, to find where late ticks' delay comes from")
    parser.add_argument("--variants", default="as-is",
                        help=f"comma-separated, for --trace: {', '.join(VARIANTS)}")
    parser.add_argument("--trace-child", nargs=4, help=argparse.SUPPRESS)
    parser.add_argument("--profile-child", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--scheduler-child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.scheduler_child:
        return scheduler_child(args.scheduler_child[0], float(args.scheduler_child[1]))
    if args.trace_child:
        c, secs, variant, out = args.trace_child
        return trace_child(Path(c), float(secs), variant, Path(out))
    if args.profile_child:
        return profile_child(Path(args.profile_child[0]), float(args.profile_child[1]), 25)

    duration = parse_seconds(args.duration or ("15s" if args.quick else "10m"))
    size = int(float(args.size) * GIB) if args.size else (64 * MIB if args.quick else 2 * GIB)
    size -= size % MIB
    pool = args.pool_files or (100 if args.quick else 10_000)
    second = args.second or ("dir" if args.quick else "loop")
    warmup = min(parse_seconds(args.warmup), duration / 3)
    base = (args.dir or DEFAULT_DIR).resolve()
    made_base = not base.exists()
    base.mkdir(parents=True, exist_ok=True)
    become_subreaper()

    def progress(text: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)

    header = machine()
    runs: list[dict[str, Any]] = []
    config = base / "bench-service.toml"
    database = base / "db" / "slowdown.db"
    with contextlib.ExitStack() as stack:
        if second == "loop":
            mnt = stack.enter_context(loop_ext4(base / "ext4.img", base / "mnt",
                                                size + size // 8 + 256 * MIB, args.keep))
            second_path = mnt / "loop"
        else:
            second_path = base / "second"
        targets = [BenchTarget("root", base / "root", size, pool, 10),
                   BenchTarget(second, second_path, size, pool, 10)]
        write_config(config, database, targets)
        if not args.keep:
            stack.callback(config.unlink, missing_ok=True)
            stack.callback(cleanup, config)
        progress(f"preparing {len(targets)} workspaces of {size / GIB:.2f} GiB + {pool} files")
        took = prepare(config)
        for t in targets:
            header.append(f"target {t.name}: {t.path} on {filesystem_of(t.path)}, data.bin "
                          f"{size / GIB:.2f} GiB, pool {pool} files in 10 directories")
        header.append(f"prepared in {took:.0f} s; interval 1 s; each run "
                      f"`{sys.executable} -m slowdown.probe.command.main --config {config} run "
                      f"--duration {duration:g}s`")
        names = {str(t.path): t.name for t in targets}
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
        diagnosis = (diagnose(config, targets[0].data.parent, parse_seconds(args.diagnose),
                              progress) if args.diagnose else None)
        if args.trace:
            variants = args.variants.split(",")
            unknown = set(variants) - set(VARIANTS)
            if unknown:
                raise SystemExit(f"unknown variants: {', '.join(sorted(unknown))}")
            traced = trace(config, base, parse_seconds(args.trace), variants, progress,
                           args.json)
            diagnosis = traced if diagnosis is None else f"{diagnosis}\n\n{traced}"
        if not args.keep:
            for i in range(args.runs):
                (base / f"service-{i + 1}.log").unlink(missing_ok=True)
            for leftover in database.parent.glob(database.name + "*"):
                leftover.unlink()
            with contextlib.suppress(OSError):
                database.parent.rmdir()
    if not args.keep and made_base:
        with contextlib.suppress(OSError):
            base.rmdir()
    with open("/proc/loadavg") as f:
        header.append(f"load average at end: {' '.join(f.read().split()[:3])}")
    print(report(runs, header))
    if diagnosis:
        print(diagnosis)
    return 0


if __name__ == "__main__":
    sys.exit(main())
