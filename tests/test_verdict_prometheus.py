"""The verdict's Prometheus source against Debian's real Prometheus on 127.0.0.1, scraping
the exported gauges of five peers from a static text served on 127.0.0.1 (rewritten as the
fleet changes), and the faults of that source: nothing listening, not a Prometheus."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slowdown.analysis.cli.main import main
from slowdown.analysis.stats.fleet_sources import prometheus_query
from slowdown.analysis.store.records import minute_of
from tests.kit.alertmanagerkit import is_ready, stop
from tests.kit.cli_runner import runner
from tests.kit.metricskit import free_port
from tests.kit.servicekit import wait_for
from tests.kit.verdictkit import MINUTES, host_db

PEERS = ("n1", "n2", "n3", "n4", "n5")


def exposition(values: dict[str, float], computed: dict[str, float]) -> str:
    """The two gauges the verdict reads, as ``slowdown-probe``'s /metrics writes them."""
    lines = ["# TYPE slowdown_ratio gauge"]
    for host, value in values.items():
        for window in ("1m", "10m"):
            lines.append(f'slowdown_ratio{{host="{host}",target="work",window="{window}",'
                         f'statistic="median"}} {value}')
    lines.append("# TYPE slowdown_ratio_timestamp_seconds gauge")
    lines += [f'slowdown_ratio_timestamp_seconds{{host="{h}"}} {t}' for h, t in computed.items()]
    return "\n".join(lines) + "\n"


def publish(directory: Path, text: str) -> None:
    temp = directory / ".metrics.tmp"
    temp.write_text(text)
    os.replace(temp, directory / "metrics")


@contextlib.contextmanager
def process(args: list[str], log: Path):
    with log.open("w") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            yield proc
        finally:
            stop(proc)


@pytest.mark.slow
def test_verdict_from_a_real_prometheus_and_its_faults(tmp_path):
    served = tmp_path / "served"
    served.mkdir()
    now = time.time()
    publish(served, exposition({h: 8.0 for h in PEERS}, {h: now for h in PEERS}))
    text_port, prom_port = free_port(), free_port()
    (tmp_path / "prometheus.yml").write_text(json.dumps({  # JSON is YAML
        "global": {"scrape_interval": "1s"},
        "scrape_configs": [{"job_name": "slowdown",
                            "static_configs": [{"targets": [f"127.0.0.1:{text_port}"]}]}]}))
    # This node, n0: ten times slower over its last ten minutes, up to the minute now.
    start = minute_of(now) - (MINUTES - 3) * 60  # three minutes ahead: a minute may turn
    database = host_db(tmp_path / "n0.db", "n0", slow=10.0, load1=3.5, start=start)
    url = f"http://127.0.0.1:{prom_port}"

    def verdict(prometheus: str) -> dict:
        config = tmp_path / "n0.toml"
        config.write_text(f'host = "n0"\ndatabase = "{database}"\n[[target]]\nname = "work"\n'
                          f'path = "{tmp_path}"\n[fleet]\nprometheus = "{prometheus}"\n'
                          f'timeout = "2s"\n')
        result = runner().invoke(main, ["--config", str(config), "--json"])
        assert result.exit_code == 0, result.output + result.stderr
        (target,) = json.loads(result.output)["targets"]
        line = runner().invoke(main, ["--config", str(config)]).output
        assert re.search(r"worst \S+  (\w+)", line).group(1) == target["verdict"]["verdict"], line
        return target["verdict"]

    def scraped(host: str, value: float) -> bool:
        found = prometheus_query(url, f'slowdown_ratio{{host="{host}",window="1m"}}',
                                 time.time(), 2)
        return bool(found) and float(found[0]["value"][1]) == value

    with process([sys.executable, "-m", "http.server", "--bind", "127.0.0.1",
                  "--directory", str(served), str(text_port)], tmp_path / "http.log"), \
            process(["prometheus", f"--config.file={tmp_path / 'prometheus.yml'}",
                     f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                     f"--web.listen-address=127.0.0.1:{prom_port}"], tmp_path / "prom.log"):
        wait_for(lambda: is_ready(url), 30, what="Prometheus")
        wait_for(lambda: scraped("n5", 8.0), 30, what="the first scrape")
        v = verdict(url)
        assert (v["verdict"], v["peers"], v["slow_peers"], v["stale_peers"]) == \
            ("filesystem", 5, 5, 0), v
        assert v["source"] == f"prometheus {url}" and v["node"]["load1"] == 3.5

        # The peers recover: n0's slowdown is its own.
        now = time.time()
        publish(served, exposition({h: 1.1 for h in PEERS}, {h: now for h in PEERS}))
        wait_for(lambda: scraped("n5", 1.1), 30, what="the peers' recovery")
        v = verdict(url)
        assert (v["verdict"], v["peers"], v["slow_peers"]) == ("node", 5, 0), v

        # Four peers' numbers are 15 minutes old: stale, one fresh peer is too few.
        now = time.time()
        publish(served, exposition({h: 8.0 for h in PEERS},
                                   {h: now - (900 if h != "n1" else 0) for h in PEERS}))
        wait_for(lambda: scraped("n5", 8.0), 30, what="the stale numbers")
        v = verdict(url)
        assert (v["verdict"], v["peers"], v["stale_peers"]) == ("unknown", 1, 4), v
        assert v["reason"] == "1 fresh peer with numbers, 2 needed"

        # A URL where nothing listens, and one that is not a Prometheus: "unknown", the reason.
        began = time.monotonic()
        v = verdict(f"http://127.0.0.1:{free_port()}")
        assert v["verdict"] == "unknown" and "unreachable" in v["reason"], v
        assert time.monotonic() - began < 10
        v = verdict(f"http://127.0.0.1:{text_port}")
        assert v["verdict"] == "unknown" and "answered HTTP 404" in v["reason"], v
