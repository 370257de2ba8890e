"""``[baseline] expected = "weekly"`` on real SQLite files made by testdata/trendkit.py: a
nightly job reads near 1 at its usual hour and a real slowdown still reads as one; two hosts'
files merge the weekly baselines exactly as one file of both; the flat default reads as
before; before a week of data the value is the flat one, and says so; a bad value is named
with its file and line."""

from __future__ import annotations

import datetime as dt
import json
import shutil
import sqlite3

import pytest

from slowdown.analysis.config import ConfigError, load_config
from slowdown.analysis.stats.baseline import BaselineBook
from slowdown.analysis.stats.weekly import smooth
from slowdown.analysis.store import Store
from tests.kit import weeklykit as kit

HOUR = 3600
AT_NIGHT = kit.BASELINE_AT + 3 * HOUR + 30 * 60  # 03:30 on day 28: the nightly job's hour
AT_SPIKE = kit.BASELINE_AT + 14 * HOUR + 30 * 60  # 14:30: the real slowdown


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    directory = tmp_path_factory.mktemp("weekly")
    nodes, both = kit.write(directory, kit.fleet())
    made = kit.maintain([*nodes, both], kit.BASELINE_AT)
    assert {b.reason for b in made} == {"initial"}
    return directory, nodes, both


def test_nightly_job_reads_near_one_and_a_real_slowdown_still_reads(files):
    directory, _, both = files
    weekly, flat = kit.config(directory, "weekly"), kit.config(directory, "same")
    for window in (60.0, 600.0, 3600.0):
        night = kit.op_of(kit.slowdown_json(weekly, str(both), AT_NIGHT), window)
        assert 0.85 < night["slowdown"] < 1.25, night
        assert night["expected_basis"] == "weekly"
        assert night["expected_note"] == ("weekly: Tue 03h" if window < 3600 else
                                          "weekly: Tue 02h-03h")  # the hours it covers
        assert kit.op_of(kit.slowdown_json(flat, str(both), AT_NIGHT), window)["slowdown"] > 2.5
    spike = kit.op_of(kit.slowdown_json(weekly, str(both), AT_SPIKE), 600.0)
    assert spike["slowdown"] > 4.0, spike
    text = kit.run("--config", str(weekly), "--db", str(both), "--at", f"@{AT_NIGHT}", "-v")
    assert "weekly: Tue 03h" in text


def test_history_reads_each_hour_against_its_own(files):
    directory, _, both = files
    weekly = kit.config(directory, "weekly")
    rows = json.loads(kit.run("--config", str(weekly), "history", "--db", str(both), "--since",
                              f"@{kit.BASELINE_AT}", "--until", f"@{kit.BASELINE_AT + 86400}",
                              "--every", "1h", "--stat", "median", "--format", "json"))["rows"]
    by_hour = {int(r["time"][11:13]): r["slowdown_median"] for r in rows}
    assert all(0.8 < by_hour[h] < 1.25 for h in range(24) if h != 14), by_hour
    assert by_hour[14] > 4.0
    flat = json.loads(kit.run("--config", str(kit.config(directory, "same")), "history", "--db",
                              str(both), "--since", f"@{kit.BASELINE_AT}", "--until",
                              f"@{kit.BASELINE_AT + 86400}", "--every", "1h", "--stat",
                              "median", "--format", "json"))["rows"]
    assert [r["slowdown_median"] > 2.5 for r in flat][2:4] == [True, True]


def test_two_hosts_merge_exactly_as_one_file_of_both(files):
    directory, nodes, both = files
    stores = [Store(p, readonly=True) for p in nodes]
    one = Store(both, readonly=True)
    try:
        utc = ("UTC", dt.timezone.utc)
        cluster = BaselineBook(stores, "weekly", zone=utc)
        single = BaselineBook([one], "weekly", zone=utc)
        for statistic in ("median", "q99", "mean"):
            for hour in range(0, 7 * 24, 5):
                for window in (0.0, 600.0, 4 * 3600.0, 86400.0):
                    at = kit.BASELINE_AT + hour * HOUR + 1800
                    a = cluster.expected("work", "md-stat", statistic, at, window)
                    b = single.expected("work", "md-stat", statistic, at, window)
                    assert a is not None and a.basis == "weekly" and a.hosts == 2
                    assert a.note == b.note
                    if statistic == "mean":  # the sums: fsum of each host's, or of all
                        assert a.value == pytest.approx(b.value, rel=1e-12)
                    else:  # buckets add exactly
                        assert a.value == b.value
    finally:
        for s in [*stores, one]:
            s.close()
    weekly = kit.config(directory, "weekly")
    merged = kit.slowdown_json(weekly, str(directory / "nodes" / "*.db"), AT_NIGHT)
    alone = kit.slowdown_json(weekly, str(both), AT_NIGHT)
    assert merged["merged"].pop("files") == 2 and alone["merged"].pop("files") == 1
    assert merged == alone


def test_flat_default_reads_as_it_did(files, tmp_path):
    """The setting off: the weekly histograms are not read, the JSON has no new key."""
    directory, _, both = files
    bare = tmp_path / "bare.db"
    shutil.copy(both, bare)
    with sqlite3.connect(bare) as conn:
        conn.execute("DELETE FROM weekly_histograms")
    flat = kit.config(directory, "same")
    for at in (AT_NIGHT, AT_SPIKE):
        for extra in (["--json"], ["-v"]):
            args = ["--config", str(flat), "--at", f"@{at}", *extra]
            assert kit.run(*args, "--db", str(both)) == kit.run(*args, "--db", str(bare))
    doc = kit.slowdown_json(flat, str(both), AT_NIGHT)
    assert "expected_basis" not in kit.op_of(doc, 600.0)


