"""Each op's server, from the worker's line to the database's ``server_tens``.

The worker names the server of every op that returned (``unknown`` on a filesystem without a
resolver), after the op and outside its latency and its shown wait; the recorder keeps the
per-server histograms beside the minutes, writes them in the same transaction as the minutes
they came from, and keeps them like the minutes while the database cannot be written. Skipped
ticks and stuck ops are not per server.
"""

from __future__ import annotations

import io
import json
import os
import sqlite3
import time
from pathlib import Path

from slowdown.analysis.histogram import codec
from slowdown.analysis.store import Store
from slowdown.analysis.store.server_records import UNKNOWN
from slowdown.analysis.words import OPS
from slowdown.probe.probes.worker import Answers, Probes
from slowdown.probe.runtime.recorder import Recorder
from slowdown.probe.servers import Resolver, register, unregister
from tests.kit.faultfs.realfs import tmpfs
from tests.kit.workerkit import workspace

T0 = 1_790_000_400  # a multiple of 600


class FileNames(Resolver):
    """Names an op's server after the file it went to, the way a real resolver would look
    it up: after the op, on the real file (a lookup on tmpfs)."""

    fstypes = ("tmpfs",)

    def server(self, op: str, path: str, offset: int | None) -> str:
        os.stat(os.path.dirname(path))
        return f"{os.path.basename(path)}@{offset}" if offset is not None else \
            os.path.basename(path)


def server_rows(db: Path) -> list[tuple]:
    with sqlite3.connect(db) as conn:
        return conn.execute(
            "SELECT s.host, s.target, s.op, s.server, t.start, t.count, t.errors, t.hist "
            "FROM server_tens t JOIN server_series s ON s.id = t.series "
            "ORDER BY s.op, s.server, t.start").fetchall()


def test_every_op_line_names_its_server(tmp_path):
    with tmpfs(tmp_path, 64 << 20) as fs:
        ws = workspace(Path(os.fspath(fs)))
        answers: list[dict] = []
        Probes(ws).tick(1, answers.append)  # no resolver for tmpfs: unknown
        assert [a["server"] for a in answers if "op" in a] == [UNKNOWN] * len(OPS)
        register(FileNames)
        try:
            answers = []
            Probes(ws).tick(1, answers.append)
        finally:
            unregister(FileNames)
    lines = {a["op"]: a for a in answers if "op" in a}
    assert set(lines) == set(OPS) and all("err" not in a for a in lines.values())
    assert lines["data-read"]["server"].startswith("data.bin@")
    assert int(lines["data-read"]["server"].split("@")[1]) % (1 << 20) == 0
    assert lines["data-write"]["server"].startswith("data.bin@")
    old = {lines[op]["server"] for op in ("md-stat", "md-read", "md-delete")}
    (name,) = old  # one object for stat, read and delete; md-write its successor
    assert name.startswith("file-") and lines["md-write"]["server"].startswith("file-")
    assert lines["md-write"]["server"] != name


def test_a_slow_lookup_is_neither_the_ops_latency_nor_its_shown_wait():
    out = io.StringIO()
    answers = Answers(out, None)
    answers.start(1)
    time.sleep(0.01)
    returned = time.monotonic()
    time.sleep(0.4)  # the lookup of its server, longer than HOLD_ANSWERS
    answers.returned(returned)
    answers({"tick": 1, "op": "md-stat", "lat": 0.001, "server": "b1"})
    answers({"tick": 1, "end": True})
    first = json.loads(out.getvalue().splitlines()[0])
    assert "shown" not in first and first["lat"] == 0.001
    assert time.time() - first["at"] >= 0.39  # when it returned, not when it was said


def test_per_server_records_are_written_with_their_minutes_merged_per_ten(tmp_path):
    recorder = Recorder("n1")
    for k, (server, lat) in enumerate([("b1", 0.001), ("b1", 0.002), ("b2", 0.5)]):
        wall = T0 + 60 * k + 1  # three minutes of one ten
        recorder.result("g", "md-stat", lat, wall)
        recorder.served("g", "md-stat", server, lat, wall)
    recorder.result("g", "md-read", 3.0, T0 + 5, failed=True)  # hung, then failed
    recorder.served("g", "md-read", "b2", 3.0, T0 + 5, failed=True)
    recorder.result("g", "data-read", None, T0 + 7)  # an error: no latency
    recorder.served("g", "data-read", UNKNOWN, None, T0 + 7)
    recorder.skipped("g", ["md-stat"], T0 + 8)  # not per server
    recorder.stuck("g", "md-stat", 4.0, T0 + 9)
    recorder.result("g", "md-stat", 0.003, T0 + 600 + 1)  # the next ten, minute not ended
    recorder.served("g", "md-stat", "b1", 0.003, T0 + 600 + 1)
    db = tmp_path / "n1.db"
    with Store(db) as store:
        assert recorder.flush(store, T0 + 600 + 30)
    rows = server_rows(db)
    assert [r[2:7] for r in rows] == [("data-read", UNKNOWN, T0, 0, 1),
                                      ("md-read", "b2", T0, 1, 1),
                                      ("md-stat", "b1", T0, 2, 0),
                                      ("md-stat", "b2", T0, 1, 0)]
    assert all(r[:2] == ("n1", "g") for r in rows)
    hist = codec.decode_buckets(rows[2][7])
    assert hist is not None
    with Store(db) as store:  # the next ten's minute, once it ended
        assert recorder.flush(store, T0 + 660)
    assert [r[3:6] for r in server_rows(db) if r[4] == T0 + 600] == [("b1", T0 + 600, 1)]


