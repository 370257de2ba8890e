"""The benchmarks still run: their quick modes print the whole table."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAD = "| what | ours | anchor | ratio | goal | met? |"


def test_bench_histogram_quick_prints_its_table(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "bench.bench_histogram", "--quick", "--dir", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert HEAD in lines
    rows = [line for line in lines[lines.index(HEAD) + 2:] if line.startswith("|")]
    for section in ("1.", "2.", "3a.", "3b.", "3c.", "3d.", "4.", "5.", "6."):
        assert any(r.startswith(f"| {section} ") for r in rows), f"no row {section}"
    for r in rows:
        ours = r.split(" | ")[1]
        assert re.fullmatch(r"[\d.,]+ (ns|us|ms|s|B)", ours), r
    goals = [r for r in rows if "< " in r.split(" | ")[4]]
    assert len(goals) == 2
    assert all(r.rstrip(" |").endswith(("yes", "**NO**")) for r in goals)
    assert list(tmp_path.iterdir()) == []  # the benchmark's database is cleaned up


PROBE_HEAD = "| what | ours | ioping | difference | ratio | ratio of each run | goal | met? |"
SERVICE_HEAD = "| what | value | goal | met? |"
MD_HEAD = "| what | ours | md-workbench | difference | ratio | goal | met? |"


def _table(lines: list[str], head: str) -> list[str]:
    """The rows of the table under ``head``, up to its end."""
    assert head in lines
    rows = []
    for line in lines[lines.index(head) + 2:]:
        if not line.startswith("|"):
            break
        rows.append(line)
    return rows


def _direct_io_works(directory: Path) -> bool:
    probe = directory / "direct-check"
    try:
        fd = os.open(probe, os.O_RDWR | os.O_CREAT | os.O_DIRECT, 0o600)
    except OSError:
        return False
    finally:
        probe.unlink(missing_ok=True)
    os.close(fd)
    return True


def test_bench_probe_quick_compares_with_ioping(tmp_path):
    # Both are part of the test machine (.ci/run installs ioping; its temporary directory is
    # on a disk filesystem): missing, the benchmark could not be checked, so the test fails.
    assert shutil.which("ioping") is not None, "ioping is not installed (apt-get install ioping)"
    assert _direct_io_works(tmp_path), f"{tmp_path} refuses O_DIRECT"
    raw = tmp_path / "probe.json"
    work = tmp_path / "work"
    work.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "bench.bench_probe", "--quick", "--dir", str(work),
         "--json", str(raw)],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, done.stderr
    rows = _table(done.stdout.splitlines(), PROBE_HEAD)
    assert len(rows) == 4  # read, read fadvised, write, write + fdatasync (sync = true)
    for r in rows:
        cells = [c.strip() for c in r.strip("|").split("|")]
        assert re.fullmatch(r"[\d,]+ us", cells[1]) and re.fullmatch(r"[\d,]+ us", cells[2]), r
        assert float(cells[4]) > 0 and float(cells[5]) == float(cells[4])  # 1 run
    goals = [r for r in rows if "within 5% or 20 us" in r]
    assert len(goals) == 3
    assert all(r.rstrip(" |").endswith(("yes", "**NO**")) for r in goals)
    raw_results = json.loads(raw.read_text())
    results = raw_results["results"]
    assert [r["kind"] for r in results] == ["read", "read, fadvised", "write",
                                            "write+fdatasync"]
    for r in results:
        assert len(r["rounds"]) == 3
        assert all(0 < row["ours"] < 1 and 0 < row["ioping"] < 1 for row in r["rounds"])
    # the md probe against the real md-workbench, alternately on one pool
    md_rows = _table(done.stdout.splitlines(), MD_HEAD)
    assert [r.split(",")[0].lstrip("| ") for r in md_rows] == [
        "md-stat", "md-read", "md-delete", "md-write"] * 2  # one per second, back to back
    assert all("one per second" in r for r in md_rows[:4])
    assert all("back to back" in r for r in md_rows[4:])
    md = raw_results["md"]["rows"]
    assert all(len(r["ours_all"]) == len(r["md_workbench_all"]) == 4 for r in md.values())
    assert all(0 < t < 1 for r in md.values() for t in r["ours_all"] + r["md_workbench_all"])
    assert list(work.iterdir()) == []  # workspace and config cleaned up


@pytest.mark.slow  # a service run of 10-20 s: in the full suite
def test_bench_service_quick_measures_the_service(tmp_path):
    raw = tmp_path / "service.json"
    work = tmp_path / "work"
    work.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "bench.bench_service", "--quick", "--duration", "8s",
         "--dir", str(work), "--json", str(raw)],
        cwd=ROOT, capture_output=True, text=True, timeout=90,
    )
    assert done.returncode == 0, done.stderr
    rows = _table(done.stdout.splitlines(), SERVICE_HEAD)
    values = {r.split(" | ")[0].lstrip("| ").split(" (")[0]: r.split(" | ")[1] for r in rows}
    assert re.fullmatch(r"[\d.]+ %", values["CPU, service + workers, steady state, % of one core"])
    assert re.fullmatch(r"[\d.]+ MiB", values["peak RSS, service + workers summed"])
    assert re.fullmatch(r"[\d.]+ ms", values["tick start delay, p99"])
    assert re.fullmatch(r"[\d.]+ ms",
                        values["anchor: plain time.sleep() wake-up delay, same machine, p99"])
    goals = [r for r in rows if "<= " in r]
    assert len(goals) == 4
    assert all(r.rstrip(" |").endswith(("yes", "**NO**")) for r in goals)
    # where the steady CPU goes: every thread of the service (main, scheduler, readers, ...)
    (threads,) = [line for line in done.stdout.splitlines() if line.startswith("- service: ")]
    assert len(re.findall(r"\d+\.\d{3} % \(\d+\.\d/s\)", threads)) >= 4, threads
    (run,) = json.loads(raw.read_text())["runs"]
    assert run["returncode"] == 0
    assert run["delay"]["ticks"] >= 6
    assert run["cpu"] > 0 and 0 < run["rss_peak"] < 1 << 30
    assert run["left_alive"] == []
    roles = {p["role"] for p in run["procs"].values()}
    assert {"service", "worker root", "worker dir"} <= roles
    ops = {key: v["ops"] for key, v in run["db"].items()}
    assert len(ops) == 12 and all(n >= 5 for n in ops.values()), ops  # 2 targets x 6 ops
    assert all(v["errors"] == 0 for v in run["db"].values())
    assert list(work.iterdir()) == []  # workspaces, config and database cleaned up


@pytest.mark.slow  # a service run of 10-20 s: in the full suite
def test_service_threads_measures_every_thread_of_service_and_workers(tmp_path):
    from tests.kit.servicekit import TargetSpec, probe_cli, write_config

    target = TargetSpec("t", tmp_path / "t")
    target.path.mkdir()
    config = write_config(tmp_path / "slowdown.toml", tmp_path / "db" / "slowdown.db", [target])
    assert probe_cli(config, "prepare", "--no-progress").returncode == 0
    done = subprocess.run(
        [sys.executable, "-m", "bench.service_threads", "--config", str(config),
         "--python", sys.executable, "--pairs", "1", "--warmup", "3", "--window", "4"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, done.stderr
    (run,) = [json.loads(line) for line in done.stdout.splitlines()]
    service = [t for t in run["threads"] if t["service"]]
    workers = [t for t in run["threads"] if not t["service"]]
    assert len(service) >= 4 and len(workers) == 1  # main, scheduler, live state, reader
    assert run["total_pct"] > 0 and workers[0]["wakeups_per_s"] >= 0.5  # one run a second
    assert run["total_pct"] == pytest.approx(run["service_pct"] + run["workers_pct"], abs=0.002)


def test_bench_trends_small_fleet_prints_its_scores(tmp_path):
    """One host of 21 days (its shift on day 12.5; the later effects beyond its end)."""
    done = subprocess.run(
        [sys.executable, "-m", "bench.bench_trends", "--hosts", "1", "--days", "21",
         "--per-hour", "30", "--dir", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr
    merged = next(line for line in done.stdout.splitlines() if line.startswith("merged fleet"))
    assert re.search(r"trends in [\d.]+ s wall, [\d.]+ s CPU", merged), merged
    score = json.loads(merged.split("; ", 1)[1])
    assert (score["planted"], score["found"], score["false"]) == (1, 1, 0), score
    assert score["cycles_found"] == score["cycles_planted"] == 12
    assert "hosts alone: shifts found 1 of 1" in done.stdout
    assert "false changes 0: 0.00 per 100 host-days" in done.stdout


def test_bench_report_long_small_fleet_prints_its_table(tmp_path):
    """One host of 15 days (long figures on from 14), one round of each command."""
    done = subprocess.run(
        [sys.executable, "-m", "bench.bench_report_long", "--hosts", "1", "--days", "15",
         "--runs", "1", "--dir", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("| ")]
    assert rows[0].startswith("| 1 hosts x 15 days |") and len(rows) == 6, rows
    seconds = r"[\d.]+ s \([\d.]+\.\.[\d.]+\)"
    for name, row in zip(("report without long figures", "report with long figures",
                          "trends --json"), rows[2:]):
        assert re.fullmatch(rf"\| {re.escape(name)} \| {seconds} \| {seconds} \| "
                            r"\d+ MiB \(\d+\.\.\d+\) \|", row), row
    assert re.fullmatch(r"\| with / without long figures, per round( \| [\d.]+ x "
                        r"\([\d.]+\.\.[\d.]+\)){3} \|", rows[5]), rows[5]
    page = (tmp_path / "report-1h.html").read_text()
    assert '<figure class="long"' in page


def test_bench_startup_one_round_prints_its_ratios():
    """One round of the start-up benchmark: the three commands, each with its ratio (the
    benchmark itself checks that the line and the notice were printed)."""
    done = subprocess.run([sys.executable, "-m", "bench.bench_startup", "--rounds", "1"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = {line[:16].strip(): line.split()[-1] for line in done.stdout.splitlines()[2:]}
    assert set(rows) == {"python -c pass", "slowdown", "slowdown motd"}, done.stdout
    assert rows["python -c pass"] == "1.00" and float(rows["slowdown"]) > 1


def test_bench_weekly_one_round_prints_both_settings():
    """Eight days of one op: the weekly expected value in use, each command timed both ways."""
    done = subprocess.run([sys.executable, "-m", "bench.bench_weekly", "--rounds", "1",
                           "--days", "8", "--ops", "md-stat"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "the weekly expected value in use: 3 of 3 ops and windows" in done.stdout
    for name in ("slowdown", "slowdown -v", "slowdown check", "in process"):
        assert re.search(rf"^{name} +[\d.]+ +[\d.]+ +[\d.]+ ", done.stdout, re.M), done.stdout


def test_bench_server_metrics_quick_prints_both_costs():
    done = subprocess.run([sys.executable, "-m", "bench.bench_server_metrics", "--quick",
                           "--servers", "10"], capture_output=True, text=True, timeout=120,
                          cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert "with [metrics]" in done.stdout and "with 10 servers x 2 probes" in done.stdout
