"""Node context is measured, never made up: the CPU share of a minute is the node's own, from
whichever thread the flush runs in (psutil's ``cpu_percent`` said 0 % at its first call in each
thread: the first minute after every start), and unknown (NULL) when the span is too short."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from functools import partial

import pytest

from slowdown.analysis.stats.verdict import node_context
from slowdown.analysis.store import Store
from slowdown.probe.runtime import node_context as node


def proc_stat() -> tuple[int, int]:
    """(busy, total) jiffies of every CPU from /proc/stat, read apart from psutil."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    user, nice, system, idle, iowait, irq, softirq, steal = fields[:8]
    total = user + nice + system + idle + iowait + irq + softirq + steal
    return total - idle - iowait, total


def in_thread(call):
    """``call()`` in a new thread (as a flush job in one of the scheduler's threads)."""
    out = []
    thread = threading.Thread(target=lambda: out.append(call()))
    thread.start()
    thread.join()
    return out[0]


@pytest.mark.timeout(60)
def test_the_cpu_share_is_the_nodes_whatever_thread_samples(monkeypatch):
    monkeypatch.setattr(node, "MIN_CPU_SPAN", 1.0, raising=False)  # (5 s: a slower test)
    sampler = node.NodeSampler("n1")
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        for start in (0, 60):  # the first minute after the start, then a later one
            before = proc_stat()
            time.sleep(1.5)
            sample = in_thread(partial(sampler.sample, start))
            after = proc_stat()
            share = 100 * (after[0] - before[0]) / (after[1] - before[1])
            assert sample.values["cpu"] is not None and sample.values["cpu"] > 0, sample
            assert sample.values["cpu"] == pytest.approx(share, abs=10), (sample, share)
    finally:
        busy.kill()
        busy.wait()


def test_a_span_too_short_is_unknown_not_zero_down_to_the_verdicts_context(tmp_path):
    sample = node.NodeSampler("n1").sample(0)  # a flush a moment after the start
    assert sample.values["cpu"] is None, sample
    assert sample.values["load1"] is not None and sample.values["memory"] is not None
    db = tmp_path / "n1.db"
    with Store(db) as store:
        store.write([], node=[sample])
    with Store(db, readonly=True) as store:
        (row,) = store.node()
        assert row.values["cpu"] is None  # NULL in the file
        context = node_context([store], "n1", 30.0)
    assert "cpu" not in context and "load1" in context  # the verdict's line: no "cpu 0%"
