"""Benchmark of the report's server x time heat maps: ``slowdown report`` of the same minute
data with and without per-server records, side by side (generation as a fresh process, file
size, render in headless Chromium).

Run from the repository root with the package and its test extra installed::

    python -m bench.bench_report_servers                  # docs/BENCHMARKS-report.md's figures
    python -m bench.bench_report_servers --days 2 --runs 3   # a quick look

Without: ``bench_report``'s database (``--days`` of minute data, 2 targets x 6 ops, 60
probes a minute each; no per-server record). With: a copy of it to which each ten minutes'
per-server records are added through ``Store.write``: every op's 600 probes of the ten spread
uniformly over its servers (data ops over ``--servers`` bricks, md ops over 2 MDS ranks),
lognormal latencies as the minutes' (sigma 0.5, md 200 us, data 3 ms), one brick 10x slower
during the bad hour of ``bench_report`` (day 12, 14:00-15:00). Both files are built once and
kept in ``--dir``. The rounds alternate the two, so that both see the same machine.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from bench import bench_report as br
from bench.kept_database import keep_info, kept_info
from slowdown.analysis.histogram import Histogram
from slowdown.analysis.store import Store
from slowdown.analysis.store.server_records import TEN, ServerRecord

MDS = ("mds.0", "mds.1")


def params(days: int, servers: int) -> dict:
    return {**br.params(days), "servers": servers, "mds": list(MDS), "per_ten": 600}


def bricks(count: int) -> list[str]:
    return [f"gl{i // 4 + 1}:/bricks/b{i + 1}" for i in range(count)]


def build(plain: Path, db: Path, days: int, servers: int) -> dict:
    building = db.with_name(db.name + ".building")
    for suffix in ("", "-wal", "-shm"):
        Path(str(building) + suffix).unlink(missing_ok=True)
    shutil.copyfile(plain, building)
    rng = np.random.default_rng(br.SEED + 1)
    names = bricks(servers)
    slow = names[2]
    began = time.perf_counter()
    with Store(building) as store:
        for day in range(days):
            records = []
            for ten in range(144):
                start = br.T0 + day * br.DAY + ten * TEN
                bad = day == br.BAD_DAY and br.BAD_HOUR * 6 <= ten < br.BAD_HOUR * 6 + 6
                for target in br.TARGETS:
                    for op in br.OPS:
                        md = op.startswith("md-")
                        these = list(MDS) if md else names
                        which = rng.integers(0, len(these), 600)
                        values = rng.lognormal(np.log(br.MD_MEDIAN if md else br.DATA_MEDIAN),
                                               br.SIGMA, 600)
                        for i, name in enumerate(these):
                            mine = values[which == i] * (10 if bad and name == slow else 1)
                            if mine.size:
                                h = Histogram()
                                h.record_many(mine)
                                records.append(ServerRecord(br.HOST, target, op, name, start, h))
            store.write([], servers=records)
        store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        rows = store.conn.execute("SELECT count(*) FROM server_tens").fetchone()[0]
    os.replace(building, db)
    info = {"params": params(days, servers), "server_rows": rows, "bytes": db.stat().st_size,
            "write_seconds": time.perf_counter() - began, "built": br.utc_now()}
    keep_info(db, info)
    return info


def with_servers(directory: Path, plain: Path, days: int, servers: int,
                 rebuild: bool) -> tuple[Path, dict]:
    db = directory / f"report-{days}d-{servers}servers.db"
    info = kept_info(db, rebuild)
    if info.get("params") == params(days, servers) and info.get("bytes") == db.stat().st_size:
        return db, info
    return db, build(plain, db, days, servers)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dir", type=Path, default=br.DEFAULT_DIR)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--servers", type=int, default=16, help="bricks of the data ops")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--rebuild", action="store_true")
    args = parser.parse_args(argv)
    plain, info, _ = br.database(args.dir, args.days, args.rebuild)
    db, sinfo = with_servers(args.dir, plain, args.days, args.servers, args.rebuild)
    print(f"without: {plain} ({info['bytes'] / 2**20:.1f} MiB); with: {db} "
          f"({sinfo['server_rows']:,} per-server rows, {sinfo['bytes'] / 2**20:.1f} MiB)")
    config = args.dir / "slowdown.toml"
    config.write_text('windows = ["1m", "10m", "1h"]\nstatistics = ["median", "q95"]\n' + "".join(
        f'\n[[target]]\nname = "{t}"\npath = "{args.dir}/workspace/{t}"\n'
        'data_size = "1GiB"\n' for t in br.TARGETS))
    outs = {"without": args.dir / f"servers-{args.days}d-without.html",
            "with": args.dir / f"servers-{args.days}d-with.html"}
    dbs = {"without": plain, "with": db}
    gen: dict[str, list[tuple[float, int]]] = {k: [] for k in outs}
    for _ in range(args.runs):
        for kind in outs:
            gen[kind].append(br.generate(dbs[kind], info["end"], args.days, outs[kind], config))
    from playwright.sync_api import sync_playwright

    rendered: dict[str, list] = {k: [] for k in outs}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=br.CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--no-first-run"])
        try:
            br.render(browser, outs["without"])  # warm-up
            for _ in range(args.runs):
                for kind in outs:
                    rendered[kind].append(br.render(browser, outs[kind]))
        finally:
            browser.close()
    problems = [x for runs in rendered.values() for _, _, logged in runs for x in logged]
    med = statistics.median
    print(f"machine: Python {platform.python_version()}, numpy {np.__version__}, "
          f"{platform.machine()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}; "
          f"{br.utc_now()}; {args.runs} runs each, alternating")
    print()
    print("| measure | without per-server records | with | with / without |")
    print("| --- | --- | --- | --- |")
    g = {k: [s for s, _ in v] for k, v in gen.items()}
    r = {k: [w for w, _, _ in v] for k, v in rendered.items()}
    size = {k: outs[k].stat().st_size for k in outs}
    rss = {k: max(m for _, m in v) for k, v in gen.items()}
    for label, values, unit in (("generation, `slowdown report` (median)", g, "s"),
                                ("render, goto to drawn (median)", r, "s")):
        a, b = med(values["without"]), med(values["with"])
        print(f"| {label} | {a:.2f} {unit} ({min(values['without']):.2f}.."
              f"{max(values['without']):.2f}) | {b:.2f} {unit} ({min(values['with']):.2f}.."
              f"{max(values['with']):.2f}) | {b / a:.2f} |")
    print(f"| generation, peak RSS | {rss['without'] / 1024:.0f} MiB | "
          f"{rss['with'] / 1024:.0f} MiB | {rss['with'] / rss['without']:.2f} |")
    print(f"| file size | {size['without'] / 1e6:.2f} MB | {size['with'] / 1e6:.2f} MB | "
          f"{size['with'] / size['without']:.2f} |")
    if problems:
        print(f"\nconsole messages or requests: {problems}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
