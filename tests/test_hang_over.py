"""A hang that has ended stops counting as a hang: a stuck age raises a window while the op is
still stuck (its age at the end of the window's latest record), and once the op has returned and
its latency is recorded, the op counts by that latency like any other sample. Before, a 3-minute
hang kept the 10-minute window at "2m59s stuck" over 224 samples of ~1.4 ms and check CRITICAL
for as long as the window overlapped it (SPEC section 4, docs/WINDOWS.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from slowdown.analysis.alerts import evaluate
from slowdown.analysis.config import load_config
from slowdown.analysis.store import Store
from slowdown.probe.runtime.recorder import Recorder
from testdata.datakit import utc
from tests.kit.faultfs import FaultFS
from tests.kit.reliabilitykit import offset_env, offset_to
from tests.kit.servicekit import TargetSpec, prepared, records, start_live, stop_service, wait_for

NOV = utc(2026, 11, 1)
CALM = 60  # minutes of 1.4 ms reads before the hang (the provisional baseline)
HANG_AT = NOV + CALM * 60 + 10  # a data-read that starts at 01:00:10 ...
HANG = 180  # ... and returns 3 minutes later, at 01:03:10
END = HANG_AT + HANG + 20 * 60


def simulate(db: Path) -> None:
    """The recorder as the service drives it, second by second: a result per tick, the age of
    the op in flight at every tick (skipped ticks beside it) and at every minute's end, and the
    finished minutes flushed at each minute boundary into a real store."""
    clock = [float(NOV)]
    recorder = Recorder("n1", wall_clock=lambda: clock[0], monotonic=lambda: clock[0] - NOV)
    rng = np.random.default_rng(6)
    since: float | None = None
    with Store(db) as store:
        for second in range(NOV, END + 1):
            clock[0] = second + 0.001
            if second % 60 == 0:  # the flush: what is in flight at the minute's end, then write
                if since is not None:
                    recorder.stuck("work", "data-read", second - 0.001 - since, second - 0.001,
                                   at_end=True)
                assert recorder.flush(store, clock[0])
            if second == HANG_AT:
                since = second
            elif since is not None and second < HANG_AT + HANG:
                recorder.stuck("work", "data-read", second - since, second)
                recorder.skipped("work", ["data-read"], second)
            elif since is not None:
                recorder.result("work", "data-read", second - since, second)
                since = None
            else:
                recorder.result("work", "data-read", float(rng.lognormal(np.log(0.0014), 0.1)),
                                second)


@pytest.fixture(scope="module")
def hung(tmp_path_factory) -> Path:
    db = tmp_path_factory.mktemp("hang") / "n1.db"
    simulate(db)
    return db


def slowdown(db: Path, *args: str, at: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "slowdown.analysis.cli", "--db", str(db),
                           "--at", f"@{at:.0f}", *args], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "HOME": str(db.parent)})


def windows(db: Path, at: float) -> dict[int, dict]:
    done = slowdown(db, "--json", "--stat", "median", at=at)
    assert done.returncode == 0, done.stderr
    (target,) = json.loads(done.stdout)["targets"]
    return {int(w["window"]): w["ops"][0] for w in target["windows"]}


def test_the_records_say_which_hang_is_not_over(hung):
    with Store(hung, readonly=True) as store:
        reads = {r.start: r for r in store.records()}
    minute = HANG_AT - 10  # 01:00
    assert [(reads[minute + 60 * k].stuck, reads[minute + 60 * k].stuck_end) for k in range(4)] \
        == [pytest.approx((50, 50), abs=0.01), pytest.approx((110, 110), abs=0.01),
            pytest.approx((170, 170), abs=0.01), (179, 0)]
    assert reads[minute + 180].histogram.max == pytest.approx(180, rel=0.011)  # its latency


def test_while_stuck_every_window_is_raised_to_the_age(hung):
    during = windows(hung, HANG_AT + 170)  # 01:03:00: the op has been in flight 170 s
    for span in (60, 600, 3600):
        assert during[span]["raised_to_stuck"], during[span]
        assert during[span]["observed"] == pytest.approx(170, abs=0.01)
    done = slowdown(hung, "check", at=HANG_AT + 170)
    assert done.returncode == 2 and done.stdout.startswith("SLOWDOWN CRITICAL"), done.stdout


def test_once_the_op_is_recorded_it_counts_by_its_latency(hung):
    """01:04:00, the minute the op returned in is written: no window is raised any more; the
    180 s are one sample among the others (the max of the window, not its median)."""
    after = windows(hung, HANG_AT + 230)
    for span in (60, 600, 3600):
        op = after[span]
        assert not op["raised_to_stuck"] and op["stuck"] == 0, op
        assert op["observed"] == pytest.approx(0.0014, rel=0.1), op
        assert op["slowdown"] == pytest.approx(1.0, abs=0.1), op
    done = slowdown(hung, "check", "--window", "10m", at=HANG_AT + 230)
    assert done.returncode == 0 and done.stdout.startswith("SLOWDOWN OK"), done.stdout
    done = slowdown(hung, "-v", at=HANG_AT + 230)
    assert done.returncode == 0 and " stuck" not in done.stdout, done.stdout
    assert "(stuck)" not in done.stdout
    done = slowdown(hung, "stats", "--since", "10m", "--json", at=HANG_AT + 230)
    (row,) = json.loads(done.stdout)["ops"]
    assert row["max"] == pytest.approx(180, rel=0.011) and row["stuck"] == 179  # history kept


def test_history_raises_the_minutes_of_the_hang_and_not_the_one_it_ended_in(hung):
    done = slowdown(hung, "history", "--since", f"@{HANG_AT - 70}", "--until",
                    f"@{HANG_AT + 290}", "--every", "1m", "--stat", "median",
                    "--format", "json", at=HANG_AT + 290)
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)["rows"]
    medians = [r["median"] for r in rows]
    assert medians[1:4] == pytest.approx([50, 110, 170], abs=0.01), rows  # stuck at their ends
    assert medians[4] == pytest.approx(0.0014, rel=0.1), rows  # 01:03: returned, recorded
    assert [r["stuck"] for r in rows][1:5] == pytest.approx([50, 110, 170, 179], abs=0.01)


def test_the_alerts_resolve_when_the_hang_is_over(hung, tmp_path):
    config = tmp_path / "slowdown.toml"
    config.write_text(
        f'database = "{hung}"\n[[target]]\nname = "work"\npath = "/nonexistent/work"\n'
        '[[alert]]\nname = "slow"\nop = "data-read"\nstatistic = "median"\nwindow = "10m"\n'
        'above = 10.0\nclear_for = "1m"\naction = { type = "command", argv = ["/bin/true"] }\n'
        '[[alert]]\nname = "hung"\nkind = "stuck"\nwindow = "10m"\nabove = "1m"\n'
        'clear_for = "1m"\naction = { type = "command", argv = ["/bin/true"] }\n')
    cfg = load_config(config)
    copy = tmp_path / "n1.db"
    copy.write_bytes(hung.read_bytes())
    events = []
    with Store(copy) as store:
        for minute in range(HANG_AT - 10, HANG_AT + 6 * 60, 60):
            observations, transitions = evaluate(cfg, store, minute + 1)
            values = {o.rule: o.value for o in observations}
            events += [(minute - HANG_AT + 10, t.rule, t.event) for t in transitions]
            if minute == HANG_AT + 170:  # 01:03: in flight for 170 s
                assert values["hung"] == pytest.approx(170, abs=0.01)
            if minute >= HANG_AT + 230:  # 01:04 on: the op was recorded
                assert values["hung"] == 0 and values["slow"] < 1.5, values
    assert ("hung", "firing") in {(r, e) for _, r, e in events}
    fired = {r: m for m, r, e in events if e == "firing"}
    resolved = {r: m for m, r, e in events if e == "resolved"}
    assert set(fired) == set(resolved) == {"slow", "hung"}, events
    assert all(resolved[r] <= 5 * 60 for r in resolved), events  # not 10 minutes later


@pytest.mark.root
@pytest.mark.timeout(90)
def test_the_service_writes_whether_the_op_was_still_in_flight(tmp_path):
    """The real service on FUSE: a hang that ends before the minute does leaves its stuck age
    in the minute's record but not at its end, and the window ending there is not raised; a
    hang that is still on when the service stops is written as still in flight, and counts
    by its age then."""
    with FaultFS(tmp_path / "backing", tmp_path / "mnt") as fs:
        config, database = prepared(tmp_path, [TargetSpec("fuse", fs.mountpoint)])
        offset = offset_to(49)
        proc = start_live(config, database, env=offset_env(offset))
        try:
            hang = fs.hang(["read"], path="*data.bin")
            fs.wait_hung(timeout=5)
            time.sleep(3.0)
            fs.release(hang)  # returns within the first minute: over
            minute = (time.time() + offset) // 60 * 60
            wait_for(lambda: time.time() + offset > minute + 61.5, 15, what="the next minute")
            fs.hang(["read"], path="*data.bin")
            fs.wait_hung(timeout=5)
            time.sleep(2.5)  # still in flight when the service stops
        finally:
            _, out = stop_service(proc)
            fs.clear()
    reads = {r.start: r for r in records(database) if r.op == "data-read"}
    first, second = reads[minute], reads[minute + 60]
    assert first.stuck >= 2.0 and first.stuck_end == 0, (first, out)
    assert first.histogram.max >= 3.0, first  # the hang's op, by its latency
    assert second.stuck_end >= 2.0, (second, out)
    env = {**os.environ, **offset_env(offset)}

    def at(moment: float) -> dict:
        done = subprocess.run([sys.executable, "-m", "slowdown.analysis.cli", "--db",
                               str(database), "--json", "--at", f"@{moment:.0f}"],
                              capture_output=True, text=True, timeout=60, env=env)
        assert done.returncode == 0, done.stderr
        (target,) = json.loads(done.stdout)["targets"]
        return {o["op"]: o for o in target["windows"][0]["ops"]}

    assert not at(minute + 60)["data-read"]["raised_to_stuck"]  # the first hang is over
    # The service stopped with the op in flight: its record ends with it stuck, and the op
    # counts by its age at the stop (a wait at least that long), so the window reads slow
    # by its samples as well as by the stuck age.
    still = at(minute + 120)["data-read"]
    assert still["stuck"] >= 2.0 and still["observed"] >= 2.0, still


def test_every_read_path_takes_the_stuck_age_of_each_hosts_latest_record(tmp_path):
    """Three hosts: n0's hang is over (records follow it), n1's op is stuck at the end of the
    last minute, n2 stopped with an op in flight half an hour ago. One file at a time, the
    cluster's nested windows and history's cells agree on the stuck age at each end."""
    from slowdown.analysis.stats import series
    from slowdown.analysis.store import Selection, aggregate
    from slowdown.analysis.store.cluster_windows import nested_windows
    from testdata.datakit import fill, lognormal

    end = NOV + 120 * 60
    fill(tmp_path / "n0.db", NOV, 120, lognormal(0.001), host="n0", ops=("md-stat",),
         stuck={end - 120: 70.0})
    fill(tmp_path / "n1.db", NOV, 120, lognormal(0.001), host="n1", ops=("md-stat",),
         stuck={end - 60: 40.0}, seed=1)
    fill(tmp_path / "n2.db", NOV, 90, lognormal(0.001), host="n2", ops=("md-stat",),
         stuck={NOV + 89 * 60: 50.0}, seed=2)
    stores = [Store(p, readonly=True) for p in sorted(tmp_path.glob("n*.db"))]
    try:
        wanted = {60: 40.0, 600: 40.0, 3600: 50.0}
        nested = nested_windows(stores, Selection(), end, list(wanted))
        for span, age in wanted.items():
            alone = aggregate(stores, Selection(ops=("md-stat",), start=end - span, end=end))
            assert (alone.stuck_end, nested[("work", "md-stat", span)].stuck_end) == (age, age)
            assert alone.stuck == max(age, 70.0 if span >= 120 else 0.0)  # during: kept
        cells = series.history(stores, Selection(start=end - 3600, end=end), 600, ["median"])
        assert cells.stuck_end.tolist() == [0, 0, 50.0, 0, 0, 40.0]
        assert cells.stuck.tolist() == [0, 0, 50.0, 0, 0, 70.0]
    finally:
        for store in stores:
            store.close()


def test_migration_7_marks_a_stuck_age_no_completed_op_matches_as_in_flight(tmp_path):
    """Records of schema 6: a minute whose stuck age its own latencies do not reach was still
    stuck at its end; one holding the hung op's latency (or longer) is over."""
    import sqlite3

    from slowdown.analysis.histogram import Histogram
    from slowdown.analysis.store import schema
    from slowdown.analysis.store.records import Record

    def record(start: int, values: list[float], stuck: float) -> Record:
        h = Histogram()
        h.record_many(np.asarray(values, dtype=np.float64))
        return Record("n1", "work", "data-read", start, h, stuck=stuck)

    db = tmp_path / "n1.db"
    with Store(db) as store:
        store.write([record(NOV, [0.001] * 5, 0.0), record(NOV + 60, [0.001] * 5, 30.0),
                     record(NOV + 120, [0.001, 45.0], 44.0), record(NOV + 180, [], 12.0)])
    with sqlite3.connect(db) as conn:
        for table in ("minutes", "hours"):
            conn.execute(f"ALTER TABLE {table} DROP COLUMN stuck_end")
        conn.execute("DROP TABLE tens")  # and schema 8's table
        conn.executescript("DROP TABLE server_tens; DROP TABLE server_series; "
                           "DROP TABLE weekly_histograms")  # and 9's and 10's
        conn.execute("PRAGMA user_version = 6")
    with Store(db, readonly=True) as old:  # read as it is: every stuck age as at the end
        assert [r.stuck_end for r in old.records()] == [0.0, 30.0, 44.0, 12.0]
    with Store(db) as store:
        assert schema.version_of(store.conn) == schema.VERSION
        assert [(r.stuck, r.stuck_end) for r in store.records()] == \
            [(0.0, 0.0), (30.0, 30.0), (44.0, 0.0), (12.0, 12.0)]
