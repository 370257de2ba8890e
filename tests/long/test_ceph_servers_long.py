"""The CephFS resolver as the cluster changes, on the real CephFS testbed (opt-in, ``--long``;
root; about 2 minutes):

- an OSD marked out: the PGs it was primary of get another primary and a new osdmap epoch;
  the resolver sees the epoch change and names the new primary, as ``ceph osd map`` does;
- two active MDS ranks: a directory pinned to rank 1 (``ceph.dir.pin``, set by the admin)
  gives ``mds.1`` for md ops in it and below, an unpinned one ``unknown``; the client's own
  cache (its admin socket's ``dump_cache``) shows rank 1 holding the entries;
- what the lookups cost: the CPU of the resolver's monitor questions, per file mapped.

    python -m pytest --long -s tests/long/test_ceph_servers_long.py
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import time

import pytest

from slowdown.analysis.store.server_records import UNKNOWN
from slowdown.probe.servers import ceph
from slowdown.probe.servers.ceph_placement import object_name
from tests.kit.cephservers import admin_map, fuse_mount, settled, wait_subtree, write_file
from tests.kit.testbed.cephbed import CephTestbed

pytestmark = [pytest.mark.root, pytest.mark.timeout(900)]

MiB = 1 << 20


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def test_osd_out_and_pinned_ranks(root_only, monkeypatch):
    with CephTestbed(nodes=0, osds=3, osd_gib=16) as bed, \
            fuse_mount(bed, "admin", "admin") as admin, \
            fuse_mount(bed, "probe", "probe") as mount:
        path = mount / "data.bin"
        write_file(path, 64)
        resolver = ceph.CephResolver(mount)
        cpu0, t0 = children_cpu(), time.monotonic()
        named = [settled(resolver, "data-read", str(path), m * MiB) for m in range(64)]
        cost = (children_cpu() - cpu0, time.monotonic() - t0, resolver.asked)
        ino = os.stat(path).st_ino
        obj = object_name(ino, 0)
        before = admin_map(bed, obj)
        assert named[0] == f"osd.{before['acting_primary']}"
        monkeypatch.setattr(ceph, "EPOCH_EVERY", 1.0)
        bed.server.ceph("osd", "out", str(before["acting_primary"]))
        deadline = time.monotonic() + 120
        while admin_map(bed, obj)["acting_primary"] == before["acting_primary"]:
            assert time.monotonic() < deadline, "the PG kept its primary"
            time.sleep(1)
        after = admin_map(bed, obj)
        t1, moved = time.monotonic(), named[0]
        while moved != f"osd.{after['acting_primary']}" and time.monotonic() - t1 < 30:
            moved = resolver.server("data-read", str(path), 0)  # old, unknown, then new
            resolver.wait(0.2)
        followed = time.monotonic() - t1

        bed.server.ceph("fs", "set", "cephfs", "max_mds", "2")
        bed.server.wait_mds(active=2, standby=0, timeout=120)
        (admin / "pinned" / "sub").mkdir(parents=True)
        (admin / "free").mkdir()
        os.setxattr(admin / "pinned", "ceph.dir.pin", b"1")
        waited = wait_subtree(bed, 1, "/pinned")
        (mount / "pinned" / "sub" / "file-1").write_bytes(b"x")
        resolver.refresh()
        ranks = {d: settled(resolver, "md-stat", str(mount / d / "file-1"), None)
                 for d in ("pinned", "pinned/sub")}
        ranks["free"] = resolver.server("md-stat", str(mount / "free" / "file-1"), None)
        cache = json.loads(subprocess.run(
            ["ceph", "--admin-daemon", str(bed.ledger.base / "run" / "fuse-probe.asok"),
             "dump_cache"], capture_output=True, text=True, check=True, timeout=60).stdout)
        held = {e.get("path"): e.get("auth_cap") for e in cache["cache"] if "auth_cap" in e}
    print(f"\n64 MiB mapped: {cost[0]:.2f} s CPU in the resolver's {cost[2]} monitor "
          f"questions, {cost[1]:.2f} s; primary {before['acting_primary']} -> "
          f"{after['acting_primary']} (epoch {before['epoch']} -> {after['epoch']}), followed in "
          f"{followed:.1f} s; "
          f"pin moved in {waited:.0f} s; ranks {ranks}; testbed {bed.times}")
    assert moved == f"osd.{after['acting_primary']}"
    assert ranks == {"pinned": "mds.1", "pinned/sub": "mds.1", "free": UNKNOWN}
    assert held.get("#0x1/pinned/sub/file-1") == 1, held
    assert bed.leftovers() == []
