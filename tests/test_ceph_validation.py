"""The paper's validation, short form, on a real CephFS: two probing nodes (namespaces with
their own host names and ceph-fuse mounts under an ordinary client key), a quiet period that
makes the baseline, one mdtest-hard burst from a third node that does not probe: the md ops' 1m
median slowdown, as ``slowdown --op 'md-*'`` shows it (its worst op), must rise to >= 2 on both
nodes during the burst and stay < 1.5 in the quiet minute before it. Then the active MDS is
killed with a standby present: while the standby takes over, the nodes show an md op in flight
(stuck), and they recover without a restart. The testbed leaves nothing behind.
CephFS's own faults at length: tests/long/test_ceph_faults.py (docs/VALIDATION.md)."""

from __future__ import annotations

import socket
import time

import pytest

from slowdown.analysis.words import MD_OPS
from tests.kit.iorkit import ior_bin, mdtest_hard, sleep_until
from tests.kit.servicekit import wait_for
from tests.kit.testbed.ceph import MON_PORTS
from tests.kit.testbed.cephbed import CephTestbed
from tests.kit.testbed.cephwatch import back, stuck
from tests.kit.testbed.gluster import TestbedRefused
from tests.kit.testbed.results import per_minute, rebaseline

pytestmark = [pytest.mark.root, pytest.mark.slow, pytest.mark.testbed,
              pytest.mark.timeout(420)]

MIN_BASELINE = 45  # seconds of quiet samples before the quiet minute that is checked
RANKS = 4  # mdtest processes: the MDS queue the probes wait in


def test_mdtest_hard_burst_then_mds_failover(root_only) -> None:
    ior_bin()  # built before the clock starts
    with CephTestbed(nodes=2, pool_files=2000) as bed:
        started = time.time()
        quiet = (int(started + MIN_BASELINE) // 60 + 1) * 60  # the checked quiet minute
        burst = quiet + 60  # the checked burst minute
        sleep_until(quiet)
        for node in bed.nodes:
            rebaseline(node.config, started, quiet, "quiet CephFS before the burst")
        sleep_until(burst - 5)
        rc = bed.load(mdtest_hard(int(burst + 61 - time.time()), RANKS), timeout=240)
        assert rc == 0, bed.others[-1].output()[-3000:]

        killed_at = time.time()
        killed = bed.kill_active_mds()
        stalled = {node.name: 0.0 for node in bed.nodes}
        while bed.active_mds() in (killed, None):
            for node in bed.nodes:
                stalled[node.name] = max(stalled[node.name], stuck(node, "md"))
            assert time.time() - killed_at < 90, "no standby took over in 90 s"
            time.sleep(0.5)
        failover = time.time() - killed_at
        for node in bed.nodes:
            wait_for(lambda n=node: back(n, killed_at + failover, MD_OPS), 90, step=0.5,
                     what=f"{node.name}'s md ops back after the failover")
        recovered = time.time() - killed_at
        running = {node.name: node.proc.poll() is None for node in bed.nodes}
        sleep_until(max(time.time(), burst + 63))  # the burst minute flushed
        seen = {node.name: per_minute(node.config, quiet, burst + 60, "median")[0]
                for node in bed.nodes}
        outputs = {node.name: node.output() for node in bed.nodes}
        times = {**bed.times, "rss_mib": round(bed.rss_mib())}
    times.update(bed.times)
    print(f"\nCephFS testbed {times}; failover {failover:.1f} s, md ops back {recovered:.1f} s "
          f"after the kill, stuck up to {stalled}")
    assert bed.leftovers() == []
    for name, minutes in seen.items():  # the md ops as `slowdown --op 'md-*'` shows them:
        before = {op: minutes.get((op, quiet)) for op in MD_OPS}  # the worst op's slowdown
        during = {op: minutes.get((op, burst)) for op in MD_OPS}
        print(name, "quiet", before, "burst", during)
        assert None not in before.values() and None not in during.values(), (name, minutes)
        assert max(before.values()) < 1.5, (name, before, during, outputs[name][-2000:])
        assert max(during.values()) >= 2, (name, before, during, outputs[name][-2000:])
    assert all(running.values()), (running, outputs)
    for name, age in stalled.items():  # the MDS gone: an md op in flight while it lasts
        assert age >= min(5.0, failover / 2), (name, stalled, failover)


def test_refuses_beside_a_cluster_it_did_not_make(root_only) -> None:
    """Something not ours on the mon's port (another cluster's mon): no start, nothing left."""
    bed = CephTestbed(nodes=0)
    with socket.socket() as other:
        other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        other.bind(("127.0.0.1", MON_PORTS[0]))
        other.listen()
        with pytest.raises(TestbedRefused, match=f"port {MON_PORTS[0]}"):
            bed.__enter__()
    assert bed.leftovers() == []
