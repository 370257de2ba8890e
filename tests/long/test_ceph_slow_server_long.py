"""Which server is slow, long form, on the real CephFS testbed: three OSDs (pools of three
copies), one MDS rank, three probing nodes. A quiet period (at least
``SLOWDOWN_QUIET_MINUTES``, default 30, up to the next whole ten minutes), then one OSD's
ceph-osd held to 5 % of a CPU for a whole ten minutes (a cgroup v1 CPU quota with a busy
loop in the group, aligned to the per-server records' tens), then the MDS's ceph-mds the
same for ``SLOWDOWN_MDS_MINUTES`` (default 10) of the next ten. ``slowdown servers`` over
the three nodes' files is asked every minute, just after its flush (``--since 1m``: the
current ten alone):

- quiet: no OSD and no MDS rank is ever ``slow``;
- the OSD slowed: it is named ``slow`` by its data reads (the time it took is printed), and
  no other OSD ever is;
- the MDS slowed: md ops name ``mds.0``. One rank has no other rank to stand above: it is
  judged against the op's expected value (a baseline made from the quiet period), and
  ``slowdown -v`` names it.

The OSD slowed is the one that served the most data reads in the quiet period (a node's
64 MiB data file is 16 objects; reads go to each object's primary).

Opt-in (tests/long, ``--long``); about 25 minutes plus the quiet period; needs root:

    SLOWDOWN_QUIET_MINUTES=5 python -m pytest --long -s tests/long/test_ceph_slow_server_long.py
"""

from __future__ import annotations

import json
import os
import re
import time

import pytest

from slowdown.analysis.store.live import live_path
from tests.kit.iorkit import sleep_until
from tests.kit.testbed.cephbed import CephTestbed
from tests.kit.testbed.results import rebaseline
from tests.kit.testbed.servers import servers_words, slow_ones, slowdown_text

QUIET_MINUTES = int(os.environ.get("SLOWDOWN_QUIET_MINUTES", "30"))
MDS_MINUTES = int(os.environ.get("SLOWDOWN_MDS_MINUTES", "10"))
TEN = 600
QUOTA = 5  # percent of one CPU
OSD = re.compile(r"osd\.\d+")

pytestmark = [pytest.mark.root, pytest.mark.slow, pytest.mark.testbed,
              pytest.mark.timeout(QUIET_MINUTES * 60 + 2 * TEN + MDS_MINUTES * 60 + 900)]


def readings(databases: list, start: float, end: float) -> list[tuple[float, dict]]:
    """``slowdown servers --since 1m --json`` each minute from ``start`` while before ``end``."""
    out, t = [], start
    while t < end:
        sleep_until(t)
        out.append((t, servers_words(databases, "1m")))
        t += 60
    return out


def osds_up(bed: CephTestbed) -> int:
    return json.loads(bed.server.ceph("osd", "stat", "-f", "json").stdout)["num_up_osds"]


def show(label: str, taken: list[tuple[float, dict]], since: float) -> None:
    for t, words in taken:
        print(f"{time.strftime('%H:%M:%S', time.gmtime(t))} +{t - since:.0f}s {label}",
              {k: (v["word"], v["probes"], _r(v["slowdown"]), _r(v["against_others"]))
               for k, v in sorted(words.items())})


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def first_named(taken: list[tuple[float, dict]], server: str, since: float) -> float | None:
    return next((t - since for t, words in taken if server in slow_ones(words)), None)


def test_a_slowed_osd_and_a_slowed_mds_are_named(root_only):
    with CephTestbed(nodes=3, osds=3, osd_gib=16, mdss=1, pool_files=400) as bed:
        deadline = time.monotonic() + 150
        while not all(live_path(n.database).exists() for n in bed.nodes):
            assert time.monotonic() < deadline, [n.output()[-1500:] for n in bed.nodes]
            time.sleep(1)
        databases = [n.database for n in bed.nodes]
        up = time.time()
        slowing = (int(up + QUIET_MINUTES * 60) // TEN + 1) * TEN  # a whole ten begins
        quiet = readings(databases, (int(up) // 60 + 2) * 60 + 5, slowing)
        sleep_until(slowing)
        for node in bed.nodes:  # the expected values: the quiet period, warm-up left out
            rebaseline(node.config, (int(up) // 60 + 1) * 60, slowing, "quiet CephFS")
        reads = {name: row["per_op"]["data-read"]["probes"]
                 for name, row in quiet[-1][1].items()
                 if OSD.fullmatch(name) and "data-read" in row["per_op"]}
        osd = max(sorted(reads), key=reads.__getitem__)
        pid = bed.server.pid_of(osd)
        bed.slow_down(pid, QUOTA, busy=True)
        try:
            slowed = readings(databases, slowing + 65, slowing + TEN)
            osd_text = slowdown_text(databases, "servers", "--since", "1m")
            up_then = osds_up(bed)
        finally:
            bed.release(pid)
        mds_from = slowing + TEN
        sleep_until(mds_from)
        active = bed.active_mds()
        mds_pid = bed.server.pid_of(f"mds.{active}")
        bed.slow_down(mds_pid, QUOTA, busy=True)
        try:
            mds_slowed = readings(databases, mds_from + 65, mds_from + MDS_MINUTES * 60)
            mds_text = slowdown_text(databases, "servers", "--since", "1m")
            verbose = slowdown_text(databases, "-v")
        finally:
            bed.release(mds_pid)
        rss = bed.rss_mib()
    print(f"\ntestbed {bed.times}, {rss:.0f} MiB; quiet data reads per OSD {reads}; "
          f"{osd} slowed (pid {pid}), OSDs up at its end {up_then}; mds.{active} slowed")
    show("quiet", quiet, slowing - TEN)
    show(f"{osd} slowed", slowed, slowing)
    show("mds slowed", mds_slowed, mds_from)
    print(osd_text, mds_text, verbose, sep="\n")
    named_after = first_named(slowed, osd, slowing)
    mds_after = first_named(mds_slowed, "mds.0", mds_from)
    print(f"{osd} named after {named_after} s of {len(slowed)} readings; mds.0 named after "
          f"{mds_after} s of {len(mds_slowed)}; quiet readings {len(quiet)}")
    assert bed.leftovers() == []
    assert quiet and all(slow_ones(words) == [] for _, words in quiet), quiet
    assert up_then == 3, "the slowed OSD was marked down: its reads went elsewhere"
    others = [(t, s) for t, words in slowed for s in slow_ones(words)
              if OSD.fullmatch(s) and s != osd]
    assert others == [], others
    assert named_after is not None, slowed
    assert osd in slow_ones(slowed[-1][1]), slowed[-1]
    assert slowed[-1][1][osd]["per_op"]["data-read"]["word"] == "slow", slowed[-1]
    assert mds_after is not None, mds_slowed
    md = mds_slowed[-1][1]["mds.0"]
    assert md["word"] == "slow" and md["against_others"] is None, md
    assert {f["judged_against"] for f in md["per_op"].values()} == {"expected"}, md
    assert re.search(r"slow servers cephfs \(.*\): mds\.0 \d", verbose), verbose
