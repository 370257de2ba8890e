"""`slowdown servers` on real SQLite files of a fleet: the slow brick named, the quiet half
hour before naming none, hosts merged exactly per (target, op, server), and what it says of
files without per-server records."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys

import pytest

from slowdown.analysis.cli.main import main
from slowdown.analysis.histogram import Histogram, codec
from slowdown.analysis.stats import server_rule
from slowdown.analysis.store import Store
from testdata import migrationdata, serverkit
from testdata.datakit import fill, lognormal, utc
from tests.kit.cli_runner import runner

T0 = utc(2026, 11, 1)  # a multiple of 600
SLOW = "h3:/bricks/b3"
# Three quiet tens, then one in which brick 3 is 12x slower: the half hour before it is quiet.
AT_SLOW = "2026-11-01T00:40:00Z"  # the end of the slow ten
AT_QUIET = "2026-11-01T00:30:00Z"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """Three nodes, a distribute volume of four bricks, 600 probes per node and ten."""
    directory = tmp_path_factory.mktemp("fleet") / "nodes"
    serverkit.write_fleet(directory, 3, 4, T0, 4, slow={SLOW: 12.0}, slow_tens=[3], seed=3)
    return directory


def run(*args: str) -> tuple[int, str, str]:
    result = runner().invoke(main, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def as_json(*args: str) -> list[dict]:
    code, out, err = run(*args, "--json")
    assert code == 0, err
    return json.loads(out)


def test_the_slow_brick_is_named_and_no_other(fleet):
    rows = as_json("servers", "--db", str(fleet / "*.db"), "--since", "10m", "--at", AT_SLOW)
    words = {r["server"]: r["word"] for r in rows}
    assert words == {SLOW: "slow", "h1:/bricks/b1": "ok", "h2:/bricks/b2": "ok",
                     "h4:/bricks/b4": "ok"}
    slow = next(r for r in rows if r["server"] == SLOW)
    assert rows[0] is not None and rows[0]["server"] == SLOW  # slow ones first
    assert slow["ops"] == ["data-read"] and slow["target"] == "work"
    assert 8 < slow["against_others"] < 16  # planted 12x, servers differing by ~10 %
    assert slow["slowdown"] > 2  # against the provisional baseline of every minute so far
    assert {"target", "server", "ops", "probes", "slowdown", "word"} <= set(slow)


def test_the_quiet_half_hour_before_names_none(fleet):
    rows = as_json("servers", "--db", str(fleet / "*.db"), "--since", "30m", "--at", AT_QUIET)
    assert len(rows) == 4 and {r["word"] for r in rows} == {"ok"}
    assert all(r["probes"] > 1000 for r in rows)  # 3 x 600 x 3 / 4 each, about 1350


def test_hosts_merge_exactly_per_server(fleet):
    """The probes and the median of each server are those of every host's records merged."""
    rows = {r["server"]: r for r in as_json("servers", "--db", str(fleet / "*.db"),
                                            "--since", "10m", "--at", AT_SLOW)}
    for server, row in rows.items():
        blobs = []
        for node in sorted(fleet.glob("*.db")):
            with sqlite3.connect(node) as conn:
                blobs += [b for (b,) in conn.execute(
                    "SELECT t.hist FROM server_tens t JOIN server_series s ON s.id = t.series "
                    "WHERE s.server = ? AND t.start = ?", (server, T0 + 1800))]
        merged = codec.merge_blobs(blobs)
        assert len(blobs) == 3 and row["probes"] == merged.count
        assert row["per_op"]["data-read"]["median"] == server_rule.quantile(merged, 0.5)


def test_one_host_alone_has_fewer_probes(fleet):
    one = as_json("servers", "--db", str(fleet / "n1.db"), "--since", "10m", "--at", AT_SLOW)
    three = as_json("servers", "--db", str(fleet / "*.db"), "--since", "10m", "--at", AT_SLOW)
    assert sum(r["probes"] for r in one) == 600 and sum(r["probes"] for r in three) == 1800


def test_the_text_names_the_slow_brick(fleet):
    code, out, _ = run("servers", "--db", str(fleet / "*.db"), "--at", AT_SLOW)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("work: 4 servers, 3 hosts, 00:30:00 UTC .. ")
    assert lines[1].startswith(f"slow: {SLOW} ") and lines[1].endswith("x")
    assert lines[2].split() == ["server", "op", "probes", "errors", "median", "q95",
                                "slowdown", "vs", "others", "word"]
    assert lines[3].split()[0] == SLOW and lines[3].split()[-1] == "slow"


