"""Where the probing service's CPU goes, on the two targets of bench/bench_service.py.

Run from the repository root with the package importable (installed, or on PYTHONPATH)::

    python -m bench.service_cpu --duration 60s         # the figures of docs/BENCHMARKS-probe.md

The CPU one Python thread is charged per wake-up (at 1, 10 and 100 wake-ups a second), the CPU
(thread time) of each part of a worker's tick, a scheduler alone without probes (APScheduler as
the service sets it up, and one plain thread) for ``--duration`` each, and the service under
yappi (``pip install yappi``) for ``--duration``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from bench.workspaces import (
    HOST,
    add_target_options,
    parse_seconds,
    print_on_targets,
    progress,
)
from slowdown.probe.daemon.service import phase_of


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
        done = subprocess.run([sys.executable, "-m", "bench.service_cpu", "--scheduler-child",
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
    done = subprocess.run([sys.executable, "-m", "bench.service_cpu", "--profile-child",
                           str(config), f"{seconds:g}"], capture_output=True, text=True)
    out += ["", f"The service under yappi (CPU clock, all threads) for {seconds:g} s "
            "(workers are other processes, not in it):", "", done.stdout.strip()]
    if done.returncode:
        out.append(f"(exit status {done.returncode}: {done.stderr.strip()[-500:]})")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", default="60s",
                        help="each scheduler alone, and the service under yappi (60s)")
    add_target_options(parser)
    parser.add_argument("--profile-child", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--scheduler-child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.scheduler_child:
        return scheduler_child(args.scheduler_child[0], float(args.scheduler_child[1]))
    if args.profile_child:
        return profile_child(Path(args.profile_child[0]), float(args.profile_child[1]), 25)
    return print_on_targets(args, lambda bench: diagnose(
        bench.config, bench.targets[0].data.parent, parse_seconds(args.duration), progress))


if __name__ == "__main__":
    sys.exit(main())
