"""One rule for time, across a DST change (Europe/Berlin, 2026-03-29 02:00 CET -> 03:00
CEST): `--at` read as `date -d` reads it, every clock shown with its zone, and baseline
months of one stated zone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from zoneinfo import ZoneInfo

import numpy as np
import pytest

from slowdown.analysis.config import loads
from slowdown.analysis.histogram import Histogram
from slowdown.analysis.stats.baseline import load, month_start
from slowdown.analysis.store import Store
from slowdown.analysis.store.records import Record
from slowdown.probe.daemon.service import Service
from testdata.datakit import fill, lognormal, utc

BERLIN = {**os.environ, "TZ": "Europe/Berlin"}
SPRING = utc(2026, 3, 29, 1)  # 02:00 CET, the clocks go to 03:00 CEST


def slowdown(*args: str, env=BERLIN) -> subprocess.CompletedProcess:
    return subprocess.run(["slowdown", *args], env=env, capture_output=True, text=True,
                          timeout=60)


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    path = tmp_path_factory.mktemp("tz") / "n1.db"
    fill(path, SPRING - 3 * 3600, 6 * 60, lognormal(0.002, 0.3), ops=("md-stat",))
    return path


def test_a_naive_at_is_local_time_across_the_dst_change(db):
    """01:59 CET and 03:00 CEST are a minute apart; both clocks are shown with their zone."""
    times, lines = [], []
    for at in ("2026-03-29 01:59", "2026-03-29T03:00"):
        doc = json.loads(slowdown("--db", str(db), "--at", at, "--json").stdout)
        times.append(doc["time"])
        lines.append(slowdown("--db", str(db), "--at", at).stdout)
    assert times == [SPRING - 60, SPRING]
    assert lines[0].startswith("01:59:00 CET ") and lines[1].startswith("03:00:00 CEST ")
    # The same moments given with a zone, as @epoch or with UTC in the environment.
    for at, env in (("2026-03-29T00:59:00Z", BERLIN), (f"@{SPRING - 60}", BERLIN),
                    ("2026-03-29 00:59", {**os.environ, "TZ": "UTC"})):
        doc = json.loads(slowdown("--db", str(db), "--at", at, "--json", env=env).stdout)
        assert doc["time"] == SPRING - 60, at
    before = time.time()
    doc = json.loads(slowdown("--db", str(db), "--at", "-2h", "--json").stdout)
    assert before - 7200 <= doc["time"] <= time.time() - 7200  # a duration ago, as -2h


def test_a_local_time_the_change_skips_is_refused(db):
    result = slowdown("--db", str(db), "--at", "2026-03-29 02:30")
    assert result.returncode == 2
    assert "--at" in result.stderr and "does not exist in the local time zone (CET/CEST)" \
        in result.stderr


def test_stats_and_history_show_times_with_their_zone(db):
    out = slowdown("stats", "--db", str(db), "--since", "2026-03-29 01:00", "--until",
                   "2026-03-29 04:00").stdout
    assert "2026-03-29 01:00:00 CET .. 2026-03-29 04:00:00 CEST" in out
    rows = slowdown("history", "--db", str(db), "--since", "2026-03-29 01:58", "--until",
                    "2026-03-29 03:01").stdout.splitlines()[1:]
    assert [r.split(",")[0] for r in rows] == ["2026-03-29T00:58:00Z", "2026-03-29T00:59:00Z",
                                               "2026-03-29T01:00:00Z"]


def test_baseline_months_are_months_of_the_stated_zone(tmp_path):
    """At 00:30 CEST on 1 April (22:30 UTC on 31 March) a Berlin month has ended, a UTC one
    has not: the monthly baseline is in force from Berlin's midnight."""
    berlin_april = utc(2026, 3, 31, 22)
    assert month_start(berlin_april + 1800, ZoneInfo("Europe/Berlin")) == berlin_april
    assert month_start(berlin_april + 1800, ZoneInfo("UTC")) == utc(2026, 3, 1)
    local = subprocess.run(
        [sys.executable, "-c", "from slowdown.analysis.stats.baseline import month_start; "
         f"print(month_start({berlin_april + 1800}))"], env=BERLIN, capture_output=True,
        text=True, check=True)
    assert int(local.stdout) == berlin_april  # "local": the zone of the process
    made = {}
    for zone in ("Europe/Berlin", "UTC"):
        db = tmp_path / f"{zone.replace('/', '-')}.db"
        rng = np.random.default_rng(0)
        with Store(db) as store:
            records = []
            for t in range(utc(2026, 3, 1), berlin_april + 1800, 600):
                h = Histogram()
                h.record_many(rng.lognormal(-6, 0.3, 10))
                records.append(Record("n1", "work", "md-stat", t, h))
            store.write(records)
        text = (f'database = "{db}"\nhost = "n1"\n[baseline]\nzone = "{zone}"\n'
                f'[[target]]\nname = "work"\npath = "{tmp_path}"\ndata_size = "16MiB"\n')
        Service(loads(text, tmp_path / "slowdown.toml"))._hourly(berlin_april + 1800)
        with Store(db, readonly=True) as store:
            made[zone] = {(b.reason, b.valid_from) for b in load(store)}
    assert made["Europe/Berlin"] == {("monthly", berlin_april)}
    assert made["UTC"] == {("initial", berlin_april + 1800)}  # March is not over in UTC
