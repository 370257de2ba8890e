"""kill -9 of the real service, 400 times (the CI form does 25: test_reliability_crash.py).

Opt-in (tests/long, ``--long``); about 15 minutes:

    python -m pytest --long -s tests/long/test_crash_long.py

What each cycle injects and checks is in tests/kit/crashloop.py; the summary it prints is in
docs/RELIABILITY.md.
"""

from __future__ import annotations

import json
import os

import pytest

from tests.kit.crashloop import crash_loop, summary

CYCLES = int(os.environ.get("SLOWDOWN_CRASH_CYCLES", "400"))


@pytest.mark.timeout(3600)
def test_kill_9_four_hundred_times(tmp_path):
    results = crash_loop(tmp_path, CYCLES, seed=400)
    seen = summary(results)
    print("CRASH-SUMMARY " + json.dumps(seen))
    assert len(results) == CYCLES
    after = seen["after"]  # a service still starting 1.5 s after the boundary had not probed
    assert after.get("killed in the flush before its commit (minute lost)", 0) == 0, seen
    assert after["minute written"] >= after["kills"] * 3 // 4, seen
    lost = seen["boundary"].get("killed in the flush before its commit (minute lost)", 0)
    assert lost >= 1, seen  # some kills did land inside the flush
