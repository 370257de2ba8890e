"""The metrics as a ``.prom`` file for node_exporter's textfile collector
(probe/exporters/textfile.py):
written by the real service, parsed by prometheus_client's parser and served by a real
node_exporter; a foreign file, a read-only directory and leftovers of a killed writer."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Gauge
from prometheus_client.parser import text_string_to_metric_families

from slowdown.probe.exporters.publish import published_by
from slowdown.probe.exporters.textfile import TextfileWriter, temp_path
from tests.kit.faultfs.realfs import run, tmpfs
from tests.kit.fixtures_fs import require_root
from tests.kit.servicekit import TargetSpec, start_service, wait_for, wait_service, write_config

# A host whose publishing phase within a minute is 0.24 s (exports.py): its first copy comes
# 5.24 s after the start.
HOST = "pubnode90"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def families(text: str) -> dict[str, list]:
    """Metric family name -> its samples, as Prometheus' text parser reads them."""
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        return answer.read().decode()


def test_the_service_writes_the_textfile_node_exporter_serves_and_publishes(tmp_path):
    """One run of the real service with the endpoint, the textfile and publishing: the file
    holds the endpoint's metrics (process metrics under slowdown_process_*), node_exporter
    serves it without an error, and the copy is published."""
    port = free_port()
    textdir, shared = tmp_path / "node-exporter", tmp_path / "shared"
    textdir.mkdir()
    shared.mkdir()
    (tmp_path / "w").mkdir()
    config = write_config(tmp_path / "c.toml", tmp_path / "node.db",
                          [TargetSpec("work", tmp_path / "w")])
    text = config.read_text().replace('host = "testhost"', f'host = "{HOST}"')
    config.write_text(text + f'[metrics]\nlisten = "127.0.0.1:{port}"\n'
                      f'textfile = "{textdir / "slowdown.prom"}"\ntextfile_every = "1s"\n'
                      f'[publish]\ndir = "{shared}"\nevery = "1m"\n')
    service = start_service(config, "--prepare", "--duration", "9s")
    prom = textdir / "slowdown.prom"
    wait_for(lambda: prom.exists(), 20, what="the textfile")
    served = families(scrape(port))
    written = families(prom.read_text())
    process = {n for n in served if n.startswith("process_")}
    assert process and not {n for n in written if n.startswith("process_")}
    assert {f"slowdown_{n}" for n in process} <= set(written)
    assert set(served) - process == {n for n in written if not n.startswith("slowdown_process")}
    buckets = [s.labels for s in written["slowdown_op_latency_seconds"]
               if s.name.endswith("_bucket")]
    assert buckets and all(set(b) == {"host", "target", "op", "le"} for b in buckets)
    out = wait_service(service, 60)
    assert "error" not in out.lower(), out
    assert published_by(shared / f"{HOST}.db")["host"] == HOST, out
    final = families(prom.read_text())  # the last one, written as the service stopped
    assert sum(s.value for s in final["slowdown_ticks"]) >= 5
    assert sorted(os.listdir(textdir)) == ["slowdown.prom"]

    exporter_port = free_port()
    exporter = subprocess.Popen(
        ["prometheus-node-exporter", f"--web.listen-address=127.0.0.1:{exporter_port}",
         "--collector.disable-defaults", "--collector.textfile",
         f"--collector.textfile.directory={textdir}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        text = wait_for(lambda: _try_scrape(exporter_port), 20, what="node_exporter")
    finally:
        exporter.terminate()
        _, errors = exporter.communicate(timeout=10)
    seen = families(text)
    assert seen["node_textfile_scrape_error"][0].value == 0, errors
    assert seen["slowdown_ticks"] == final["slowdown_ticks"]
    # node_exporter writes the bounds as Go does (le="1" where prometheus_client wrote
    # "1.0"): the same buckets, the same counts.
    assert by_bound(seen["slowdown_op_latency_seconds"]) == \
        by_bound(final["slowdown_op_latency_seconds"])
    assert {s.labels.get("le") for s in seen["slowdown_op_latency_seconds"]} >= {"1", "4", "0.25"}
    assert "slowdown_process_resident_memory_bytes" in seen
    assert "was collected before" not in errors, errors


def by_bound(samples: list) -> dict:
    return {(s.name, tuple(sorted((k, float(v) if k == "le" else v)
                                  for k, v in s.labels.items()))): s.value for s in samples}


def _try_scrape(port: int) -> str | None:
    try:
        return scrape(port)
    except OSError:
        return None


def registry(host: str = HOST) -> CollectorRegistry:
    """The service's info as the service exports it (its labels are written sorted, so
    ``host`` is not the first)."""
    reg = CollectorRegistry()
    Gauge("slowdown_service_info", "The service.", ["host", "exported_scale"],
          registry=reg).labels(host, "-1").set(1)
    return reg


def test_a_restarted_service_replaces_its_own_file(tmp_path):
    path = tmp_path / "slowdown.prom"
    assert TextfileWriter(path, registry(), HOST).write()
    assert f'slowdown_service_info{{exported_scale="-1",host="{HOST}"}}' in path.read_text()
    first = os.stat(path).st_ino
    assert TextfileWriter(path, registry(), HOST).write()  # the next start: its own file
    assert os.stat(path).st_ino != first


def test_a_prom_file_the_service_did_not_write_is_never_replaced(tmp_path, caplog):
    theirs = tmp_path / "slowdown.prom"
    theirs.write_text("# someone else's\nbackup_last_success_timestamp_seconds 1.7e9\n")
    other_host = tmp_path / "other.prom"
    TextfileWriter(other_host, registry("n2"), "n2").write()
    before = theirs.read_text(), other_host.read_text()
    with caplog.at_level(logging.INFO, logger="slowdown.probe.exporters.textfile"):
        assert not TextfileWriter(theirs, registry(), HOST).write()
        assert not TextfileWriter(other_host, registry(), HOST).write()
    assert (theirs.read_text(), other_host.read_text()) == before
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 2 and all("not replaced" in e for e in errors), errors
    assert str(theirs) in errors[0] and str(other_host) in errors[1]


def test_leftovers_of_a_killed_writer_are_removed_and_no_other_file(tmp_path):
    dead = subprocess.Popen(["true"])
    dead.wait()
    # another service still running (a process of slowdown), and a PID taken again since
    running = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)",
                                "slowdown-probe"])
    reused = subprocess.Popen(["sleep", "60"])
    path = tmp_path / "slowdown.prom"
    leftovers = [temp_path(path, dead.pid).name, temp_path(path, reused.pid).name]
    others = [temp_path(path, running.pid).name,
              "node.prom", f"slowdown.prom.{dead.pid}.tmp"]
    for name in [*leftovers, *others]:
        (tmp_path / name).write_text("partial")
    try:
        assert TextfileWriter(path, registry(), HOST).write()
    finally:
        running.kill()
        reused.kill()
    assert sorted(os.listdir(tmp_path)) == sorted(["slowdown.prom", *others])
    assert families(path.read_text())["slowdown_service_info"][0].labels["host"] == HOST


