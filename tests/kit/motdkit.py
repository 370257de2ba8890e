"""A node's database for the login notice: two hours of minute records of one target's six
ops (the first hour the baseline, the last ten minutes ``slow`` times slower), the live state
of a running service beside it, and a configuration naming both with [motd] on."""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path

from slowdown.analysis.histogram import Histogram
from slowdown.analysis.stats import baseline
from slowdown.analysis.store import Store
from slowdown.analysis.store.live import LiveFile, live_path
from slowdown.analysis.store.records import Record, minute_of

OPS = ("data-read", "data-write", "md-stat", "md-read", "md-delete", "md-write")
MINUTES = 120


def node_database(path: Path, slow: float, host: str = "h1", target: str = "work") -> Path:
    """The database at ``path``, with a fresh live state of a service probing ``target``."""
    start = minute_of(time.time()) - MINUTES * 60
    rng = random.Random(7)
    records = []
    for m in range(MINUTES + 1):  # to the minute under way: a minute's edge met while
        # it runs leaves the shortest window its records
        factor = slow if m > MINUTES - 10 else 1.0
        for op in OPS:
            h = Histogram()
            for _ in range(60):
                h.record(rng.lognormvariate(-6.2, 0.2) * factor)
            records.append(Record(host, target, op, start + 60 * m, h))
    with Store(path) as store:
        store.write(records)
        baseline.rebaseline(store, start + 3600, "first hour", start, start + 3600)
    write_live(path, host, target)
    return path


def write_live(database: Path, host: str = "h1", target: str = "work") -> None:
    """The live state a running service writes once a second (``store/live.py``'s format)."""
    now = time.time()
    LiveFile(live_path(database)).write({
        "host": host, "pid": os.getpid(), "started": now - MINUTES * 60, "updated": now,
        "interval": 1.0, "database": str(database), "pending_minutes": 0,
        "records": {"ok": True, "path": str(database), "since": None, "reason": None,
                    "moved": 0, "episodes": []},
        "targets": {target: {"mode": "probe", "last_tick": now, "ticks": 7200, "skipped": 0,
                             "errors": 0, "abandoned_workers": 0, "in_flight": [],
                             "last": {}, "space": None}},
    })


def motd_config(path: Path, database: Path, target_path: Path, enabled: bool = True,
                deadline: str = "3s", extra: str = "") -> Path:
    """A configuration of host h1 with target ``work`` at ``target_path``; its deadline is
    long enough for a first start that compiles every module (tests may run without
    bytecode files), those of the deadline's tests short."""
    path.write_text(
        f'host = "h1"\ndatabase = {json.dumps(str(database))}\n'
        f'[motd]\nenabled = {"true" if enabled else "false"}\ndeadline = "{deadline}"\n'
        f'[[target]]\nname = "work"\npath = {json.dumps(str(target_path))}\n{extra}')
    return path
