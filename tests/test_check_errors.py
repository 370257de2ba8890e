"""`slowdown check` sees errors: an op whose attempts fail turns it WARNING or CRITICAL, named
with its rate, in the text and the perfdata, with levels from the options, the error_rate alert
rules of the window, or the defaults (5 % and 25 %). An EIO storm on a real FUSE filesystem
used to leave check at OK with a slowdown of 1.0."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from slowdown.analysis.histogram import Histogram
from slowdown.analysis.store import Store
from slowdown.analysis.store.records import Record
from testdata.datakit import fill, lognormal, utc
from tests.kit.faultfs import FaultFS
from tests.kit.reliabilitykit import offset_env, offset_to
from tests.kit.servicekit import TargetSpec, prepared, records, start_live, stop_service, wait_for

NOV = utc(2026, 11, 1)
AT = "2026-11-01T02:00:00Z"  # the end of the two hours written


def failing(db: Path, op: str, per_minute: tuple[int, int], minutes: int = 10,
            start: int = NOV + 110 * 60, target: str = "work") -> None:
    """``minutes`` more records of ``op`` ending at AT: ``per_minute`` = (completed, failed)."""
    ok, failed = per_minute
    with Store(db) as store:
        batch = []
        for m in range(minutes):
            h = Histogram()
            h.record_many(np.full(ok, 0.001))
            batch.append(Record("n1", target, op, start + 60 * m, h, errors=failed))
        store.write(batch)


@pytest.fixture
def calm(tmp_path: Path) -> Path:
    """Two hours of every op at 1 ms on work, 60 a minute, no errors (a slowdown of ~1)."""
    db = tmp_path / "n1.db"
    fill(db, NOV, 120, lognormal(0.001, 0.2), ops=("data-read", "data-write", "md-stat"))
    return db


def check(db: Path, *args: str, config: Path | None = None) -> tuple[int, str]:
    env = {**os.environ, "SLOWDOWN_CONFIG": str(config or "/nonexistent/slowdown.toml")}
    if config is None:
        env.pop("SLOWDOWN_CONFIG")
    done = subprocess.run([sys.executable, "-m", "slowdown.analysis.cli", "check", "--db",
                           str(db), "--at", AT, *args], capture_output=True, text=True,
                          timeout=60, env={**env, "HOME": str(db.parent)})
    assert not done.stderr, done.stderr
    return done.returncode, done.stdout


def perfdata(out: str) -> dict[str, str]:
    return dict(re.findall(r"'([^']+)'=(\S+)", out.split(" | ", 1)[1]))


@pytest.mark.parametrize(("failed", "state", "code"), [
    (0, "OK", 0),  # no error: nothing said in the text, 0 % in the perfdata
    (3, "OK", 0),  # 3 of 63 = 4.8 %: at most the default warning level of 5 %
    (4, "WARNING", 1),  # 4 of 64 = 6.25 %
    (21, "CRITICAL", 2),  # 21 of 81 = 25.9 %
])
def test_default_levels(calm, failed, state, code):
    failing(calm, "data-read", (0, failed))  # failed attempts beside the 60 completed
    rc, out = check(calm)
    assert rc == code, out
    assert out.startswith(f"SLOWDOWN {state} - median over 10m: work 1.")
    rate = failed / (60 + failed)
    assert perfdata(out)["work errors"] == f"{rate * 100:.1f}%;5;25;0;100", out
    assert perfdata(out)["work"].endswith(";3;10;0"), out  # the slowdown is still there
    if failed:
        assert f"{rate * 100:.3g}% of data-read failed ({failed * 10} of {(60 + failed) * 10})" \
            in out, out
    else:
        assert "failed" not in out, out


def test_options_as_percent_or_fraction_and_the_worst_op_named(calm):
    failing(calm, "data-read", (0, 6))  # 9.1 %
    failing(calm, "md-stat", (0, 12))  # 16.7 %: the worst op
    rc, out = check(calm)
    assert rc == 1 and "16.7% of md-stat failed (120 of 720)" in out, out
    rc, out = check(calm, "--errors-warning", "20%", "--errors-critical", "0.5")
    assert rc == 0 and perfdata(out)["work errors"] == "16.7%;20;50;0;100", out
    rc, out = check(calm, "--errors-warning", "1%", "--errors-critical", "15%")
    assert rc == 2, out
    for bad in ("x", "120%", "-0.1"):
        rc, out = check(calm, "--errors-critical", bad)
        assert rc == 3 and out.startswith("SLOWDOWN UNKNOWN - Invalid value for "
                                          "--errors-critical"), out


def test_levels_from_the_error_rate_rules_of_the_window(calm, tmp_path):
    failing(calm, "data-read", (0, 10))  # 14.3 %
    config = tmp_path / "slowdown.toml"
    config.write_text(
        'database = "/nonexistent/slowdown.db"\n'
        '[[target]]\nname = "work"\npath = "/nonexistent/work"\n'
        '[[alert]]\nname = "errors-10m"\nkind = "error_rate"\nwindow = "10m"\nabove = 0.2\n'
        'critical = 0.5\naction = { type = "command", argv = ["/bin/true"] }\n'
        '[[alert]]\nname = "errors-1h"\nkind = "error_rate"\nwindow = "1h"\nabove = 0.01\n'
        'action = { type = "command", argv = ["/bin/true"] }\n')
    rc, out = check(calm, config=config)
    assert rc == 0 and perfdata(out)["work errors"] == "14.3%;20;50;0;100", out
    rc, out = check(calm, "--window", "1h", config=config)  # 100 of 3700 over the hour
    assert rc == 1 and perfdata(out)["work errors"] == "2.7%;1;25;0;100", out
    rc, out = check(calm, "--errors-warning", "10%", config=config)  # the option wins
    assert rc == 1, out


def test_a_target_whose_every_attempt_fails_is_critical_not_unknown(tmp_path):
    db = tmp_path / "n1.db"
    fill(db, NOV, 110, lognormal(0.001, 0.2), ops=("data-read",))
    failing(db, "data-read", (0, 60))  # the last 10 minutes: nothing completes
    rc, out = check(db)
    assert rc == 2, out
    assert out.startswith("SLOWDOWN CRITICAL - median over 10m: work 100% of data-read failed "
                          "(600 of 600) | 'work errors'=100.0%;5;25;0;100"), out


@pytest.mark.root
@pytest.mark.timeout(90)
def test_an_eio_storm_on_fuse_turns_check_critical(tmp_path):
    """The real service on a FUSE mount whose data file answers reads with EIO: the data-read
    probe fails every second while every other op is as fast as ever."""
    with FaultFS(tmp_path / "backing", tmp_path / "mnt") as fs:
        config, database = prepared(tmp_path, [TargetSpec("fuse", fs.mountpoint)])
        offset = offset_to(48)  # the first minute ends 12 s after the start
        proc = start_live(config, database, env=offset_env(offset))
        try:
            time.sleep(1.0)  # a few reads that work
            fs.fail(["read"], "EIO", path="*data.bin")
            wait_for(lambda: database.exists() and any(
                r.op == "data-read" and r.errors for r in records(database)), 30,
                what="a minute with failed reads")
            # Asked while the service runs (the next minute is written 60 s on): a stopped
            # service's numbers are UNKNOWN to check.
            reads = [r for r in records(database) if r.op == "data-read"]
            done = subprocess.run([sys.executable, "-m", "slowdown.analysis.cli", "check",
                                   "--db", str(database)], capture_output=True, text=True,
                                  timeout=60, env={**os.environ, **offset_env(offset)})
        finally:
            stop_service(proc)
            fs.clear()
    failed = sum(r.errors for r in reads)
    rate = failed / (failed + sum(r.histogram.count for r in reads))
    assert rate > 0.5, reads
    out = done.stdout
    assert done.returncode == 2, out + done.stderr
    assert out.startswith("SLOWDOWN CRITICAL - median over 10m: fuse "), out
    assert f"{rate * 100:.3g}% of data-read failed" in out, out
    assert perfdata(out)["fuse errors"] == f"{rate * 100:.1f}%;5;25;0;100", out
    slowdown = float(perfdata(out)["fuse"].split(";")[0])
    assert slowdown < 3, out  # the latencies alone would say OK, as check did before
