"""The paper's validation, short form, on a real GlusterFS volume: two probing nodes (namespaces
with their own host names and mounts), a quiet period that makes the baseline, one mdtest-hard
burst from a third node that does not probe. The md ops' 1m median slowdown, as
``slowdown --op 'md-*'`` shows it (its worst op), must rise to >= 2 on both nodes during the
burst and stay < 1.5 in the quiet minute before it (one raised quiet minute is taken again:
tests/kit/testbed/burst.py); the testbed leaves nothing behind.
The long form with every IO500 phase is tests/long/test_io500_long.py (docs/VALIDATION.md)."""

from __future__ import annotations

import time

import pytest

from tests.kit.iorkit import ior_bin, mdtest_hard
from tests.kit.testbed.burst import check, load_seconds, quiet_minute, read_minute
from tests.kit.testbed.nodes import Testbed

pytestmark = [pytest.mark.root, pytest.mark.slow, pytest.mark.testbed,
              pytest.mark.timeout(420)]

MIN_BASELINE = 45  # seconds of quiet samples before the quiet minute that is checked


def test_mdtest_hard_burst_seen_by_both_nodes(root_only) -> None:
    ior_bin()  # built before the clock starts
    with Testbed(nodes=2, brick_mib=2048) as bed:
        started = time.time()
        quiet, before = quiet_minute(bed.nodes, started, MIN_BASELINE,
                                     "quiet volume before the burst")
        burst = quiet + 60  # the checked burst minute
        rc = bed.load(mdtest_hard(load_seconds(burst)), timeout=240)
        assert rc == 0, bed.others[-1].output()[-3000:]
        during = read_minute(bed.nodes, burst)
        outputs = {node.name: node.output() for node in bed.nodes}
    assert bed.leftovers() == []
    check(before, during, outputs)
