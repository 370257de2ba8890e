"""Smaller untruths a user met, each said truly now: a warning level above the critical one,
names that do not exist, the intervals of ``--json``, a file that is not a slowdown database,
a baseline from too little data. Real SQLite files, the real command lines."""

from __future__ import annotations

import json
import sqlite3
import time

import pytest
from click.testing import CliRunner

from slowdown.analysis.cli.main import main
from slowdown.analysis.stats import baseline
from slowdown.analysis.store import Store, schema
from slowdown.analysis.store.records import minute_of
from slowdown.analysis.units import format_latency
from testdata.datakit import fill, lognormal, utc

NOV = utc(2026, 11, 1)
AT = "2026-11-01T02:00:00Z"  # the end of the two hours written


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return result.exit_code, result.output


@pytest.fixture
def two_targets(tmp_path):
    """home and work: two hours of every op at 1 ms."""
    db = tmp_path / "n1.db"
    fill(db, NOV, 120, lognormal(0.001, 0.2), targets=("home", "work"))
    return db


# -- check: a warning level above the critical one ---------------------------------------------

@pytest.mark.parametrize(("args", "said"), [
    (("-w", "10", "-c", "3"), "-w/--warning 10 is above -c/--critical 3: "),
    (("-w", "15"), "-w/--warning 15 is above -c/--critical 10 (the default): "),
    (("-c", "2"), "-w/--warning 3 (the default) is above -c/--critical 2: "),
    (("--errors-warning", "30%", "--errors-critical", "0.1"),
     "--errors-warning 30% is above --errors-critical 10%: "),
    (("--errors-warning", "0.5"), "--errors-warning 50% is above --errors-critical 25% "
                                  "(the default): "),
])
def test_a_warning_level_above_the_critical_one_is_unknown(two_targets, args, said):
    code, out = run("check", "--db", str(two_targets), "--at", AT, *args)
    assert code == 3, out
    assert out.startswith(f"SLOWDOWN UNKNOWN - {said}the warning level must not be above "
                          "the critical one"), out
    assert len(out.splitlines()) == 1


def test_a_warning_level_above_the_rules_critical_one_names_the_rules(two_targets, tmp_path):
    config = tmp_path / "slowdown.toml"
    config.write_text(
        f'database = "{two_targets}"\n[[target]]\nname = "work"\npath = "/nonexistent/work"\n'
        '[[alert]]\nname = "slow-10m"\nkind = "slowdown"\nstatistic = "median"\n'
        'window = "10m"\nabove = 2\n'
        'critical = 4\naction = { type = "command", argv = ["/bin/true"] }\n')
    code, out = run("--config", str(config), "check", "--at", AT, "-w", "5")
    assert code == 3, out
    assert "-w/--warning 5 is above -c/--critical 4 (from the alert rules)" in out, out


def test_equal_levels_are_accepted(two_targets):
    code, out = run("check", "--db", str(two_targets), "--at", AT, "-w", "5", "-c", "5",
                    "--errors-warning", "5%", "--errors-critical", "5%")
    assert code == 0 and out.startswith("SLOWDOWN OK - "), out


# -- --json: the intervals -v prints -------------------------------------------------------------

def test_json_has_the_intervals_that_verbose_prints(two_targets):
    code, out = run("--db", str(two_targets), "--at", AT, "--json", "--target", "work")
    assert code == 0, out
    (work,) = json.loads(out)["targets"]
    ops = [o for w in work["windows"] for o in w["ops"]]
    assert len(ops) == 6 * 3  # six ops, three windows
    for o in ops:
        assert o["low"] is not None and o["high"] is not None, o
        assert o["low"] <= o["observed"] <= o["high"], o
    code, out = run("--db", str(two_targets), "--at", AT, "-v", "--target", "work",
                    "--op", "md-stat")
    row = next(line.split() for line in out.splitlines()
               if line.split()[:3] == ["work", "md-stat", "1h"])
    hour = next(w for w in work["windows"] if w["window"] == 3600)
    md_stat = next(o for o in hour["ops"] if o["op"] == "md-stat")
    assert row[4] == f"{format_latency(md_stat['low'])}..{format_latency(md_stat['high'])}"


# -- rebaseline: a baseline from minutes of data ---------------------------------------------