def test_before_a_week_the_flat_value_and_why(tmp_path):
    """The initial baseline after a day is flat for the readers; a week later the service
    makes another from all of it, and the hours take their own values."""
    nodes, _ = kit.write(tmp_path, kit.fleet(days=9, spike=False))
    day = kit.trendkit.START + 86400 * 2
    assert {b.reason for b in kit.maintain(nodes[:1], day)} == {"initial"}
    weekly = kit.config(tmp_path, "weekly")
    op = kit.op_of(kit.slowdown_json(weekly, str(nodes[0]), day + 3 * HOUR + 1800), 600.0)
    assert op["expected_basis"] == "flat"
    assert "less than a week of data" in op["expected_note"]
    assert op["slowdown"] > 2.5  # the flat value: the nightly job reads as before
    text = kit.run("--config", str(weekly), "--db", str(nodes[0]), "--at",
                   f"@{day + 3 * HOUR + 1800}", "-v")
    assert "baseline (flat)" in text
    assert ("work md-stat: flat: less than a week of data (48 of 168 hours of the week with "
            "20 values)") in text.splitlines()
    assert kit.maintain(nodes[:1], day + 3 * 86400) == []  # no week yet: nothing new
    week = kit.trendkit.START + 8 * 86400
    grown = kit.maintain(nodes[:1], week)
    assert grown and {(b.reason, b.data_to - b.data_from) for b in grown} == {
        ("initial", 8 * 86400)}
    op = kit.op_of(kit.slowdown_json(weekly, str(nodes[0]), week + 3 * HOUR + 1800), 600.0)
    assert op["expected_basis"] == "weekly" and 0.85 < op["slowdown"] < 1.25


def test_rebaseline_makes_weekly_histograms_only_with_the_setting(tmp_path):
    nodes, _ = kit.write(tmp_path, kit.fleet(days=9, spike=False))
    for path, expected, rows in ((nodes[0], "weekly", 168), (nodes[1], "same", 0)):
        said = kit.run("--config", str(kit.config(tmp_path, expected)), "rebaseline",
                       "--reason", "test", "--db", str(path), "--from",
                       f"@{kit.trendkit.START}", "--to", f"@{kit.trendkit.START + 9 * 86400}")
        assert "flat value until a week" not in said
        with sqlite3.connect(path) as conn:
            assert conn.execute("SELECT count(*) FROM weekly_histograms").fetchone() == (rows,)
    said = kit.run("--config", str(kit.config(tmp_path, "weekly")), "rebaseline", "--reason",
                   "a day", "--db", str(nodes[0]), "--from", f"@{kit.trendkit.START}", "--to",
                   f"@{kit.trendkit.START + 86400}")
    assert "the flat value until a week of data makes a weekly one" in said


def test_a_bad_value_is_named_with_its_file_and_line(tmp_path):
    path = tmp_path / "slowdown.toml"
    path.write_text(f'[[target]]\nname = "w"\npath = "{tmp_path}"\n\n'
                    '[baseline]\nexpected = "weakly"\n')
    with pytest.raises(ConfigError) as info:
        load_config(path, {"HOME": str(tmp_path)})
    [error] = [e for e in info.value.errors if "baseline" in str(e)]
    assert str(error).startswith(f"{path}:6: baseline.expected: ")
    assert "did you mean 'weekly'?" in str(error)
    out = kit.run("--config", str(path), "--db", str(tmp_path / "x.db"), code=2)
    assert f"{path}:6" in out


def test_smoothing_weighs_the_same_hour_of_neighbouring_days_over_neighbouring_hours():
    raw = [1.0] * 168
    for day in range(7):
        raw[day * 24 + 2] = raw[day * 24 + 3] = 3.0
    values = smooth(raw)
    assert values[2] == pytest.approx(3.0 ** 0.9) and values[3] == pytest.approx(3.0 ** 0.9)
    assert values[1] == pytest.approx(3.0 ** 0.1) and values[12] == pytest.approx(1.0)
    assert smooth([*raw[:167], 5.0])[0] > 1.0  # around the week: Sunday 23h next to Monday 0h


def test_a_host_without_its_hours_makes_the_cluster_flat_until_maintenance_adds_them(files,
                                                                                     tmp_path):
    """A baseline made while the setting was off has no hours of the week: the cluster reads
    the flat value and says why; the next maintenance with the setting on adds them from the
    baseline's period, and the cluster reads as before."""
    directory, nodes, _ = files
    copies = [tmp_path / p.name for p in nodes]
    for p, c in zip(nodes, copies):
        shutil.copy(p, c)
    with sqlite3.connect(copies[1]) as conn:
        conn.execute("DELETE FROM weekly_histograms")
    weekly = kit.config(directory, "weekly")
    before = kit.op_of(kit.slowdown_json(weekly, str(directory / "nodes" / "*.db"), AT_NIGHT),
                       600.0)
    op = kit.op_of(kit.slowdown_json(weekly, str(tmp_path / "*.db"), AT_NIGHT), 600.0)
    assert op["expected_basis"] == "flat" and op["slowdown"] > 2.5
    assert "made without weekly histograms of zone UTC" in op["expected_note"]
    assert kit.maintain(copies[1:], kit.BASELINE_AT + HOUR) == []  # no new baseline
    after = kit.op_of(kit.slowdown_json(weekly, str(tmp_path / "*.db"), AT_NIGHT), 600.0)
    assert after == before
