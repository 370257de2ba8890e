"""What the per-server counters of ``/metrics`` cost the service: the time ``Recorder.served``
takes with the metrics observer and without (the runner's reader thread calls it after each
op, outside the op's timed region), and a scrape's time and size with and without the
servers' series.

    python -m bench.bench_server_metrics               # the figures of docs/BENCHMARKS.md
    python -m bench.bench_server_metrics --quick       # a second
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from prometheus_client import generate_latest

from slowdown.analysis.config import loads
from slowdown.probe.daemon.service import Service


def service(directory: Path, metrics: bool) -> Service:
    """A real Service object, not running: its recorder and metrics driven here."""
    text = (f'database = "{directory}/n1-{metrics}.db"\nhost = "n1"\n[[target]]\n'
            f'name = "work"\npath = "{directory}/work"\n' + ("[metrics]\n" if metrics else ""))
    return Service(loads(text, directory / "slowdown.toml"))


def served_cost(services: dict[bool, Service], servers: list[str], calls: int, runs: int
                ) -> dict[bool, list[float]]:
    """Microseconds per ``served`` call, per run, with the observer (True) and without,
    the two alternated so that both see the same machine."""
    now = time.time()
    out: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(runs):
        for metrics, s in services.items():
            t0 = time.perf_counter()
            for k in range(calls):
                s.recorder.served("work", "data-read", servers[k % len(servers)], 0.002, now)
            out[metrics].append((time.perf_counter() - t0) / calls * 1e6)
    return out


def scrape(registry, times: int) -> tuple[float, int]:
    """Milliseconds per scrape, and its size in bytes."""
    t0 = time.perf_counter()
    for _ in range(times):
        text = generate_latest(registry)
    return (time.perf_counter() - t0) / times * 1e3, len(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--servers", type=int, default=100)
    parser.add_argument("--calls", type=int, default=50_000)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    calls, runs = (5_000, 2) if args.quick else (args.calls, args.runs)
    names = [f"h{i}:/bricks/b{i}" for i in range(1, args.servers + 1)]
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        plain = service(directory, False)
        with_metrics = service(directory, True)
        before = scrape(with_metrics.metrics.registry, 20)
        cost = served_cost({False: plain, True: with_metrics}, names, calls, runs)
        for name in names:  # every server in the md probe's series too
            with_metrics.recorder.served("work", "md-stat", name, 0.001, time.time())
        after = scrape(with_metrics.metrics.registry, 20)
        with_metrics.metrics.stop()
    print(f"Recorder.served, {args.servers} servers, median of {runs} runs of {calls} calls:")
    for metrics, label in ((False, "without [metrics]"), (True, "with [metrics]")):
        values = cost[metrics]
        print(f"  {label:<18} {statistics.median(values):6.2f} us per op  "
              f"(runs {', '.join(f'{v:.2f}' for v in values)})")
    print(f"scrape of one target: {before[0]:.1f} ms, {before[1]:,} bytes without per-server "
          f"series; {after[0]:.1f} ms, {after[1]:,} bytes with {args.servers} servers x 2 "
          "probes")


if __name__ == "__main__":
    main()
