"""The paper's validation, short form, on a real CephFS: two probing nodes, a quiet period
that makes the baseline, one mdtest-hard burst from a third node that does not probe: the md
ops' 1m median slowdown, as ``slowdown --op 'md-*'`` shows it (its worst op), must rise to
>= 2 on both nodes during the burst and stay < 1.5 in the quiet minute before it; then the
active MDS is killed with a standby present: an md op stuck while it lasts, the nodes recover
without a restart. Opt-in (``--long``, about 4 minutes, root): on this 2-core machine the
burst from one load node reached 2 on node1 in only 2 of 5 runs (1.35 to 3.02), from two
(the default, SLOWDOWN_BURST_LOADERS) on both nodes in 2 of 3 (docs/VALIDATION.md). The
default suite's form, without the burst: tests/test_ceph_validation.py."""

from __future__ import annotations

import os
import time

import pytest

from slowdown.analysis.words import MD_OPS
from tests.kit.iorkit import ior_bin, mdtest_hard, sleep_until
from tests.kit.testbed.cephbed import CephTestbed
from tests.kit.testbed.cephwatch import mds_failover
from tests.kit.testbed.results import per_minute, rebaseline

pytestmark = [pytest.mark.root, pytest.mark.slow, pytest.mark.testbed,
              pytest.mark.timeout(420)]

MIN_BASELINE = 45  # seconds of quiet samples before the quiet minute that is checked
RANKS = 4  # mdtest processes per load node: the MDS queue the probes wait in
# Load nodes side by side, each with its own ceph-fuse (one client's requests queue in it):
# from one node the burst reached 2 in 2 of 5 runs here, from two in 2 of 3.
LOADERS = int(os.environ.get("SLOWDOWN_BURST_LOADERS", "2"))


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
        seconds = int(burst + 61 - time.time())
        codes = bed.loads([mdtest_hard(seconds, RANKS, f"load/mdt_hard{n}")
                           for n in range(LOADERS)], "mdtest-hard", timeout=240)
        assert codes == [0] * LOADERS, [o.output()[-3000:] for o in bed.others]
        failover, recovered, stalled = mds_failover(bed)
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
    for name, minutes in seen.items():
        before = {op: minutes.get((op, quiet)) for op in MD_OPS}
        during = {op: minutes.get((op, burst)) for op in MD_OPS}
        print(name, "quiet", before, "burst", during)
        assert None not in before.values() and None not in during.values(), (name, minutes)
        assert max(before.values()) < 1.5, (name, before, during, outputs[name][-2000:])
        assert max(during.values()) >= 2, (name, before, during, outputs[name][-2000:])
    assert all(running.values()), (running, outputs)
    for name, age in stalled.items():
        assert age >= min(5.0, failover / 2), (name, stalled, failover)
