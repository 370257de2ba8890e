"""A fleet of host databases for the verdict: two hours of minutes per host, one of them
optionally slow, and the instant that reads them."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from slowdown.analysis.histogram import Histogram
from slowdown.analysis.stats import baseline
from slowdown.analysis.store import Store
from slowdown.analysis.store.records import NodeContext, Record
from testdata.datakit import OPS, utc

T0 = utc(2026, 11, 1)


MINUTES = 120  # two hours: the first one is the baseline, the last ten minutes may be slow


AT = T0 + MINUTES * 60 + 30  # half a minute into the minute after the data


HOSTS = tuple(f"n{i}" for i in range(6))  # n0 is this node


def host_db(path: Path, host: str, slow: float = 1.0, minutes: int = MINUTES,
            load1: float = 0.5, start: int = T0) -> Path:
    """A node's database: ``minutes`` of normal latencies of every op, the last ten of them
    ``slow`` times slower, a baseline of the first hour, node context every minute."""
    rng = np.random.default_rng(sum(map(ord, host)))
    with Store(path) as store:
        records, node = [], []
        for m in range(minutes):
            t = start + 60 * m
            factor = slow if m >= minutes - 10 else 1.0
            for op in OPS:
                h = Histogram()
                h.record_many(rng.lognormal(np.log(0.002 * factor), 0.2, 60))
                records.append(Record(host, "work", op, t, h))
            node.append(NodeContext(host, t, {"load1": load1, "cpu": 12.0, "memory": 40.0}))
        store.write(records, node)
        baseline.rebaseline(store, start + 3600, "first hour", start, start + 3600)
    return path


def n0_config(tmp_path: Path, shared: Path) -> Path:
    """The configuration of node n0, whose own database is ``shared/n0.db`` and whose fleet
    is every file in ``shared``."""
    config = tmp_path / "n0.toml"
    config.write_text(f'host = "n0"\ndatabase = "{shared / "n0.db"}"\n'
                      f'[[target]]\nname = "work"\npath = "{tmp_path}"\n'
                      f'[fleet]\ndatabases = "{shared}/*.db"\n')
    return config


def show(config: Path, *args: str) -> str:
    """``slowdown --config CONFIG ARGS --at AT``'s output (it must succeed)."""
    from slowdown.analysis.cli.main import main
    from tests.kit.cli_runner import runner

    result = runner().invoke(main, ["--config", str(config), *args, "--at", f"@{AT}"])
    assert result.exit_code == 0, result.output + result.stderr
    return result.output