@pytest.mark.root
def test_a_read_only_directory_is_said_once_with_its_errno_and_the_file_stays(tmp_path,
                                                                             caplog):
    require_root("a read-only tmpfs")
    with tmpfs(tmp_path, 1 << 20) as mount:
        path = mount.path / "slowdown.prom"
        writer = TextfileWriter(path, registry(), HOST)
        assert writer.write()
        before = path.read_text()
        run(["mount", "-o", "remount,ro", str(mount.path)])
        try:
            with caplog.at_level(logging.INFO, logger="slowdown.probe.exporters.textfile"):
                assert not writer.write()
                assert not writer.write()
        finally:
            run(["mount", "-o", "remount,rw", str(mount.path)])
        assert path.read_text() == before
        with caplog.at_level(logging.INFO, logger="slowdown.probe.exporters.textfile"):
            assert writer.write()
        assert sorted(os.listdir(mount.path)) == ["slowdown.prom"]  # no temporary left
    said = [(r.levelno, r.getMessage()) for r in caplog.records]
    errors = [m for level, m in said if level == logging.ERROR]
    assert len(errors) == 1 and str(path) in errors[0] and "(EROFS)" in errors[0], said
    assert any("written again" in m for _, m in said)


def test_the_fleet_dashboard_selects_by_host_never_by_the_scrapes_labels():
    """With node_exporter, job and instance are node_exporter's: the fleet dashboard's
    queries and the recording rules select and group by the series' own host label; only the
    memory panel joins on instance (the service's info and its process metrics come from one
    scrape either way)."""
    import json
    import re

    import yaml

    root = Path(__file__).resolve().parents[1]
    dashboard = json.loads((root / "grafana/dashboards/slowdown-fleet.json").read_text())
    exprs = list(_exprs(dashboard))
    rules = yaml.safe_load((root / "prometheus/slowdown.rules.yml").read_text())
    exprs += [r["expr"] for g in rules["groups"] for r in g["rules"]
              if "record" in r]
    assert len(exprs) > 20
    for expr in exprs:
        assert not re.search(r"\b(job|instance)\s*[=!]", expr), expr
        if "instance" in expr:
            assert "on (instance) group_left (host) slowdown_service_info" in expr, expr
    memory = [e for e in exprs if "resident_memory" in e]
    assert memory and all("slowdown_process_resident_memory_bytes" in e for e in memory)


def _exprs(node):
    if isinstance(node, dict):
        if isinstance(node.get("expr"), str):
            yield node["expr"]
        for value in node.values():
            yield from _exprs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _exprs(value)


@pytest.mark.root
def test_a_full_directory_is_said_with_its_errno_and_the_file_stays(small_tmpfs, caplog):
    path = small_tmpfs.path / "slowdown.prom"
    writer = TextfileWriter(path, registry(), HOST)
    assert writer.write()
    before = path.read_text()
    filler = small_tmpfs.path / "filler"
    # The rest of the filesystem, to the last block.
    with open(filler, "wb", buffering=0) as f, contextlib.suppress(OSError):
        while True:
            f.write(b"\0" * 4096)
    with caplog.at_level(logging.ERROR, logger="slowdown.probe.exporters.textfile"):
        assert not writer.write()
    errors = [r.getMessage() for r in caplog.records]
    assert len(errors) == 1 and "(ENOSPC)" in errors[0] and str(path) in errors[0], errors
    assert path.read_text() == before
    assert sorted(os.listdir(small_tmpfs.path)) == ["filler", "slowdown.prom"]
    filler.unlink()
    assert writer.write()
