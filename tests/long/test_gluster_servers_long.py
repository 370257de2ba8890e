"""Which brick is slow, long form, on a real GlusterFS volume: a distribute volume of four
bricks, three probing nodes; quiet whole ten-minute periods (``SLOWDOWN_QUIET_TENS``, default
3: the issue's half hour), then one brick's glusterfsd held to 5 % of a CPU for a whole ten
minutes. ``slowdown servers`` over the three nodes' files is asked every minute: quiet, no
brick is ever ``slow``; slowed, the slowed brick is named ``slow`` (the time it took is
printed) and no other brick ever is. Per-server records are kept per ten minutes, so the
periods are aligned to them: each reading (``--since 1m``) reads the current ten alone.

Opt-in (tests/long, ``--long``); about 25 minutes plus 10 per quiet ten; needs root:

    python -m pytest --long -s tests/long/test_gluster_servers_long.py
"""

from __future__ import annotations

import os
import time

import pytest

from slowdown.analysis.store.live import live_path
from tests.kit.iorkit import sleep_until
from tests.kit.testbed.nodes import Testbed
from tests.kit.testbed.servers import brick_holding, servers_words, slow_ones

QUIET_TENS = int(os.environ.get("SLOWDOWN_QUIET_TENS", "3"))
TEN = 600
QUOTA = 5  # percent of one CPU

pytestmark = [pytest.mark.root, pytest.mark.slow, pytest.mark.testbed,
              pytest.mark.timeout(TEN * (QUIET_TENS + 3) + 600)]


def test_a_brick_slowed_for_ten_minutes_is_named_and_no_other(root_only):
    with Testbed(nodes=3, brick_mib=1024, bricks=4, replica=1, pool_files=400) as bed:
        pids = bed.server.brick_pids()
        bricks = sorted(pids)
        names = {b: f"{bed.server.host}:{b}" for b in bricks}
        deadline = time.monotonic() + 150
        while not all(live_path(n.database).exists() for n in bed.nodes):
            assert time.monotonic() < deadline, [n.output()[-1500:] for n in bed.nodes]
            time.sleep(1)
        databases = [n.database for n in bed.nodes]
        quiet_from = (int(time.time()) // TEN + 1) * TEN  # the next whole ten
        slowing = quiet_from + QUIET_TENS * TEN
        quiet, slowed_words = [], []
        t = quiet_from + 65
        while t < slowing:  # each minute, just after its flush, the current ten alone
            sleep_until(t)
            quiet.append((t, servers_words(databases, "1m")))
            t += 60
        slowed = brick_holding(bricks, f"slowdown/.slowdown/{bed.nodes[0].name}/data.bin")
        sleep_until(slowing)
        bed.server.slow_down(pids[slowed], QUOTA)
        try:
            t = slowing + 65
            while t < slowing + TEN:
                sleep_until(t)
                slowed_words.append((t, servers_words(databases, "1m")))
                t += 60
        finally:
            bed.server.release(pids[slowed])
    assert bed.leftovers() == []
    for t, words in quiet:
        print(time.strftime("%H:%M", time.gmtime(t)), "quiet",
              {k[-14:]: (v["word"], v["probes"]) for k, v in words.items()})
    named_at = None
    for t, words in slowed_words:
        print(time.strftime("%H:%M", time.gmtime(t)), "slowed",
              {k[-14:]: (v["word"], v["probes"], v["against_others"]) for k, v in words.items()})
        if named_at is None and names[slowed] in slow_ones(words):
            named_at = t - slowing
    print(f"named after {named_at} s of {len(slowed_words)} readings; "
          f"quiet readings {len(quiet)}")
    assert all(slow_ones(words) == [] for _, words in quiet), quiet
    assert all(set(slow_ones(words)) <= {names[slowed]} for _, words in slowed_words)
    assert named_at is not None, slowed_words
    assert names[slowed] in slow_ones(slowed_words[-1][1]), slowed_words[-1]
