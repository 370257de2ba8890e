"""The read benchmarks' database: days of minute records of one host, 2 targets x 6 ops, written
through ``Store.write`` a day at a time and cached in a directory with what it was built from,
and the configuration the timed commands read it with (bench_read.py, bench_fleet.py)."""

from __future__ import annotations

import datetime
import os
import time
from pathlib import Path

import numpy as np

from bench.kept_database import keep_info, kept_info
from slowdown.analysis.histogram import Histogram
from slowdown.analysis.stats import baseline
from slowdown.analysis.store import Store, schema
from slowdown.analysis.store.records import MINUTE, Record

T0 = 1_767_225_600  # 2026-01-01T00:00:00Z, start of the data


DAY = 86400


HOST = "node01"


TARGETS = ("scratch", "work")


OPS = ("data-read", "data-write", "md-stat", "md-read", "md-delete", "md-write")


MD_MEDIAN, DATA_MEDIAN, SIGMA = 200e-6, 3e-3, 0.5  # lognormal latencies, seconds


PER_MINUTE = 60  # samples per op and minute


STATISTICS = ("median", "q95")  # the configuration's, as in the specification's example


SEED = 20260101


def utc_now() -> str:
    return f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC"


# The numbers of a 1-minute history, printed by SQLite itself.
SQLITE_ANCHOR = ("SELECT datetime(start, 'unixepoch'), series, count, errors, skipped, stuck,"
                 " p50, p90, p95, p99 FROM minutes")


def params(days: int, t0: int = T0, host: str = HOST, seed: int = SEED) -> dict:
    """Everything the database depends on: a cached file is reused only when all match."""
    return {"days": days, "t0": t0, "host": host, "targets": list(TARGETS), "ops": list(OPS),
            "md_median": MD_MEDIAN, "data_median": DATA_MEDIAN, "sigma": SIGMA,
            "per_minute": PER_MINUTE, "statistics": list(STATISTICS), "seed": seed,
            "schema": schema.VERSION, "maintain": "daily"}


def _remove_db(path: Path) -> None:
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(str(path) + suffix).unlink(missing_ok=True)


def build(db: Path, days: int, t0: int = T0, host: str = HOST, seed: int = SEED) -> dict:
    """Write ``days`` of minute records from ``t0`` through the store, then the baselines;
    returns the timings and sizes (also kept beside the file, in ``DB.json``)."""
    building = db.with_name(db.name + ".building")
    _remove_db(building)
    rng = np.random.default_rng(seed)
    medians = np.array([MD_MEDIAN if op.startswith("md-") else DATA_MEDIAN for op in OPS])
    mu = np.log(medians)[None, None, :, None]
    end = t0 + days * DAY
    began = time.perf_counter()
    made = []
    maintaining = 0.0
    with Store(building) as store:
        for day in range(days):
            samples = rng.lognormal(mu, SIGMA, (1440, len(TARGETS), len(OPS), PER_MINUTE))
            batch = []
            for m in range(1440):
                start = t0 + day * DAY + m * MINUTE
                for ti, target in enumerate(TARGETS):
                    for oi, op in enumerate(OPS):
                        h = Histogram()
                        h.record_many(samples[m, ti, oi])
                        batch.append(Record(host, target, op, start, h))
            store.write(batch)
            # As the service does (hourly): the initial baseline once a day of data exists.
            t = time.perf_counter()
            made += baseline.maintain(store, t0 + (day + 1) * DAY, 86400.0, STATISTICS)
            maintaining += time.perf_counter() - t
        written = time.perf_counter() - maintaining
        store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        records = store.conn.execute("SELECT count(*) FROM minutes").fetchone()[0]
    _remove_db(db)
    os.replace(building, db)
    info = {
        "params": params(days, t0, host, seed),
        "end": end,
        "records": records,
        "baselines": len(made),
        "write_seconds": written - began,
        "maintain_seconds": maintaining,
        "bytes": db.stat().st_size,
        "built": utc_now(),
    }
    keep_info(db, info)
    return info


def database(directory: Path, days: int, rebuild: bool) -> tuple[Path, dict, bool]:
    """The cached database for ``days`` (built when absent or stale): path, info, built now?"""
    directory.mkdir(parents=True, exist_ok=True)
    db = directory / f"read-{days}d-{len(TARGETS)}x{len(OPS)}.db"
    info = kept_info(db, rebuild)
    if info:
        wanted = params(days)
        same_data = {k: v for k, v in info.get("params", {}).items() if k != "schema"} == \
            {k: v for k, v in wanted.items() if k != "schema"}
        if same_data and info.get("bytes") == db.stat().st_size:
            if info["params"]["schema"] != wanted["schema"]:
                # A newer schema: migrate forward as the service would, keeping the data.
                with Store(db):
                    pass
                info["params"]["schema"] = wanted["schema"]
                info["bytes"] = db.stat().st_size
                info["migrated"] = utc_now()
                keep_info(db, info)
            return db, info, False
    return db, build(db, days), True


CONFIG = """\
# The benchmark's configuration: the specification's example, its targets named as in the data.
database = "{db}"
windows = ["1m", "10m", "1h"]
statistics = [{statistics}]
{targets}
"""


TARGET = """
[[target]]
name = "{name}"
path = "{directory}/workspace/{name}"
data_size = "1GiB"
"""


def write_config(directory: Path, db: Path) -> Path:
    path = directory / "slowdown.toml"
    path.write_text(CONFIG.format(
        db=db, statistics=", ".join(f'"{s}"' for s in STATISTICS),
        targets="".join(TARGET.format(name=t, directory=directory) for t in TARGETS)))
    return path
