"""The report's database for tests: three hours of two targets with a slow period, a stuck
minute, node context, a fio run imported and a rebaseline; the command line that reads it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from click.testing import CliRunner

from slowdown.analysis.cli.main import main
from slowdown.analysis.histogram import Histogram
from slowdown.analysis.stats import baseline
from slowdown.analysis.store import Store
from slowdown.analysis.store.records import NodeContext, Record
from testdata.datakit import OPS, fill, lognormal, utc

NOV = utc(2026, 11, 1)


AT = "2026-11-01T03:00:00Z"  # three hours of data written from NOV


REBASELINE = NOV + 90 * 60


STUCK_MINUTE = NOV + 100 * 60


FIO_START_MS = (NOV + 30 * 60) * 1000


FIO_ROWS = [(FIO_START_MS + t, 40_000 + 7 * t, t // 50 % 2) for t in range(0, 240_000, 50)]


def run(*args: str):
    result = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)
    return result.exit_code, result.output


def node_values(m: int) -> dict:
    return {"load1": 1.0 + m % 7, "cpu": 20.0 + m % 50, "memory": 40.0,
            "disk_read_bytes": 1_000_000 * m, "disk_write_bytes": 500_000,
            "net_rx_bytes": 60_000, "net_tx_bytes": 0}


def report_database(tmp_path_factory) -> Path:
    """Three hours of two targets, a stuck minute, a fio run imported and a rebaseline."""
    path = tmp_path_factory.mktemp("report") / "n1.db"
    fill(path, NOV, 180, lognormal(0.001, 0.3), targets=("work",),
         ops=[op for op in OPS if op != "md-read"])
    fill(path, NOV, 150, lognormal(0.002, 0.3), targets=("work",), ops=("md-read",), seed=1)
    fill(path, NOV + 150 * 60, 10, lognormal(0.010, 0.3), targets=("work",), ops=("md-read",),
         seed=2)
    fill(path, NOV + 160 * 60, 20, lognormal(0.002, 0.3), targets=("work",), ops=("md-read",),
         seed=3)
    fill(path, NOV, 180, lognormal(0.0005, 0.5), targets=("home",), ops=("data-read", "md-stat"),
         seed=4)
    with Store(path) as store:
        store.write(
            [Record("n1", "work", "md-stat", STUCK_MINUTE, Histogram(), errors=3, skipped=2,
                    stuck=12.0, stuck_end=12.0),  # still in flight as the minute ended
             Record("n1", "work", "md-stat", STUCK_MINUTE + 60, Histogram(), errors=1)],
            [NodeContext("n1", NOV + 60 * m, node_values(m)) for m in range(180)])
    lat = path.parent / "l_clat.1.log.nodeA"
    lat.write_text("".join(f"{t}, {v}, {d}, 4096, 0\n" for t, v, d in FIO_ROWS))
    assert run("import-fio", "--into-db", "fio-run", "--db", path, lat)[0] == 0
    with Store(path) as store:
        baseline.rebaseline(store, REBASELINE, "new OSTs", NOV, REBASELINE)
    return path


def history_rows(db: Path, every: str, *stats: str, at: str = AT,
                 since: str = "3h") -> list[dict]:
    args = ["history", "--db", db, "--at", at, "--since", since, "--every", every,
            "--format", "json"]
    for s in stats:
        args += ["--stat", s]
    code, text = run(*args)
    assert code == 0, text
    return json.loads(text)["rows"]


def epoch(iso: str) -> int:
    return int(np.datetime64(iso.rstrip("Z"), "s").astype(np.int64))