class Failing:
    """A database that cannot be written while ``broken``; writes through to a real one."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.broken = True

    def write(self, records, nodes=(), state=None, servers=()):
        if self.broken:
            raise sqlite3.OperationalError("database or disk is full")
        return self.store.write(records, nodes, state, servers=servers)


def test_per_server_records_wait_with_the_minutes_and_are_written_once(tmp_path):
    recorder = Recorder("n1")
    db = tmp_path / "n1.db"
    with Store(db) as real:
        store = Failing(real)
        for m in range(3):
            recorder.result("g", "data-read", 0.002, T0 + 60 * m + 1)
            recorder.served("g", "data-read", "b3", 0.002, T0 + 60 * m + 1)
            assert not recorder.flush(store, T0 + 60 * (m + 1) + 1)
        recorder.result("g", "data-read", 0.004, T0 + 60 * 3 + 1)  # while it waits
        recorder.served("g", "data-read", "b3", 0.004, T0 + 60 * 3 + 1)
        store.broken = False
        assert recorder.flush(store, T0 + 60 * 4 + 1)
        assert recorder.flush(store, T0 + 60 * 5 + 1)  # nothing twice
        minutes = real.conn.execute("SELECT sum(count) FROM minutes").fetchone()[0]
    assert [r[3:7] for r in server_rows(db)] == [("b3", T0, 4, 0)] and minutes == 4


class Staged:
    """A database whose first write lands in a file readers no longer open (moved away),
    whose next write fails, and whose later writes land."""

    def __init__(self, real: Store, aside: Store) -> None:
        self.real, self.aside, self.path = real, aside, real.path
        self.mode = "moved"

    def state(self, key):
        return self.real.state(key)

    def write(self, records, nodes=(), state=None, servers=()):
        if self.mode == "fail":
            raise sqlite3.OperationalError("disk I/O error")
        into = self.aside if self.mode == "moved" else self.real
        return into.write(records, nodes, state, servers=servers)

    def moved(self):
        return "the file was moved away" if self.mode == "moved" else None


def test_a_write_that_did_not_land_keeps_its_per_server_records_through_a_failed_one(tmp_path):
    recorder = Recorder("n1")
    with Store(tmp_path / "n1.db") as real, Store(tmp_path / "moved.db") as aside:
        store = Staged(real, aside)
        for m, mode in enumerate(("moved", "fail", "ok")):
            store.mode = mode
            recorder.result("g", "md-write", 0.002, T0 + 60 * m + 1)
            recorder.served("g", "md-write", "b2", 0.002, T0 + 60 * m + 1)
            assert recorder.flush(store, T0 + 60 * (m + 1) + 1) == (mode == "ok")
        minutes = real.conn.execute("SELECT sum(count) FROM minutes").fetchone()[0]
    assert minutes == 3
    assert [r[3:7] for r in server_rows(tmp_path / "n1.db")] == [("b2", T0, 3, 0)]


def test_per_server_records_wait_per_ten_and_go_once_their_ten_is_past_the_bound():
    recorder = Recorder("n1", max_buffered_minutes=2)
    store = Failing(None)  # type: ignore[arg-type]
    for m in range(13):
        recorder.result("g", "md-stat", 0.001, T0 + 60 * m + 1)
        recorder.served("g", "md-stat", "b1", 0.001, T0 + 60 * m + 1)
        assert not recorder.flush(store, T0 + 60 * (m + 1) + 1)
    assert recorder.pending_minutes() == 2  # the minutes of T0 + 660 and T0 + 720
    kept = recorder.take_servers(float("inf"))  # the first ten dropped whole; the second
    assert [(r.server, r.start, r.histogram.count) for r in kept] == [("b1", T0 + 600, 3)]
