"""Faults of a real server, on the real GlusterFS volume of the testbed, under the real service.

Opt-in (tests/long, ``--long``); needs root; about 4 + 3 minutes:

    python -m pytest --long -s tests/long/test_gluster_faults.py

The volume's ``network.ping-timeout`` is lowered from Gluster's 42 s to
$SLOWDOWN_FAULT_PING_TIMEOUT (default 10 s) so that a run takes minutes, not hours; the client
behaves the same, only sooner. Results: docs/VALIDATION.md ("Faults of a real server").
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from tests.kit.servicekit import live, records, wait_for
from tests.kit.testbed.nodes import ProbeNode, Testbed

pytestmark = [pytest.mark.root, pytest.mark.timeout(1800)]

PING = int(os.environ.get("SLOWDOWN_FAULT_PING_TIMEOUT", 10))
FREEZE = int(os.environ.get("SLOWDOWN_FAULT_FREEZE", 90))


def state(node: ProbeNode) -> dict:
    return live(node.database)["targets"]["gluster"]


def watch(node: ProbeNode, seconds: float, since: float) -> list[dict]:
    """Every 2 s: the oldest op in flight, errors and ticks so far, as the service says."""
    samples, end = [], time.time() + seconds
    while time.time() < end:
        s = state(node)
        samples.append({"t": round(time.time() - since), "errors": s["errors"],
                        "ticks": s["ticks"], "skipped": s["skipped"],
                        "age": round(max((f["age"] for f in s["in_flight"]), default=0.0), 1)})
        time.sleep(2)
    return samples


def recovered(node: ProbeNode, after: float) -> bool:
    last = state(node)["last"].get("data-read", {})
    return not state(node)["in_flight"] and "lat" in last and last["at"] > after


def started(node: ProbeNode) -> None:
    wait_for(lambda: node.database.with_name("slowdown.db.live.json").exists(), 60,
             what="the service's live state")
    time.sleep(10)


def finish(node: ProbeNode) -> tuple[list, str]:
    """The node's records once the minute is flushed, and its log."""
    time.sleep(60 - time.time() % 60 + 3)
    node.stop()
    return records(node.database, targets=("gluster",)), node.output()


def test_both_bricks_frozen_then_resumed(root_only) -> None:
    with Testbed(nodes=1, brick_mib=1024, ping_timeout=PING) as bed:
        node = bed.nodes[0]
        started(node)
        bricks = list(bed.server.brick_pids().values())
        frozen = time.time()
        for pid in bricks:
            os.kill(pid, signal.SIGSTOP)
        try:
            during = watch(node, FREEZE, frozen)
        finally:
            for pid in bricks:
                os.kill(pid, signal.SIGCONT)
        resumed = time.time()
        wait_for(lambda: recovered(node, resumed), 180, step=1, what="ops to succeed again")
        back = time.time() - resumed
        recs, out = finish(node)
    print(f"\nping-timeout {PING} s, frozen {FREEZE} s, ops back {back:.0f} s after resume")
    for s in during[::5]:
        print(s)
    print("\n".join(line for line in out.splitlines() if "failed" in line or "stuck" in line))
    assert bed.leftovers() == []
    # the stuck age shows while the bricks are frozen, up to the ping-timeout at least
    assert max(s["age"] for s in during) >= PING - 2, during
    errors = sum(r.errors for r in recs)
    assert errors >= 1 and "ENOTCONN" in out, out
    assert "UnsafePathError" not in out, out
    # the op that hung until the client gave up is in the latency, not only in the stuck age
    longest = max(r.histogram.max for r in recs if r.histogram.count)
    assert longest >= PING - 1, [(r.op, r.start, r.errors, r.histogram.max) for r in recs]
    assert back < 120


def test_one_brick_killed_and_restarted(root_only) -> None:
    with Testbed(nodes=1, brick_mib=1024, ping_timeout=PING) as bed:
        node = bed.nodes[0]
        started(node)
        path, pid = sorted(bed.server.brick_pids().items())[0]
        killed = time.time()
        os.kill(pid, signal.SIGKILL)
        down = watch(node, 40, killed)
        bed.server.restart_bricks()
        restarted = time.time()
        wait_for(lambda: len(bed.server.brick_pids()) == 2, 60, what="the brick back")
        up = watch(node, 30, killed)
        recs, out = finish(node)
    print(f"\nbrick {path} killed; restarted after {restarted - killed:.0f} s")
    for s in (down + up)[::5]:
        print(s)
    print("\n".join(line for line in out.splitlines() if "failed" in line or "stuck" in line))
    assert bed.leftovers() == []
    # one brick of a replica 2 volume down: the probes go on and nothing hangs
    ticks = down[-1]["ticks"] - down[0]["ticks"]
    assert ticks >= 0.8 * (down[-1]["t"] - down[0]["t"]), down
    assert max(s["age"] for s in down + up) < PING, down + up
    assert "UnsafePathError" not in out, out
    assert sum(r.histogram.count for r in recs if r.op == "data-read") > 60, recs
