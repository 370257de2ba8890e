"""The service migrating a schema-4 database under a private $NOTIFY_SOCKET: what systemd would
receive, checked as systemd would act on it (tests/test_migration.py for a week of records,
tests/long/test_migration_long.py for 90 days)."""

from __future__ import annotations

import hashlib
import marshal
import re
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path

from slowdown.analysis.store import schema
from testdata.migrationdata import build
from tests.kit.servicekit import (
    NotifySocket,
    TargetSpec,
    output,
    probe_cli,
    start_service,
    write_config,
)

UNIT = Path(__file__).resolve().parents[2] / "systemd" / "slowdown-probe.service"


def start_timeout() -> float:
    """The unit's TimeoutStartSec, seconds."""
    found = re.search(r"^TimeoutStartSec=(\d+)s$", UNIT.read_text(), re.M)
    assert found, f"no TimeoutStartSec=<n>s in {UNIT}"
    return float(found.group(1))


def records_digest(database: Path) -> tuple[int, str]:
    """Minute records and a hash of their stored columns (all but the derived ones)."""
    h = hashlib.blake2b()
    conn = sqlite3.connect(f"file:{database}?mode=ro", uri=True)
    try:
        cursor = conn.execute(
            "SELECT s.host, s.target, s.op, r.start, r.count, r.errors, r.skipped, r.sum, "
            "r.sumsq, r.min, r.max, r.stuck, r.hist FROM minutes r JOIN series s "
            "ON s.id = r.series WHERE s.host = 'node01' ORDER BY r.series, r.start")
        n = 0
        while True:
            rows = cursor.fetchmany(100_000)
            if not rows:
                break
            n += len(rows)
            h.update(marshal.dumps(rows, 2))  # version 2: no references, floats by their bits
    finally:
        conn.close()
    return n, h.hexdigest()


@dataclass
class Run:
    """What a migrating start-up sent, and when (monotonic seconds)."""

    spawned: float
    extends: list[tuple[float, float, str]] = field(default_factory=list)  # at, seconds, STATUS
    ready: float | None = None
    exited: float = 0.0
    log: str = ""
    build_seconds: float = 0.0


def migrate_under_notify(tmp_path: Path, days: int) -> Run:
    """Build ``days`` of schema-4 records, start the service on them with a private notify
    socket, and check the protocol and the result; returns what was seen."""
    database = tmp_path / "db" / "slowdown.db"
    database.parent.mkdir()
    target = TargetSpec("probe", tmp_path / "probe", data_size="4MiB", pool_files=20,
                        pool_dirs=2)
    target.path.mkdir()
    # Up to today's midnight, and kept as minutes: the service's hourly rollup moves nothing.
    config = write_config(tmp_path / "slowdown.toml", database, [target],
                          retention=f"{days + 2}d")
    done = probe_cli(config, "prepare", "--no-progress")
    assert done.returncode == 0, done.stderr
    assert not database.exists()
    t = time.monotonic()
    records = build(database, days, t0=(int(time.time()) // 86400 - days) * 86400)
    build_seconds = time.monotonic() - t
    before = records_digest(database)
    assert before[0] == records == days * 1440 * 12
    notify = NotifySocket()
    try:
        run = Run(spawned=time.monotonic(), build_seconds=build_seconds)
        proc = start_service(config, "--duration", "2s",
                             env={"NOTIFY_SOCKET": str(notify.path), "WATCHDOG_PID": "",
                                  "WATCHDOG_USEC": ""})
        try:
            proc.wait(timeout=days * 2 + 60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        run.exited = time.monotonic()
        time.sleep(0.2)  # the last datagrams
    finally:
        notify.close()
    run.log = output(proc)
    assert proc.returncode == 0, run.log
    for at, lines in notify.messages:
        fields = dict(line.split("=", 1) for line in lines if "=" in line)
        if "EXTEND_TIMEOUT_USEC" in fields:
            run.extends.append((at, int(fields["EXTEND_TIMEOUT_USEC"]) / 1e6,
                                fields.get("STATUS", "")))
        if fields.get("READY") == "1" and run.ready is None:
            run.ready = at
    check_protocol(run, records)
    with sqlite3.connect(database) as conn:
        assert schema.version_of(conn) == schema.VERSION
        assert conn.execute("SELECT count(*) FROM minutes WHERE buckets IS NULL").fetchone() \
            == (0,)
    assert records_digest(database) == before, "records changed or lost by the migration"
    return run


def check_protocol(run: Run, records: int) -> None:
    """EXTEND_TIMEOUT_USEC from the migration's start to READY=1, never a gap longer than the
    extension last granted; READY=1 after the migration; systemd's start timer (its
    TimeoutStartSec, lengthened by each extension) never runs out."""
    assert run.ready is not None, f"no READY=1\n{run.log}"
    assert len(run.extends) >= 2, run.extends  # the first report and the commit at least
    times = [at for at, _, _ in run.extends]
    assert times == sorted(times) and times[-1] < run.ready, "an extension after READY=1"
    statuses = [status for _, _, status in run.extends]
    assert all(s.startswith("migrating the database: ") for s in statuses), statuses
    # The migrations that rewrite the records: 5 (derived columns) and 8 (the tens), each
    # from 0 % to its commit.
    for version in (5, 8):
        step = f"schema {version - 1} to {version}"
        mine = [s for s in statuses if s.endswith((step, step + ")"))]
        assert mine[0].startswith("migrating the database: 0 % (0 of "), statuses
        assert mine[-1] == f"migrating the database: committing, {records:,} records, {step}"
        percents = [int(s.split(": ")[1].split(" %")[0]) for s in mine[:-1]]
        assert percents == sorted(percents), percents
    assert statuses[-1].endswith("schema 7 to 8"), statuses
    # Each extension holds until the next message: the next extension, or READY=1.
    limit = start_timeout()
    assert times[0] - run.spawned < min(limit, run.extends[0][1]), "first extension too late"
    for (at, granted, _), nxt in zip(run.extends, [*times[1:], run.ready]):
        assert nxt - at <= granted, f"{nxt - at:.1f} s after an extension of {granted:.0f} s"
    deadline = run.spawned + limit  # systemd's: TimeoutStartSec, then each extension's end
    for at, granted, _ in run.extends:
        assert at <= deadline
        deadline = max(deadline, at + granted)
    assert run.ready <= deadline


def gaps(run: Run) -> list[float]:
    """Seconds between the start, each extension and READY=1."""
    times = [run.spawned, *(at for at, _, _ in run.extends), run.ready]
    return [b - a for a, b in zip(times, times[1:])]