def test_a_rebaseline_from_minutes_of_data_stays_provisional_and_says_how_long(tmp_path):
    db = tmp_path / "n1.db"
    first = minute_of(time.time()) - 3 * 60  # three minutes of records, the last day's only
    fill(db, first, 3, lognormal(0.001, 0.2), targets=("work",), ops=("md-stat", "md-read"))
    code, out = run("rebaseline", "--db", str(db), "--reason", "new OSTs")
    assert code == 0, out
    assert out.endswith("from data 3m long; provisional for 2 of them (from less than 1d of "
                        "data) until 1d of data makes another\n"), out
    with Store(db, readonly=True) as store:
        made = baseline.load(store)
    assert made and all(b.provisional and b.reason == "new OSTs" for b in made), made
    code, out = run("--db", str(db))  # the readers say so
    assert code == 0 and "(provisional baseline" in out, out
    # A day of data on: the service's upkeep makes one from it, the reason kept.
    fill(db, first + 3 * 60, 1440, lognormal(0.002, 0.2), targets=("work",),
         ops=("md-stat", "md-read"), seed=1)
    later = first + 1443 * 60 + 30
    with Store(db) as store:
        grown = baseline.maintain(store, later, provisional_after=86400)
        assert baseline.maintain(store, later + 60, provisional_after=86400) == []  # once
        now_in_force = baseline.load(store, at=later + 60)
    assert {(b.target, b.op) for b in grown} == {("work", "md-stat"), ("work", "md-read")}
    assert all(not b.provisional and b.reason == "new OSTs" for b in grown), grown
    assert {b.valid_from for b in now_in_force} == {minute_of(later)}
    assert all(b.value > 0.0015 for b in now_in_force if b.statistic == "median")


def test_a_rebaseline_over_a_day_holding_two_hours_of_records_is_provisional(two_targets):
    code, out = run("rebaseline", "--db", str(two_targets), "--reason", "x", "--from",
                    "2026-11-01T00:00:00Z", "--to", "2026-11-02T00:00:00Z")
    assert code == 0, out
    assert out.endswith("from data 2h long; provisional for 12 of them (from less than 1d of "
                        "data) until 1d of data makes another\n"), out


# -- a file that is not a slowdown database ------------------------------------------------------

def _not_databases(tmp_path) -> dict[str, tuple]:
    """Files that are not slowdown databases, and what the error calls each."""
    (tmp_path / "empty.db").write_bytes(b"")
    for name, script in (("tables.db", "CREATE TABLE mine (x); INSERT INTO mine VALUES (1)"),
                         ("marked.db", "PRAGMA application_id = 42"),
                         ("bare.db", "PRAGMA user_version = 0; VACUUM")):
        conn = sqlite3.connect(tmp_path / name)
        conn.executescript(script)
        conn.close()
    return {"empty.db": "(an empty file); refusing to touch it",
            "tables.db": "(refusing to touch it)", "marked.db": "(refusing to touch it)",
            "bare.db": "(an SQLite file without slowdown's tables); refusing to touch it"}


def test_rebaseline_writes_nothing_into_a_file_that_is_not_a_slowdown_database(tmp_path):
    for name, what in _not_databases(tmp_path).items():
        path = tmp_path / name
        before = path.read_bytes()
        code, out = run("rebaseline", "--db", str(path), "--reason", "x")
        assert code == 1, (name, out)
        assert out == f"Error: {path}: not a slowdown database {what}\n", out
        assert path.read_bytes() == before, name
        assert sorted(p.name for p in tmp_path.glob(f"{name}*")) == [name]  # no -wal, -shm
        code, out = run("--db", str(path))  # the readers call it the same, with no advice
        assert code == 1 and "not a slowdown database" in out and "migrate" not in out, out


def test_rebaseline_makes_no_database_where_there_is_none(tmp_path):
    code, out = run("rebaseline", "--db", str(tmp_path / "nosuch.db"), "--reason", "x")
    assert code == 1 and out == f"Error: {tmp_path / 'nosuch.db'}: no such database\n", out
    assert list(tmp_path.iterdir()) == []