def test_too_few_probes_are_few(tmp_path):
    """One node over a hundred servers: six probes each in ten minutes say nothing."""
    serverkit.write_fleet(tmp_path, 1, 100, T0, 1, slow={"h7:/bricks/b7": 10.0}, seed=4)
    rows = as_json("servers", "--db", str(tmp_path / "n1.db"), "--at", "2026-11-01T00:10:00Z")
    assert 95 <= len(rows) <= 100  # a server no probe fell on has no row
    assert {r["word"] for r in rows} == {"few"} and max(r["probes"] for r in rows) < 15


def test_a_file_without_per_server_records_says_so(tmp_path):
    db = tmp_path / "n1.db"
    fill(db, T0, 20, lognormal(0.001))
    code, out, err = run("servers", "--db", str(db), "--at", "2026-11-01T00:20:00Z")
    assert code == 1 and out == ""
    assert f"{db}: no per-server records: the service predates them" in err


def test_a_file_of_an_older_schema_says_so(tmp_path):
    db = tmp_path / "old.db"
    migrationdata.build_at(db, 8)  # the release before per-server records
    with Store(db, readonly=True) as store:
        assert store.version == 8
    code, _, err = run("servers", "--db", str(db), "--at", "2026-01-01T12:00:00Z")
    assert code == 1 and "no per-server records: the service predates them" in err


def test_a_cluster_with_some_older_files_notes_them(fleet, tmp_path):
    old = tmp_path / "old.db"
    fill(old, T0, 40, lognormal(0.004), host="n9", targets=("work",), ops=("data-read",))
    code, out, err = run("servers", "--db", str(fleet / "*.db"), "--db", str(old), "--json",
                         "--at", AT_SLOW)
    assert code == 0 and len(json.loads(out)) == 4
    assert "note: 1 of 4 files hold no per-server records" in err and str(old) in err


def test_unknown_target_exits_1(fleet):
    code, _, err = run("servers", "--db", str(fleet / "*.db"), "--target", "nope",
                       "--at", AT_SLOW)
    assert code == 1 and 'no target "nope"' in err


def test_a_range_without_records_says_where_they_are(fleet):
    code, _, err = run("servers", "--db", str(fleet / "*.db"), "--at", "2026-11-02T12:00:00Z")
    assert code == 1
    assert "no per-server records of the chosen targets, hosts and ops since" in err
    assert "records from" in err


def test_op_filter_and_the_real_command(fleet):
    env = {**os.environ, "PATH": os.path.dirname(sys.executable) + os.pathsep +
           os.environ.get("PATH", "")}
    done = subprocess.run(["slowdown", "servers", "--db", str(fleet / "*.db"), "--op", "md-*",
                           "--at", AT_SLOW], capture_output=True, text=True, env=env,
                          timeout=60)
    assert (done.returncode == 1 and 'no op "md-*"' in done.stderr) or \
        "no per-server records of the chosen" in done.stderr
    done = subprocess.run(["slowdown", "servers", "--db", str(fleet / "*.db"), "--json",
                           "--op", "data-read", "--at", AT_SLOW], capture_output=True,
                          text=True, env=env, timeout=60)
    assert done.returncode == 0
    assert [r["word"] for r in json.loads(done.stdout)].count("slow") == 1


def test_a_histogram_of_one_value_per_bucket_is_judged_by_its_edges():
    """The intervals use the bucket edges that hold the ranks: never slower than it is."""
    mine, others = Histogram(), Histogram()
    others.record_many([0.01] * 400)
    mine.record_many([0.0157] * 40)  # 1.57x: above 1.5x by more than two buckets (2.2 % each)
    assert server_rule.judge_one(mine, others).word == "slow"
    mine = Histogram()
    mine.record_many([0.0151] * 40)  # 1.51x: the bucket edges may make it 1.45x, not named
    assert server_rule.judge_one(mine, others).word == "ok"


def test_slowdown_v_over_the_fleet_names_the_slow_brick(fleet):
    code, out, _ = run("--db", str(fleet / "*.db"), "-v", "--at", AT_SLOW)
    assert code == 0
    (line,) = [x for x in out.splitlines() if x.startswith("slow servers")]
    assert line.startswith("slow servers work (medians over the last 10m, whole ten minutes): "
                           f"{SLOW} ") and ", the others " in line


def test_unknown_is_shown_but_never_named(tmp_path):
    """The ops whose server the filesystem did not tell are a server of their own in the
    table, judged like the others, but a verdict never names "unknown"."""
    names = ["unknown", *serverkit.server_names(3)]
    serverkit.write_fleet(tmp_path, 2, 4, T0, 1, slow={"unknown": 12.0}, names=names, seed=5)
    rows = as_json("servers", "--db", str(tmp_path / "*.db"), "--at", "2026-11-01T00:10:00Z")
    assert {r["server"]: r["word"] for r in rows}["unknown"] == "slow"
    code, out, _ = run("--db", str(tmp_path / "*.db"), "-v", "--at", "2026-11-01T00:10:00Z")
    assert code == 0 and "slow servers" not in out
