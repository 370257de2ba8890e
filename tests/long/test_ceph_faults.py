"""CephFS's own faults, on the real cluster of the CephFS testbed, under the real service.

Opt-in (tests/long, ``--long``); needs root; about 2-4 minutes each:

    python -m pytest --long -s tests/long/test_ceph_faults.py

Each prints what the probe showed (the oldest op in flight, errors) while the fault lasted and
how long its ops took to come back. Results: docs/VALIDATION.md ("CephFS's own faults").
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from slowdown.analysis.words import MD_OPS
from tests.kit.servicekit import records, wait_for
from tests.kit.testbed.cephbed import CephTestbed
from tests.kit.testbed.cephwatch import DATA_OPS, back, state, watch, worst
from tests.kit.testbed.nodes import ProbeNode

pytestmark = [pytest.mark.root, pytest.mark.timeout(900)]

FREEZE = int(os.environ.get("SLOWDOWN_CEPH_FREEZE", 65))
ALL_OPS = (*MD_OPS, *DATA_OPS)


def settled(node: ProbeNode) -> None:
    """The service up and every op measured once."""
    wait_for(lambda: node.database.with_name("slowdown.db.live.json").exists(), 120,
             what="the service's live state")
    wait_for(lambda: back(node, 0), 120, step=1, what="every op measured")
    time.sleep(10)


def recovery(node: ProbeNode, after: float, ops: tuple[str, ...] = ALL_OPS,
             timeout: float = 300) -> float:
    """Seconds from ``after`` until every op of ``ops`` is done again, none in flight."""
    wait_for(lambda: back(node, after, ops), timeout, step=0.5, what="the ops back")
    return time.time() - after


def finish(node: ProbeNode) -> tuple[list, str]:
    """The node's records once the minute is flushed, and its log."""
    time.sleep(60 - time.time() % 60 + 3)
    node.stop()
    return records(node.database, targets=("cephfs",)), node.output()


def report(title: str, samples: list[dict], out: str) -> None:
    print(f"\n{title}")
    for s in samples[::3]:
        print(s)
    print("\n".join(line for line in out.splitlines()
                    if "failed" in line or "stuck" in line or "error" in line.lower())[-3000:])


def slowdown_says(node: ProbeNode, *args: str) -> str:
    done = subprocess.run(["slowdown", *args, "--config", str(node.config)],
                          capture_output=True, text=True, timeout=60)
    return f"exit {done.returncode}: {done.stdout.strip()} {done.stderr.strip()}"


def test_osd_frozen_then_marked_down(root_only) -> None:
    with CephTestbed(nodes=1, osds=3) as bed:
        node = bed.nodes[0]
        settled(node)
        pid = bed.server.pid_of("osd.0")
        frozen = time.time()
        os.kill(pid, signal.SIGSTOP)
        try:
            during = watch(node, FREEZE, frozen)
        finally:
            os.kill(pid, signal.SIGCONT)
        recovery(node, time.time())
        recs, out = finish(node)
    first = next((i for i, s in enumerate(during) if s["in_flight"]), len(during))
    clear = next((s["t"] for s in during[first:] if not s["in_flight"]), None)
    report(f"osd.0 frozen {FREEZE} s; nothing in flight any more {clear} s after the freeze "
           "(osd.0 marked down)", during, out)
    assert bed.leftovers() == []
    assert worst(during) >= 10, during  # writes to osd.0's PGs wait until it is marked down
    assert worst(during) < FREEZE, during  # ... not for the whole freeze: then size 3 serves
    assert sum(r.histogram.count for r in recs if r.op == "data-write") > 30


def test_mds_frozen_without_standby(root_only) -> None:
    with CephTestbed(nodes=1, mdss=1) as bed:
        node = bed.nodes[0]
        settled(node)
        pid = bed.server.pid_of(f"mds.{bed.active_mds()}")
        frozen = time.time()
        os.kill(pid, signal.SIGSTOP)
        try:
            during = watch(node, FREEZE, frozen)
        finally:
            os.kill(pid, signal.SIGCONT)
        resumed = time.time()
        took = recovery(node, resumed)
        _, out = finish(node)
    report(f"the only MDS frozen {FREEZE} s; ops back {took:.0f} s after SIGCONT", during, out)
    assert bed.leftovers() == []
    assert worst(during) >= FREEZE - 10, during  # md ops wait for the MDS as long as it is gone
    assert took < 60


