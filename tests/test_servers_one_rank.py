"""One MDS rank serves every metadata op: no other server to stand above, so it is judged
against the op's expected value (docs/SERVERS.md, "One rank"). On real SQLite files of three
nodes: a quiet rank is ``ok``, a rank 8x slower than the baseline is named ``slow`` by
``slowdown servers`` and ``slowdown -v``; the JSON says what it was judged against."""

from __future__ import annotations

import json

import numpy as np
import pytest

from slowdown.analysis.cli.main import main
from slowdown.analysis.histogram import Histogram
from slowdown.analysis.stats import server_rule
from testdata import serverkit
from testdata.datakit import utc
from tests.kit.cli_runner import runner

T0 = utc(2026, 11, 1)  # a multiple of 600
AT_SLOW = "2026-11-01T00:40:00Z"  # the end of the fourth ten, the slow one
AT_QUIET = "2026-11-01T00:29:30Z"  # the tens 00:10 and 00:20, quiet


@pytest.fixture(scope="module")
def one_rank(tmp_path_factory):
    """Three nodes' md-stat over one rank (and the few ops whose rank was not known yet):
    three quiet tens, then one with mds.0 8x slower."""
    directory = tmp_path_factory.mktemp("rank") / "nodes"
    serverkit.write_fleet(directory, 3, 1, T0, 4, op="md-stat", median=0.001,
                          slow={"mds.0": 8.0}, slow_tens=[3], seed=7, names=["mds.0"])
    return directory


def run(*args: str) -> tuple[int, str, str]:
    result = runner().invoke(main, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def rows_at(directory, at: str) -> dict[str, dict]:
    code, out, err = run("servers", "--db", str(directory / "*.db"), "--json", "--at", at)
    assert code == 0, err
    return {r["server"]: r for r in json.loads(out)}


def test_a_quiet_lone_rank_is_ok_against_the_expected_value(one_rank):
    row = rows_at(one_rank, AT_QUIET)["mds.0"]
    assert row["word"] == "ok" and row["probes"] == 3600
    md = row["per_op"]["md-stat"]
    assert md["judged_against"] == "expected" and md["against_others"] is None
    assert 0.8 < md["slowdown"] < 1.25


def test_a_slow_lone_rank_is_named_against_the_expected_value(one_rank):
    row = rows_at(one_rank, AT_SLOW)["mds.0"]
    assert row["word"] == "slow" and row["against_others"] is None
    assert 5 < row["slowdown"] < 12  # planted 8x; the provisional baseline holds the slow ten
    code, out, _ = run("servers", "--db", str(one_rank / "*.db"), "--at", AT_SLOW)
    lines = out.splitlines()
    assert code == 0 and lines[1].startswith("slow: mds.0 ") and lines[1].endswith("x")
    assert lines[3].split()[0] == "mds.0" and lines[3].split()[-2:] == ["-", "slow"]
    code, out, _ = run("--db", str(one_rank / "*.db"), "-v", "--at", AT_SLOW)
    (line,) = [x for x in out.splitlines() if x.startswith("slow servers")]
    assert line.startswith("slow servers work (medians over the last 10m, whole ten "
                           "minutes): mds.0 ")


def test_unknown_beside_one_rank_leaves_it_alone(tmp_path):
    """The ops whose rank was not known yet are no other server: the rank is still judged
    against the expected value, and ``unknown`` against the rank."""
    serverkit.write_fleet(tmp_path, 2, 2, T0, 2, op="md-stat", median=0.001,
                          slow={"mds.0": 8.0, "unknown": 8.0}, slow_tens=[1], seed=8,
                          names=["mds.0", "unknown"])
    rows = rows_at(tmp_path, "2026-11-01T00:20:00Z")
    assert rows["mds.0"]["word"] == "slow"
    assert rows["mds.0"]["per_op"]["md-stat"]["judged_against"] == "expected"
    assert rows["unknown"]["per_op"]["md-stat"]["judged_against"] == "others"


def test_the_rule_alone_needs_probes_and_an_expected_value():
    h = Histogram()
    h.record_many(np.random.default_rng(1).lognormal(np.log(0.01), 0.5, 300))
    assert server_rule.judge_alone(h, 0.01).word == "ok"
    assert server_rule.judge_alone(h, 0.0075).word == "ok"  # 1.33x: not 1.5x surely
    assert server_rule.judge_alone(h, 0.005).word == "slow"  # 2x, its interval above 1.5x
    assert server_rule.judge_alone(h, None).word == "few"
    few = Histogram()
    few.record_many([0.1] * 14)
    assert server_rule.judge_alone(few, 0.001).word == "few"


@pytest.mark.parametrize("everywhere", [True, False])
def test_a_lone_server_is_named_only_above_the_servers_judged_together(tmp_path, everywhere):
    """GlusterFS: md ops spread over four bricks, data reads all on the one brick holding the
    data file. A filesystem slow everywhere (every brick 3x) slows that brick's reads 3x too,
    which names no server; the data brick alone 10x is named."""
    bricks = ["h1:/b1", "h2:/b2", "h3:/b3", "h4:/b4"]
    md_slow = dict.fromkeys(bricks, 3.0) if everywhere else None
    serverkit.write_fleet(tmp_path, 2, 4, T0, 4, op="md-stat", median=0.001, slow=md_slow,
                          slow_tens=[3], seed=9, names=bricks)
    serverkit.write_fleet(tmp_path, 2, 1, T0, 4, op="data-read", median=0.004,
                          slow={"h1:/b1": 3.0 if everywhere else 10.0}, slow_tens=[3],
                          seed=10, names=["h1:/b1"])
    rows = rows_at(tmp_path, AT_SLOW)
    read = rows["h1:/b1"]["per_op"]["data-read"]
    assert read["judged_against"] == "expected" and read["slowdown"] > 2
    if everywhere:
        assert {r["word"] for r in rows.values()} == {"ok"}, rows
    else:
        assert rows["h1:/b1"]["word"] == "slow" and read["word"] == "slow"
        assert {rows[b]["word"] for b in bricks[1:]} == {"ok"}
