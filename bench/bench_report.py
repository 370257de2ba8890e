"""Benchmark of ``slowdown report``: 30 days of minute data, made into one HTML file and
rendered in headless Chromium (Debian's ``chromium``, driven by playwright).

Run from the repository root with the package and its test extra installed
(``pip install -e '.[test]'``)::

    python -m bench.bench_report              # the figures of docs/BENCHMARKS-report.md
    python -m bench.bench_report --quick      # 2 days, 3 runs (a minute)

The database (30 days x 1440 minutes x 2 targets x 6 ops of 60 lognormal latencies each, node
context every minute, and a bad afternoon: md ops ten times slower for an hour, a probe stuck
for 40 s, errors; written through ``Store.write`` one transaction per day, then a rebaseline
on day 20) is built once and kept in ``--dir``; a later run reuses it while its parameters
match. Goals of the issue: the page renders in under 3 s and the file is under 10 MB.

Measured: the report's generation (``slowdown report`` as a fresh process, wall, and its peak
RSS), the file's size, and the render: wall time from ``page.goto`` of the file to the page's
``<body data-rendered>`` mark (set by its script once every figure is drawn), each in a fresh
browser page, plus the script's own ``performance.now()`` at that mark (from navigation start).
Medians of ``--runs`` runs.

``--against TREE`` also times the generation by another source tree of the project (a
checkout of an earlier commit: ``git worktree add /tmp/before COMMIT``), in the same rounds,
alternating with this one, and prints the ratio: what a change gained, measured side by side.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from bench.kept_database import keep_info, kept_info
from slowdown.analysis.histogram import Histogram
from slowdown.analysis.stats import baseline
from slowdown.analysis.store import Store, schema
from slowdown.analysis.store.records import MINUTE, NodeContext, Record

T0 = 1_767_225_600  # 2026-01-01T00:00:00Z
DAY = 86400
HOST = "node01"
TARGETS = ("scratch", "work")
OPS = ("data-read", "data-write", "md-stat", "md-read", "md-delete", "md-write")
MD_MEDIAN, DATA_MEDIAN, SIGMA = 200e-6, 3e-3, 0.5
PER_MINUTE = 60
SEED = 20261121
BAD_DAY, BAD_HOUR = 12, 14  # md ops of "work" 10x slower 14:00-15:00 UTC on day 12
REBASELINE_DAY = 20
CHROMIUM = "/usr/bin/chromium"
GOAL_RENDER, GOAL_BYTES = 3.0, 10e6
DEFAULT_DIR = Path("/tmp/slowdown-bench-report")


def params(days: int) -> dict:
    return {"days": days, "t0": T0, "targets": list(TARGETS), "ops": list(OPS),
            "per_minute": PER_MINUTE, "seed": SEED, "schema": schema.VERSION}


def build(db: Path, days: int) -> dict:
    building = db.with_name(db.name + ".building")
    for suffix in ("", "-wal", "-shm"):
        Path(str(building) + suffix).unlink(missing_ok=True)
    rng = np.random.default_rng(SEED)
    medians = np.array([MD_MEDIAN if op.startswith("md-") else DATA_MEDIAN for op in OPS])
    mu = np.log(medians)[None, None, :, None]
    began = time.perf_counter()
    with Store(building) as store:
        for day in range(days):
            samples = rng.lognormal(mu, SIGMA, (1440, len(TARGETS), len(OPS), PER_MINUTE))
            if day == BAD_DAY:
                md = [i for i, op in enumerate(OPS) if op.startswith("md-")]
                rows = slice(BAD_HOUR * 60, BAD_HOUR * 60 + 60)
                samples[rows, TARGETS.index("work"), md[0]:md[-1] + 1] *= 10
            load = rng.gamma(2.0, 0.6, 1440)
            records, node = [], []
            for m in range(1440):
                start = T0 + day * DAY + m * MINUTE
                for ti, target in enumerate(TARGETS):
                    for oi, op in enumerate(OPS):
                        h = Histogram()
                        h.record_many(samples[m, ti, oi])
                        bad = day == BAD_DAY and target == "work" and op == "md-stat" and \
                            m in (BAD_HOUR * 60 + 20, BAD_HOUR * 60 + 21)
                        records.append(Record(HOST, target, op, start, h,
                                              errors=2 if bad else 0, skipped=1 if bad else 0,
                                              stuck=40.0 if bad else 0.0))
                node.append(NodeContext(HOST, start, {
                    "load1": float(load[m]), "cpu": float(min(100, 12 * load[m])),
                    "memory": 35.0 + 10 * np.sin(m / 229), "disk_read_bytes": int(2e6 * load[m]),
                    "disk_write_bytes": int(1e6), "net_rx_bytes": int(3e6 * load[m]),
                    "net_tx_bytes": int(1e6)}))
            store.write(records, node)
            if day + 1 == REBASELINE_DAY:
                end = T0 + REBASELINE_DAY * DAY
                baseline.rebaseline(store, end, "storage firmware update", end - 7 * DAY, end)
        store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        records = store.conn.execute("SELECT count(*) FROM minutes").fetchone()[0]
    os.replace(building, db)
    info = {"params": params(days), "end": T0 + days * DAY, "records": records,
            "write_seconds": time.perf_counter() - began, "bytes": db.stat().st_size,
            "built": utc_now()}
    keep_info(db, info)
    return info


def database(directory: Path, days: int, rebuild: bool) -> tuple[Path, dict, bool]:
    directory.mkdir(parents=True, exist_ok=True)
    db = directory / f"report-{days}d-{len(TARGETS)}x{len(OPS)}.db"
    info = kept_info(db, rebuild)
    if info.get("params") == params(days) and info.get("bytes") == db.stat().st_size:
        return db, info, False
    return db, build(db, days), True


def utc_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def generate(db: Path, end: int, days: int, out: Path, config: Path,
             path: Path | None = None, extra: tuple[str, ...] = ()) -> tuple[float, int]:
    """Wall seconds and peak RSS (KiB) of one ``slowdown report`` process (importing the
    package from ``path`` first, if given)."""
    argv = ["/usr/bin/time", "-f", "%M", sys.executable, "-m", "slowdown.analysis.cli",
            "report", "--db", str(db), "--at", f"@{end}", "--since", f"{days}d", "-o", str(out),
            *extra]
    env = {**os.environ, "SLOWDOWN_CONFIG": str(config)}
    if path is not None:
        env["PYTHONPATH"] = str(path)
    began = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env)
    took = time.perf_counter() - began
    if done.returncode:
        raise SystemExit(f"slowdown report failed: {done.stderr[-2000:]}")
    return took, int(done.stderr.strip().splitlines()[-1])


def importable(tree: Path, directory: Path) -> Path:
    """A directory from which ``import slowdown`` takes the package of source ``tree`` (the
    layout's ``slowdown.analysis = analysis``, ``slowdown.probe = probe``), ahead of the
    installed one."""
    for part in ("analysis", "probe"):
        if not (tree / part / "__init__.py").is_file():
            raise SystemExit(f"--against {tree}: no {part}/ package there")
    package = directory / "against" / "slowdown"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text("")
    for part in ("analysis", "probe"):
        link = package / part
        if link.is_symlink():
            link.unlink()
        link.symlink_to(tree.resolve() / part)
    return package.parent


def render(browser, path: Path) -> tuple[float, int, list]:
    """Wall seconds to the rendered mark, the page's own milliseconds, what it logged."""
    page = browser.new_page(viewport={"width": 1600, "height": 1000})
    logged: list = []
    page.on("console", lambda m: logged.append((m.type, m.text)))
    page.on("pageerror", lambda e: logged.append(("pageerror", str(e))))
    page.on("request", lambda r: logged.append(("request", r.url))
            if r.url != path.as_uri() else None)
    try:
        began = time.perf_counter()
        page.goto(path.as_uri())
        page.wait_for_selector("body[data-rendered]", timeout=120_000)
        long = page.locator("figure.long").count()  # the long-period figures' own script
        if long:
            page.wait_for_selector("body[data-long-rendered]", timeout=120_000)
        servers = page.locator("figure.servers").count()  # the server heat maps' script
        if servers:
            page.wait_for_selector("body[data-servers-rendered]", timeout=120_000)
        took = time.perf_counter() - began
        mark = "serversRendered" if servers else "longRendered" if long else "rendered"
        own = int(page.evaluate("document.body.dataset." + mark))
    finally:
        page.close()
    return took, own, logged


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    parser.add_argument("--runs", type=int, default=None)
    parser.add_argument("--quick", action="store_true", help="2 days, 3 runs")
    parser.add_argument("--rebuild", action="store_true")
    parser.add_argument("--no-long", action="store_true",
                        help="the report without its long-period figures (on from 14 days)")
    parser.add_argument("--against", type=Path, metavar="TREE",
                        help="also time the generation by this source tree, interleaved")
    args = parser.parse_args(argv)
    days = 2 if args.quick else 30
    runs = args.runs or (3 if args.quick else 7)
    db, info, built = database(args.dir, days, args.rebuild)
    print(f"database: {db} ({info['records']:,} minute records, "
          f"{info['bytes'] / 2**20:.1f} MiB, {'built now' if built else 'reused'})")
    config = args.dir / "slowdown.toml"
    config.write_text(f'database = "{db}"\nwindows = ["1m", "10m", "1h"]\n'
                      'statistics = ["median", "q95"]\n' + "".join(
                          f'\n[[target]]\nname = "{t}"\npath = "{args.dir}/workspace/{t}"\n'
                          'data_size = "1GiB"\n' for t in TARGETS))
    out = args.dir / f"report-{days}d.html"
    rounds = min(runs, 3) if args.against is None else runs
    other = None if args.against is None else importable(args.against, args.dir)
    generated, theirs = [], []
    for _ in range(rounds):  # interleaved, so that both see the same machine
        generated.append(generate(db, info["end"], days, out, config,
                                  extra=("--no-long",) if args.no_long else ()))
        if other is not None:
            theirs.append(generate(db, info["end"], days, args.dir / "against.html", config,
                                   other))
    size = out.stat().st_size
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--no-first-run"])
        try:
            render(browser, out)  # warm-up: the browser's own caches
            rendered = [render(browser, out) for _ in range(runs)]
        finally:
            browser.close()
    problems = [x for _, _, logged in rendered for x in logged]
    walls = [r[0] for r in rendered]
    owns = [r[1] / 1000 for r in rendered]
    gen = [g[0] for g in generated]
    rss = max(g[1] for g in generated)
    med = statistics.median
    print(f"machine: Python {platform.python_version()}, numpy {np.__version__}, "
          f"{platform.machine()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}; "
          f"{utc_now()}")
    print()
    print("| measure | median | min..max | goal | met? |")
    print("| --- | --- | --- | --- | --- |")
    print(f"| render, goto to drawn (wall, {runs} runs) | {med(walls):.2f} s | "
          f"{min(walls):.2f}..{max(walls):.2f} s | < {GOAL_RENDER:g} s | "
          f"{'yes' if med(walls) < GOAL_RENDER else '**NO**'} |")
    print(f"| render, the page's own clock | {med(owns):.2f} s | {min(owns):.2f}..{max(owns):.2f}"
          " s | | |")
    print(f"| file size | {size / 1e6:.2f} MB | | < {GOAL_BYTES / 1e6:g} MB | "
          f"{'yes' if size < GOAL_BYTES else '**NO**'} |")
    print(f"| generation, `slowdown report` ({len(gen)} runs) | {med(gen):.1f} s | "
          f"{min(gen):.1f}..{max(gen):.1f} s | | |")
    print(f"| generation, peak RSS | {rss / 1024:.0f} MiB | | | |")
    if theirs:
        was = [g[0] for g in theirs]
        was_rss = max(g[1] for g in theirs)
        print(f"| generation by {args.against} ({len(was)} runs, interleaved) | {med(was):.1f} s"
              f" | {min(was):.1f}..{max(was):.1f} s | | |")
        print(f"| generation by {args.against}, peak RSS | {was_rss / 1024:.0f} MiB | | | |")
        ratios = [a / b for (a, _), (b, _) in zip(generated, theirs)]
        print(f"| generation, this / {args.against} (per round) | {med(ratios):.2f} | "
              f"{min(ratios):.2f}..{max(ratios):.2f} | | |")
    if problems:
        print(f"\nconsole messages or requests: {problems}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
