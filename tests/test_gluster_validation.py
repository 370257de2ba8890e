"""The paper's validation, short form, on a real GlusterFS volume: two probing nodes (namespaces
with their own host names and mounts), a quiet period that makes the baseline, one mdtest-hard
burst from a third node that does not probe. The md ops' 1m median slowdown, as
``slowdown --op 'md-*'`` shows it (its worst op), must rise to >= 2 on both nodes during the
burst and stay < 1.5 in the quiet minute before it; the testbed leaves nothing behind.
The long form with every IO500 phase is tests/long/test_io500_long.py (docs/VALIDATION.md)."""

from __future__ import annotations

import time

import pytest

from slowdown.analysis.words import MD_OPS
from tests.kit.iorkit import ior_bin, mdtest_hard, sleep_until
from tests.kit.testbed.nodes import Testbed
from tests.kit.testbed.results import per_minute, rebaseline

pytestmark = [pytest.mark.root, pytest.mark.slow, pytest.mark.testbed,
              pytest.mark.timeout(420)]

MIN_BASELINE = 45  # seconds of quiet samples before the quiet minute that is checked


def test_mdtest_hard_burst_seen_by_both_nodes(root_only) -> None:
    ior_bin()  # built before the clock starts
    with Testbed(nodes=2, brick_mib=2048) as bed:
        started = time.time()
        quiet = (int(started + MIN_BASELINE) // 60 + 1) * 60  # the checked quiet minute
        burst = quiet + 60  # the checked burst minute
        sleep_until(quiet)
        for node in bed.nodes:
            rebaseline(node.config, started, quiet, "quiet volume before the burst")
        sleep_until(burst - 5)
        rc = bed.load(mdtest_hard(int(burst + 61 - time.time())), timeout=240)
        assert rc == 0, bed.others[-1].output()[-3000:]
        sleep_until(burst + 63)  # the burst minute flushed
        seen = {node.name: per_minute(node.config, quiet, burst + 60, "median")[0]
                for node in bed.nodes}
        outputs = {node.name: node.output() for node in bed.nodes}
    assert bed.leftovers() == []
    for name, minutes in seen.items():  # the md ops as `slowdown --op 'md-*'` shows them:
        before = {op: minutes.get((op, quiet)) for op in MD_OPS}  # the worst op's slowdown
        during = {op: minutes.get((op, burst)) for op in MD_OPS}
        assert None not in before.values() and None not in during.values(), (name, minutes)
        assert max(before.values()) < 1.5, (name, before, during, outputs[name][-2000:])
        assert max(during.values()) >= 2, (name, before, during, outputs[name][-2000:])
