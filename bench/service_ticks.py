"""Where a late tick's delay comes from: the probing service in a child, instrumented, on the two
targets of bench/bench_service.py; design experiments that change how the tick is scheduled.

Run from the repository root with the package importable (installed, or on PYTHONPATH)::

    python -m bench.service_ticks --duration 10m --variants as-is,direct-tick
    python -m bench.service_ticks --duration 5m --variants as-is,direct-tick,tick-thread

The service runs in a child as ``run`` runs it, instrumented: when APScheduler's thread woke,
when a pool thread picked the tick job up, when ``Service.tick`` started; spans of the other
jobs, of the reader threads' message handling and of every garbage collection. Meanwhile this
process sleeps until each tick's scheduled moment and notes how late it woke: the anchor at
the same moments. ``--variants`` runs the service as it is (``as-is``) and with a change
applied in the child (``direct-tick``: the tick job run by APScheduler's own thread;
``tick-thread``: a thread of its own sleeping until each tick), alternating, each twice.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.workspaces import (
    GOAL_P99,
    HOST,
    add_target_options,
    parse_seconds,
    print_on_targets,
    progress,
    reap_orphans,
)
from slowdown.probe.daemon.service import phase_of


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
            [sys.executable, "-m", "bench.service_ticks", "--trace-child", str(config),
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", default="10m", help="the traced service per variant (10m)")
    parser.add_argument("--variants", default="as-is",
                        help=f"comma-separated: {', '.join(VARIANTS)}")
    add_target_options(parser)
    parser.add_argument("--json", type=Path, default=None,
                        help="keep the raw traces beside this name (NAME-trace-N.json)")
    parser.add_argument("--trace-child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.trace_child:
        c, secs, variant, out = args.trace_child
        return trace_child(Path(c), float(secs), variant, Path(out))
    variants = args.variants.split(",")
    unknown = set(variants) - set(VARIANTS)
    if unknown:
        raise SystemExit(f"unknown variants: {', '.join(sorted(unknown))}")
    return print_on_targets(args, lambda bench: trace(
        bench.config, bench.base, parse_seconds(args.duration), variants, progress, args.json))


if __name__ == "__main__":
    sys.exit(main())