def test_mds_killed_standby_takes_over(root_only) -> None:
    with CephTestbed(nodes=1) as bed:
        node = bed.nodes[0]
        settled(node)
        killed_at = time.time()
        killed = bed.kill_active_mds()
        during = []
        while bed.active_mds() in (killed, None):
            during += watch(node, 1, killed_at, step=1)
            assert time.time() - killed_at < 120, "no standby took over"
        failover = time.time() - killed_at
        took = recovery(node, time.time())
        during += watch(node, 10, killed_at)
        recs, out = finish(node)
    report(f"mds.{killed} killed; failover {failover:.1f} s, ops back {took:.1f} s later",
           during, out)
    assert bed.leftovers() == []
    assert worst(during) >= 5, during
    assert sum(r.errors for r in recs) == 0, [(r.op, r.errors) for r in recs if r.errors]


def test_client_evicted_then_remounted(root_only) -> None:
    with CephTestbed(nodes=1) as bed:
        node = bed.nodes[0]
        settled(node)
        evicted = time.time()
        said = bed.evict(node)
        during = watch(node, 30, evicted)
        line, check = slowdown_says(node), slowdown_says(node, "check")
        print(f"\n`slowdown` while evicted: {line}\n`slowdown check`: {check}\n{during}")
        remount = bed.remount(node)
        remounted = time.time()
        try:  # the service goes on through it: every op must work again, without a restart
            took = recovery(node, remounted, timeout=120)
        except AssertionError:
            raise AssertionError(f"not every op back 120 s after the remount: "
                                 f"{state(node)['last']}\n{node.output()[-2000:]}") from None
        after = slowdown_says(node)
        _, out = finish(node)
    report(f"client evicted ({said.strip()}); remount {remount:.2f} s, ops back {took:.1f} s "
           f"after it\n`slowdown` while evicted: {line}\n`slowdown check`: {check}\n"
           f"`slowdown` after the remount: {after}", during, out)
    assert bed.leftovers() == []
    assert during[-1]["errors"] > during[0]["errors"], during  # every op fails at once
    assert "ESHUTDOWN" in out or "108" in out, out[-3000:]
    # Said at once on the lines users read, from the live state (not a minute later from the
    # flushed minutes' share of failures).
    assert "failing: every op since" in line, line
    assert check.startswith("exit 2:") and "CRITICAL" in check and "every op" in check, check
    # After the remount the streak is over; the windows may still hold the failed ops'
    # share ("failing: 68.4% of ops") once the eviction's minute is written, which is true.
    assert "every op since" not in after, after


def test_osd_held_to_five_percent(root_only) -> None:
    with CephTestbed(nodes=1, osds=3) as bed:
        node = bed.nodes[0]
        settled(node)
        before = watch(node, 60, time.time())
        pid = bed.server.pid_of("osd.0")
        held = time.time()
        group = bed.slow_down(pid, 5)
        try:
            during = watch(node, 120, held)
            throttled = (group / "cpu.stat").read_text().split()
        finally:
            bed.release(pid)
        took = recovery(node, time.time())
        recs, out = finish(node)
    writes = sorted((r.start - held, r.histogram.count, round(r.histogram.quantile(0.5), 4),
                     round(r.histogram.max, 3)) for r in recs if r.op == "data-write")
    report(f"osd.0 at 5 % of a CPU for 120 s (cpu.stat {throttled[:6]}); ops back "
           f"{took:.1f} s after; data-write "
           "minutes (start from the hold, count, median, max):\n"
           + "\n".join(map(str, writes)), before + during, out)
    assert bed.leftovers() == []
    assert worst(during) < 60, during