def test_the_advice_to_migrate_is_for_an_older_slowdown_database_only(tmp_path):
    old = tmp_path / "old.db"
    conn = sqlite3.connect(old, isolation_level=None)
    schema.migrate(conn, str(old), target=schema.READABLE_FROM - 1)
    conn.close()
    code, out = run("--db", str(old))
    assert code == 1, out
    assert out == (f"Error: {old}: schema version {schema.READABLE_FROM - 1}, this slowdown reads "
                   f"{schema.VERSION}; open it once for writing (the service does) to migrate\n")


# -- names that no file holds -----------------------------------------------------------------

READS = [(), ("stats",), ("history",), ("report", "-o", "{tmp}/r.html"), ("check",),
         ("watch", "--count", "1"), ("trends",), ("servers",)]


@pytest.mark.parametrize("command", READS, ids=["slowdown", "stats", "history", "report",
                                                 "check", "watch", "trends", "servers"])
@pytest.mark.parametrize(("option", "given", "said"), [
    ("--target", "nosuch", 'no target "nosuch" in {db}; its targets: home, work'),
    ("--target", "x*", 'no target matching "x*" in {db}; its targets: home, work'),
    ("--host", "n2", 'no host "n2" in {db}; its hosts: n1'),
    ("--op", "md-sync", 'no op "md-sync" in {db}; its ops: data-read, data-write, md-delete, '
                        'md-read, md-stat, md-write'),
])
def test_a_name_no_file_holds_is_said_with_the_names_it_holds(two_targets, tmp_path, command,
                                                               option, given, said):
    args = [a.format(tmp=tmp_path) for a in command]
    code, out = run("--db", str(two_targets), "--at", AT, *args, option, given)
    said = said.format(db=two_targets)
    if command == ("check",):
        assert (code, out) == (3, f"SLOWDOWN UNKNOWN - {said}\n")
    else:
        assert (code, out) == (1, f"Error: {said}\n")
    assert not (tmp_path / "r.html").exists()


def test_every_unknown_name_is_said_and_a_cluster_lists_its_files_names(two_targets, tmp_path):
    other = tmp_path / "n2.db"
    fill(other, NOV, 120, lognormal(0.001, 0.2), host="n2", targets=("scratch",))
    code, out = run("stats", "--db", str(two_targets), "--db", str(other), "--at", AT,
                    "--target", "nosuch", "--target", "work", "--target", "gone",
                    "--op", "md-*", "--host", "n9")
    assert code == 1
    assert out == ('Error: no host "n9" in the 2 databases read; their hosts: n1, n2; '
                   'no target "nosuch" nor "gone" in the 2 databases read; their targets: '
                   "home, scratch, work\n"), out


def test_names_and_globs_that_match_are_read_as_before(two_targets):
    code, out = run("stats", "--db", str(two_targets), "--at", AT, "--target", "w*",
                    "--op", "md-stat", "--json")
    assert code == 0, out
    assert [(r["target"], r["op"]) for r in json.loads(out)["ops"]] == [("work", "md-stat")]


def test_a_foreign_file_whose_service_says_its_records_do_not_land_is_said_in_one_line(tmp_path):
    """The one database named is someone else's file, and the service writing that path says
    its records are not reaching it: ``slowdown`` says why (exit 1), ``check`` is CRITICAL
    with the same words, each in one line (the scene of tests/kit/scenes/live_database.py
    meets it with a real service; this is the same read, quickly)."""
    database = tmp_path / "slowdown.db"
    with sqlite3.connect(database) as conn:
        conn.execute("CREATE TABLE notes (text)")
    now = time.time()
    since = now - 90
    records = {"ok": False, "path": str(database), "since": since, "moved": True,
               "reason": "the file at the path is not a slowdown database", "episodes": []}
    (tmp_path / "slowdown.db.live.json").write_text(json.dumps(
        {"pid": 1, "host": "n0", "started": now - 600, "updated": now, "records": records}))
    runner = CliRunner()
    line = runner.invoke(main, ["--db", str(database)])
    assert line.exit_code == 1 and isinstance(line.exception, SystemExit), line
    assert "records are not reaching" in line.output and str(database) in line.output, line.output
    check = runner.invoke(main, ["check", "--db", str(database)])
    assert check.exit_code == 2, check.output
    assert check.output.startswith("SLOWDOWN CRITICAL - records are not reaching"), check.output
    assert len(check.output.splitlines()) == 1, check.output
