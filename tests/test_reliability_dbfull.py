"""The database volume fills up or turns read-only: probing goes on, minutes wait in memory.

Here the recorder's side: a store that fails keeps every minute in memory and writes each once
when it can, within a bound (at least 60 minutes, then the oldest go first, said in the log),
checked on 300 minutes. End to end with the real service on a full tmpfs and an ext4 volume
turned read-only (two minutes of waiting for minute flushes): tests/long/test_dbfull_long.py.
"""

from __future__ import annotations

import logging

import numpy as np

from slowdown.analysis.histogram import Histogram
from slowdown.analysis.store.records import NodeContext
from slowdown.probe.runtime.recorder import Recorder


class FlakyStore:
    """Fails while ``broken``; remembers every record it wrote."""

    def __init__(self) -> None:
        self.broken = True
        self.written: list[tuple[str, str, int, int]] = []
        self.nodes: list[int] = []

    def write(self, records, nodes=(), state=None, servers=()) -> int:
        if self.broken:
            raise OSError(28, "database or disk is full")
        self.written += [(r.target, r.op, r.start, r.histogram.count) for r in records]
        self.nodes += [n.start for n in nodes]
        return len(records)


def test_the_buffer_keeps_at_least_an_hour_bounded_and_writes_it_once(caplog):
    caplog.set_level(logging.INFO, logger="slowdown.probe.runtime.recorder")
    recorder = Recorder("n1", database="/var/lib/slowdown/slowdown.db")
    assert recorder.max_buffered_minutes >= 60
    store = FlakyStore()
    t0 = 1_700_000_000 // 60 * 60
    minutes = 300
    for m in range(minutes):
        for s in range(0, 60, 10):
            recorder.result("work", "md-stat", 0.001 + s * 1e-5, t0 + 60 * m + s)
        recorder.node(NodeContext("n1", t0 + 60 * m, {"load1": 1.0}))
        assert not recorder.flush(store, t0 + 60 * (m + 1) + 0.5)
        assert recorder.pending_minutes() == min(m + 1, recorder.max_buffered_minutes)
    failing = [r for r in caplog.records if "cannot write the database" in r.getMessage()]
    assert len(failing) == 1 and "/var/lib/slowdown/slowdown.db" in failing[0].getMessage()
    assert "database or disk is full" in failing[0].getMessage()
    dropped = [r for r in caplog.records if "dropped" in r.getMessage()]
    assert dropped and recorder.dropped == minutes - recorder.max_buffered_minutes
    # Results of the minute in progress while the volume is still broken.
    recorder.result("work", "md-stat", 0.002, t0 + 60 * minutes + 1)
    store.broken = False
    assert recorder.flush(store, t0 + 60 * (minutes + 1) + 0.5)
    kept = list(range(minutes - recorder.max_buffered_minutes, minutes + 1))
    assert sorted(start for _, _, start, _ in store.written) == [t0 + 60 * m for m in kept]
    assert all(count == 6 for _, _, start, count in store.written if start < t0 + 60 * minutes)
    assert len(store.nodes) == len(set(store.nodes)) == recorder.max_buffered_minutes
    assert any("writable again" in r.getMessage() for r in caplog.records)
    assert recorder.pending_minutes() == 0
    assert recorder.flush(store, t0 + 60 * (minutes + 2) + 0.5)  # nothing is written twice
    assert len(store.written) == len(kept)


def test_results_recorded_while_a_minute_waits_are_merged_not_lost():
    recorder = Recorder("n1")
    store = FlakyStore()
    t0 = 1_700_000_000 // 60 * 60
    recorder.result("work", "md-stat", 0.001, t0 + 59.9)
    assert not recorder.flush(store, t0 + 60.0)
    recorder.result("work", "md-stat", 0.002, t0 + 59.95)  # a late straggler of that minute
    store.broken = False
    assert recorder.flush(store, t0 + 120.0)
    assert store.written == [("work", "md-stat", t0, 2)]


def test_histograms_survive_put_back_exactly():
    recorder = Recorder("n1")
    store = FlakyStore()
    t0 = 1_700_000_000 // 60 * 60
    values = np.random.default_rng(0).lognormal(-6, 1, 500)
    expected = Histogram()
    for i, v in enumerate(values):
        recorder.result("work", "data-read", float(v), t0 + (i % 60))
        expected.record(float(v))
    for k in range(5):
        assert not recorder.flush(store, t0 + 60 * (k + 1))
    records, _ = recorder.take(t0 + 60)
    (rec,) = records
    assert rec.histogram.count == expected.count
    assert rec.histogram.quantile(0.99) == expected.quantile(0.99)
