"""The `slowdown` command line on databases of known content: output, exit codes, errors."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from slowdown.analysis.cli.main import main
from slowdown.analysis.histogram import Histogram
from slowdown.analysis.stats import baseline
from slowdown.analysis.store import Store
from testdata.datakit import fill, lognormal, utc

NOV = utc(2026, 11, 1)
AT = "2026-11-01T02:00:00Z"  # two hours of data written from NOV


@pytest.fixture
def calm_then_slow(tmp_path):
    """work: 2 h at 1 ms; the last 10 minutes md-stat 5x slower. home: calm throughout."""
    db = tmp_path / "n1.db"
    fill(db, NOV, 120, lognormal(0.001, 0.2), targets=("home",))
    fill(db, NOV, 120, lognormal(0.001, 0.2), targets=("work",),
         ops=("data-read", "data-write", "md-read", "md-delete", "md-write"), seed=1)
    fill(db, NOV, 110, lognormal(0.001, 0.2), targets=("work",), ops=("md-stat",), seed=2)
    fill(db, NOV + 110 * 60, 10, lognormal(0.005, 0.2), targets=("work",), ops=("md-stat",),
         seed=9)
    return db


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return result.exit_code, result.output


def test_uptime_line_per_target(calm_then_slow):
    code, out = run("--db", str(calm_then_slow), "--at", AT)
    assert code == 0
    lines = out.strip().splitlines()
    assert [line.split()[2] for line in lines] == ["home", "work"]  # after the time and zone
    assert "worst md-stat" in lines[1] and "provisional baseline" in lines[1]
    code, out = run("--db", str(calm_then_slow), "--at", AT, "--json", "--stat", "median")
    doc = json.loads(out)
    work = next(t for t in doc["targets"] if t["target"] == "work")
    ten = next(w for w in work["windows"] if w["window"] == 600)
    assert ten["worst_op"] == "md-stat" and ten["slowdown"] > 2.5
    home = next(t for t in doc["targets"] if t["target"] == "home")
    assert all(0.7 < w["slowdown"] < 1.3 for w in home["windows"])


def test_verbose_table_shows_the_numbers_behind_the_ratio(calm_then_slow):
    code, out = run("--db", str(calm_then_slow), "--at", AT, "-v", "--target", "work",
                    "--op", "md-*")
    assert code == 0
    assert "95% ci" in out and "expected" in out
    rows = [line for line in out.splitlines() if line.startswith("work ")]
    assert len(rows) == 4 * 3  # 4 md ops x 3 windows


@pytest.mark.parametrize(("warning", "critical", "state", "code"), [
    ("10", "20", "OK", 0), ("2", "20", "WARNING", 1), ("1.5", "2", "CRITICAL", 2)])
def test_check_states(calm_then_slow, warning, critical, state, code):
    rc, out = run("check", "--db", str(calm_then_slow), "--at", AT, "-w", warning,
                  "-c", critical, "--target", "work")
    assert rc == code, out
    assert out.startswith(f"SLOWDOWN {state} - ")
    assert "'work'=" in out.split("|")[1]


def test_check_unknown_without_data_or_when_the_service_stopped_writing(calm_then_slow):
    rc, out = run("check", "--db", str(calm_then_slow), "--at", AT, "--target", "nothere")
    assert rc == 3 and out.startswith("SLOWDOWN UNKNOWN")
    rc, out = run("check", "--db", str(calm_then_slow), "--at", "2026-11-01T03:00:00Z")
    assert rc == 3 and "no new records" in out
    rc, out = run("check", "--db", "/nonexistent/x.db")
    assert rc == 3 and "no such database" in out


def test_stats_table_and_json(calm_then_slow):
    _, out = run("stats", "--db", str(calm_then_slow), "--at", AT, "--since", "2h",
                 "--json", "--target", "home", "--op", "data-read")
    doc = json.loads(out)
    (row,) = doc["ops"]
    assert row["count"] == 120 * 60 and row["errors"] == 0
    assert row["min"] <= row["25%"] <= row["50%"] <= row["75%"] <= row["max"]
    assert row["50%"] == pytest.approx(0.001, rel=0.03)
    rc, out = run("stats", "--db", str(calm_then_slow), "--at", AT, "--since", "2h")
    assert rc == 0
    header = out.splitlines()[1].split()
    assert header == ["target", "op", "count", "errors", "mean", "std", "min", "25%", "50%",
                      "75%", "max"]


def test_history_csv_every_ten_minutes(calm_then_slow):
    rc, out = run("history", "--db", str(calm_then_slow), "--at", AT, "--since", "2h",
                  "--every", "10m", "--target", "work", "--op", "md-stat")
    assert rc == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert len(rows) == 12
    assert rows[0]["time"] == "2026-11-01T00:00:00Z"
    assert all(int(r["count"]) == 600 for r in rows)
    assert float(rows[-1]["median"]) > 4 * float(rows[0]["median"])


def test_history_in_several_processes_writes_the_bytes_of_one(calm_then_slow, tmp_path):
    args = ["history", "--db", str(calm_then_slow), "--at", AT, "--since", "2h",
            "--stat", "median", "--stat", "q99", "--stat", "mean", "--stat", "max"]
    _, alone = run(*args)  # an in-memory stream: one process
    assert alone.count("\n") == 1 + 12 * 120
    for jobs in ("2", "5", "40"):
        with open(tmp_path / "out.csv", "wb") as out:
            done = subprocess.run([sys.executable, "-m", "slowdown.analysis.cli", *args,
                                   "--jobs", jobs], stdout=out, stderr=subprocess.PIPE)
        assert done.returncode == 0, done.stderr
        assert (tmp_path / "out.csv").read_text() == alone, jobs


def test_history_json_is_the_csv_as_one_document(calm_then_slow, monkeypatch):
    """The JSON form holds the CSV's rows (NaN as null: a minute of skipped ticks only),
    laid out as ``json.dumps(indent=2)`` lays out the whole document, whatever the block of
    rows written at a time; an empty range is an empty list."""
    from slowdown.analysis.cli import history as history_command
    from slowdown.analysis.store.records import Record

    with Store(calm_then_slow) as store:  # a minute with no completed op: no quantiles
        store.write([Record("n1", "home", "md-stat", NOV + 120 * 60, Histogram(), skipped=60)])
    base = ["history", "--db", str(calm_then_slow), "--at", "2026-11-01T02:01:00Z"]
    args = [*base, "--since", "2h1m", "--stat", "median", "--stat", "q99", "--stat", "mean",
            "--stat", "max"]
    _, text = run(*args, "--format", "json")
    doc = json.loads(text)
    assert text == json.dumps(doc, indent=2) + "\n"
    _, out = run(*args)
    rows = list(csv.DictReader(io.StringIO(out)))
    assert len(doc["rows"]) == len(rows) == 12 * 120 + 1
    assert doc["step"] == 60 and doc["to"] - doc["from"] == 121 * 60
    for got, want in zip(doc["rows"], rows):
        assert list(got) == list(want)
        for key, value in want.items():
            if key in ("time", "target", "op"):
                assert got[key] == value
            elif value == "":
                assert got[key] is None, key
            else:
                assert got[key] == pytest.approx(float(value), rel=1e-8), key
    skipped = next(r for r in doc["rows"] if r["skipped"])
    assert skipped["count"] == 0 and skipped["median"] is None and skipped["max"] is None
    writer = history_command._write_history_json
    monkeypatch.setattr(history_command, "_write_history_json",
                        lambda *a: writer(*a, block=7))  # 1441 rows: many blocks
    assert run(*args, "--format", "json")[1] == text
    _, empty = run(*base, "--since", "2026-10-01", "--until", "2026-10-02", "--format", "json")
    assert json.loads(empty)["rows"] == [] and empty == json.dumps(json.loads(empty),
                                                                   indent=2) + "\n"


def test_a_statistic_named_twice_is_one_column(calm_then_slow):
    args = ["history", "--db", str(calm_then_slow), "--at", AT, "--since", "10m"]
    once, twice = run(*args, "--stat", "q99"), run(*args, "--stat", "q99", "--stat", "q99")
    assert once == twice and once[1].splitlines()[0].split(",").count("q99") == 1
    text = run(*args, "--stat", "q99", "--stat", "q99", "--format", "json")[1]
    assert text.count('"q99":') == len(json.loads(text)["rows"]) == 12 * 10


def test_cluster_view_over_a_glob_of_host_files(tmp_path):
    raw = []
    for i in range(3):
        raw += fill(tmp_path / f"host{i}.db", NOV, 20, lognormal(0.001 * (i + 1)),
                    host=f"host{i}", ops=("md-stat",), seed=i)
    _, out = run("stats", "--db", str(tmp_path / "host*.db"), "--at", "2026-11-01T00:20:00Z",
                 "--since", "20m", "--json")
    (row,) = json.loads(out)["ops"]
    whole = Histogram()
    whole.record_many(np.concatenate(raw))
    assert row["count"] == whole.count
    assert row["50%"] == whole.quantile(0.5) and row["75%"] == whole.quantile(0.75)
    rc, out = run("stats", "--db", str(tmp_path / "host*.db"), "--host", "host1",
                  "--at", "2026-11-01T00:20:00Z", "--since", "20m", "--json")
    assert rc == 0 and json.loads(out)["ops"][0]["count"] == 20 * 60


@pytest.mark.parametrize(("args", "flag"), [
    (["--at", "yesterday-ish"], "--at"),
    (["--stat", "q150"], "--stat"),
    (["stats", "--since", "10x"], "--since"),
    (["history", "--every", "90s"], "--every"),
    (["history", "--since", "2026-11-02", "--until", "2026-11-01"], "--since"),
    (["stats", "--since", "1h", "--until", "2h"], "--since"),
    (["--accuracy", "200%"], "--accuracy"),
])
def test_bad_values_name_the_flag(calm_then_slow, args, flag):
    result = CliRunner().invoke(main, ["--db", str(calm_then_slow), *args]
                                if args[0].startswith("-") else
                                [args[0], "--db", str(calm_then_slow), *args[1:]])
    assert result.exit_code == 2
    assert flag in result.output


def test_rebaseline_needs_a_reason_and_records_it(calm_then_slow):
    rc, out = run("rebaseline", "--db", str(calm_then_slow), "--reason", "new OSTs",
                  "--from", "2026-11-01T00:00:00Z", "--to", "2026-11-01T01:00:00Z")
    assert rc == 0 and "in force from" in out
    rc, out = run("rebaseline", "--db", str(calm_then_slow))
    assert rc == 2 and "--reason" in out


def test_the_installed_command_runs(calm_then_slow):
    done = subprocess.run([sys.executable, "-m", "slowdown.analysis.cli", "--db",
                           str(calm_then_slow), "--at", AT], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert len(done.stdout.strip().splitlines()) == 2


def test_read_options_before_the_subcommand_apply_to_it(calm_then_slow):
    rc, out = run("--db", str(calm_then_slow), "--at", AT, "--target", "home", "stats",
                  "--since", "2h", "--json")
    assert rc == 0
    assert {row["target"] for row in json.loads(out)["ops"]} == {"home"}


def test_history_divides_each_step_by_the_baseline_in_force_then(tmp_path):
    """Day 1 at 1 ms, day 2 at 3 ms; the initial baseline (day 1's data) takes over after
    day 1, a manual rebaseline from day 2's data at noon of day 2. Each step of a history
    is divided by the baseline of its own time, day 1 by what its provisional value was."""
    db = tmp_path / "n1.db"
    day = 86400
    fill(db, NOV, 1440, lognormal(0.001, 0.1), ops=("md-stat",), per_minute=6)
    with Store(db) as store:
        assert baseline.maintain(store, NOV + day, statistics=["median"])
    fill(db, NOV + day, 1440, lognormal(0.003, 0.1), ops=("md-stat",), per_minute=6, seed=1)
    with Store(db) as store:
        baseline.rebaseline(store, NOV + day + day // 2, "new OSTs", data_from=NOV + day)
    rc, out = run("history", "--db", str(db), "--at", "2026-11-03T00:00:00Z", "--since", "2d",
                  "--every", "1h", "--stat", "median")
    assert rc == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert len(rows) == 48
    ratios = [float(r["slowdown_median"]) for r in rows]
    assert all(0.9 < r < 1.1 for r in ratios[:24]), ratios[:24]  # day 1 / its own level
    assert all(2.7 < r < 3.3 for r in ratios[24:36]), ratios[24:36]  # day 2 / day 1's level
    assert all(0.9 < r < 1.1 for r in ratios[36:]), ratios[36:]  # after the rebaseline
