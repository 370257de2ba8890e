"""kill -9, twenty-five times: the database stays whole and at most the minute in progress is lost.

See tests/kit/crashloop.py for what each cycle injects and checks; tests/long/test_crash_long.py
runs the same loop a few hundred times (docs/RELIABILITY.md has its counts).
"""

from __future__ import annotations

import json

import pytest

from tests.kit.crashloop import crash_loop, summary

CYCLES = 25  # ~2.6 s each; the long form runs 400


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_kill_9_twenty_five_times(tmp_path):
    results = crash_loop(tmp_path, CYCLES, seed=10)
    seen = summary(results)
    print(json.dumps(seen, indent=1))
    assert len(results) == CYCLES
    # The kills landed where they matter: during start-up, while probing, in the minute flush
    # (before and after its commit), and the minute was there whenever the flush had had time.
    assert seen["random"].get("killed before the service was up", 0) >= 1, seen
    assert seen["random"].get("killed while probing, before the boundary", 0) >= 1, seen
    near_flush = seen["boundary"]
    assert near_flush.get("killed in the flush before its commit (minute lost)", 0) \
        + near_flush.get("killed after the commit", 0) >= 3, seen
    assert seen["wal"].get("killed once the WAL changed", 0) >= 5, seen
    # 1.5-2 s after the boundary of a minute it had probed, the service had always written it
    # (crash_loop checks each cycle); one still starting then (a busy machine) had not probed.
    after = seen["after"]
    assert after.get("killed in the flush before its commit (minute lost)", 0) == 0, seen
    assert after["minute written"] >= 1, seen
