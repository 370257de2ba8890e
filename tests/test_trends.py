"""`slowdown trends` on fleets with planted effects (testdata/trendkit.py): every planted shift
found within a day and its factor within 20 %, the cycles found, no change on stationary
series; the same on fio latency logs imported with `import-fio --into-db`; bad input."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys

import pytest

from slowdown.analysis.cli.main import main
from slowdown.analysis.store import Store
from testdata import trendkit
from tests.kit.cli_runner import runner
from tests.kit.configkit import REFERENCE
from tests.kit.fiologs import run as import_fio

DAY = 86400
OPS = ("md-stat", "data-read")  # the ops the planted fleet writes: its effects are on these


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """Two hosts of 60 days: steady, shifted (md-stat 2x on day 12.5), shifted-down
    (data-read 0.6x on day 40.25), cyclic (daily 1.6x at 02:30, Sundays 1.4x), cached
    (data-read half as slow for a week from day 30)."""
    kit = trendkit.planted(hosts=2, ops=OPS)
    kit = trendkit.Fleet(kit.targets, hosts=2, ops=OPS, per_hour=120)
    directory = tmp_path_factory.mktemp("trends-fleet")
    trendkit.write_fleet(directory, kit)
    return kit, directory


def trends(*args: str, code: int = 0) -> list | str:
    result = runner().invoke(main, ["trends", *args], catch_exceptions=False)
    assert result.exit_code == code, (result.output, result.stderr)
    if code:
        return result.stderr
    return json.loads(result.stdout) if "--json" in args else result.stdout


def at_end(kit) -> list[str]:
    return ["--at", f"@{kit.end}"]


def test_every_planted_effect_found_and_nothing_else(fleet):
    kit, directory = fleet
    found = trends("--db", str(directory / "*.db"), *at_end(kit), "--json")
    changes = [f for f in found if f["kind"] == "change"]
    planted = trendkit.planted_changes(kit)
    assert len(planted) == 2
    for target, op, moment, factor in planted:
        mine = [c for c in changes if (c["target"], c["op"]) == (target, op)]
        assert len(mine) == 1, (target, op, changes)
        assert abs(mine[0]["at"] - moment) <= DAY
        assert abs(mine[0]["factor"] / factor - 1) <= 0.2
        assert mine[0]["sure"] > 0.9 and mine[0]["latest"]
    assert len(changes) == len(planted)  # none on the steady series, the cycles, the caching
    episodes = [f for f in found if f["kind"] == "episode"]
    assert [(e["target"], e["op"]) for e in episodes] == [("cached", "data-read")]
    assert abs(episodes[0]["at"] - (kit.start + 30 * DAY)) <= DAY
    assert abs(episodes[0]["until"] - (kit.start + 37 * DAY)) <= DAY
    assert abs(episodes[0]["factor"] / 0.5 - 1) <= 0.2
    for kind, factor, peaks in (("daily", 1.6, {2, 3}), ("weekly", 1.4, {6})):
        cycles = [f for f in found if f["kind"] == kind]
        assert sorted((c["target"], c["op"]) for c in cycles) == \
            [("cyclic", op) for op in sorted(OPS)], kind
        for c in cycles:
            assert c["peak"] in peaks and abs(c["factor"] / factor - 1) <= 0.2
            assert c["explained"] > 0.2


def test_text_says_what_to_do_and_its_command_works(fleet, tmp_path):
    kit, directory = fleet
    host = tmp_path / "h01.db"
    shutil.copy(directory / "h01.db", host)
    out = trends("--db", str(host), *at_end(kit), "--target", "shifted", "--op", "md-stat")
    said = re.search(r"change   2026-09-1[34] \d\d:00 UTC  rose (\d\.\d\d)x", out)
    assert said and abs(float(said[1]) / 2 - 1) <= 0.2, out
    advice = next(line for line in out.splitlines() if "what to do" in line)
    assert f"md-stat's level rose {said[1]}x" in advice and "has stayed for 48 days" in advice
    command = shlex.split(advice.split("`")[1])
    found = trends("--db", str(host), *at_end(kit), "--target", "shifted", "--json")
    assert [f["command"] for f in found if f["kind"] == "change"] == [command]
    assert command[:4] == ["slowdown", "rebaseline", "--from", "2026-09-13T12:00Z"]
    assert command[command.index("--to") + 1] == "2026-10-31T00:00Z"  # the end looked at
    done = runner().invoke(main, command[1:], catch_exceptions=False)
    assert done.exit_code == 0, done.output
    with Store(host, readonly=True) as store:
        made = store.conn.execute(
            "SELECT count(DISTINCT op), min(data_from) FROM baselines WHERE reason LIKE '%trends%'"
        ).fetchone()
    assert made == (len(OPS), kit.start + int(12.5 * DAY))
    # With a configuration named, the command names it too, and still runs.
    found = runner().invoke(main, ["--config", str(REFERENCE), "trends", "--db", str(host),
                                   *at_end(kit), "--target", "shifted", "--json"],
                            catch_exceptions=False)
    command = next(f["command"] for f in json.loads(found.output) if f["kind"] == "change")
    assert command[:4] == ["slowdown", "--config", str(REFERENCE), "rebaseline"]
    done = runner().invoke(main, command[1:], catch_exceptions=False)
    assert done.exit_code == 0, done.output


def test_steady_fleet_and_cycles_in_text(fleet):
    kit, directory = fleet
    out = trends("--db", str(directory / "*.db"), *at_end(kit), "--target", "steady")
    assert out.count("steady: no change, no cycle") == len(OPS)
    out = trends("--db", str(directory / "h02.db"), *at_end(kit), "--target", "cyclic",
                 "--op", "md-stat")
    assert "daily    peak 0" in out and "weekly   peak Sunday" in out


def test_fio_latency_logs_imported_into_the_database(tmp_path):
    """Ten days of one fio job's latency log (unix ms, a sample a minute), its level 1.8x
    from day 6.5 on, daily 1.5x: imported with --into-db, then read by trends."""
    effects = trendkit.Effects(shifts=((6.5, 1.8),), daily=1.5, daily_peak=14.0)
    log = trendkit.latency_log(tmp_path / "job_lat.1.log", trendkit.START, 10, effects,
                               median=2e-3, every=60.0, seed=5)
    db = tmp_path / "fio.db"
    import_fio("--into-db", "scratch", "--db", db, "--host", "fio1", log)
    found = trends("--db", str(db), "--at", f"@{trendkit.START + 10 * DAY}", "--since", "12d",
                   "--json")
    changes = [f for f in found if f["kind"] == "change"]
    assert len(changes) == 1, found
    assert (changes[0]["target"], changes[0]["op"]) == ("scratch", "read")
    assert abs(changes[0]["at"] - (trendkit.START + 6.5 * DAY)) <= DAY
    assert abs(changes[0]["factor"] / 1.8 - 1) <= 0.2
    daily = [f for f in found if f["kind"] == "daily"]
    assert len(daily) == 1 and daily[0]["peak"] in (13, 14, 15)
    assert abs(daily[0]["factor"] / 1.5 - 1) <= 0.2


def test_bad_input_is_one_line_and_a_nonzero_exit(fleet, tmp_path):
    kit, directory = fleet
    said = trends("--db", str(directory / "h01.db"), "--since", "nonsense", code=2)
    assert "--since" in said and "nonsense" in said
    said = trends("--db", str(directory / "h01.db"), "--stat", "mean", code=2)
    assert "--stat" in said
    empty = tmp_path / "empty.db"
    Store(empty).close()
    said = trends("--db", str(empty), "--at", f"@{kit.end}", code=1)
    assert "no data" in said and "2026-09-01" in said
    said = trends("--db", str(tmp_path / "absent.db"), code=1)
    assert "absent.db" in said
    out = trends("--db", str(directory / "h01.db"), "--at", f"@{kit.end}", "--since", "2d",
                 "--target", "steady")
    assert "too few hours (under 3 days) for: steady data-read, steady md-stat" in out
    result = runner().invoke(main, ["trends", "--db", str(directory / "h01.db"), "--at",
                                    f"@{kit.end}", "--since", "2d", "--target", "steady",
                                    "--json"], catch_exceptions=False)
    assert (result.exit_code, json.loads(result.stdout)) == (0, [])
    assert "too few hours (under 3 days) for: steady data-read" in result.stderr


def test_a_cluster_goes_on_without_a_file_it_cannot_read(fleet, tmp_path):
    kit, directory = fleet
    for name in ("h01.db", "h02.db"):
        shutil.copy(directory / name, tmp_path / name)
    (tmp_path / "h03.db").write_text("not a database\n")
    result = runner().invoke(main, ["trends", "--db", str(tmp_path / "*.db"), "--at",
                                    f"@{kit.end}", "--target", "shifted", "--op", "md-stat",
                                    "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert f"note: {tmp_path / 'h03.db'} left out" in result.stderr
    assert [f["kind"] for f in json.loads(result.stdout)] == ["change"]


def test_plain_slowdown_does_not_load_ruptures_or_scipy():
    code = ("import sys; from slowdown.analysis.cli.main import main; "
            "print(sorted(m for m in ('ruptures', 'scipy') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "[]"
