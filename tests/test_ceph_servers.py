"""The CephFS resolver on a real cluster (the CephFS testbed: 3 OSDs, an active and a
standby MDS, the client key ``ceph fs authorize`` makes): for files of several objects, a
plain layout and a striped one (stripe_count 3), every MiB's object and primary OSD as the
resolver names them are those ``ceph osd map`` gives the admin, the object exists
(``rados stat``) and holds the file's bytes; md ops name mds.0; a path that is not there, and
then a killed monitor, give ``unknown`` within a bound; the resolver run as another user
(the service runs as its own) answers the same, and ``unknown`` with a key it cannot read.
About 1 minute."""

from __future__ import annotations

import os
import time

import pytest

from slowdown.analysis.store.server_records import UNKNOWN
from slowdown.probe.servers import for_mount
from slowdown.probe.servers.ceph import CephResolver
from slowdown.probe.servers.ceph_placement import object_name
from tests.kit.cephservers import (
    admin_map,
    as_nobody,
    fuse_mount,
    object_bytes,
    place,
    settled,
    write_file,
)
from tests.kit.testbed.cephbed import CephTestbed

pytestmark = [pytest.mark.root, pytest.mark.slow, pytest.mark.testbed,
              pytest.mark.timeout(420)]

MiB = 1 << 20
STRIPED = (MiB, 3, 4 * MiB)  # stripe unit, stripe count, object size


def test_data_ops_name_the_primary_osd_md_ops_the_rank_and_failures_unknown(root_only,
                                                                            tmp_path):
    with CephTestbed(nodes=0, osds=3, osd_gib=16) as bed, \
            fuse_mount(bed, "admin", "admin") as admin, \
            fuse_mount(bed, "probe", "probe") as mount:
        (admin / "striped").mkdir()
        os.setxattr(admin / "striped", "ceph.dir.layout",
                    b"stripe_unit=%d stripe_count=%d object_size=%d" % STRIPED)
        (mount / "plain").mkdir()
        files = {mount / "plain" / "data.bin": ((4 * MiB, 1, 4 * MiB), write_file(
                     mount / "plain" / "data.bin", 22)),
                 mount / "striped" / "data.bin": (STRIPED, write_file(
                     mount / "striped" / "data.bin", 26))}
        resolver = for_mount(mount, "fuse.ceph-fuse")
        assert isinstance(resolver, CephResolver)
        t0 = time.monotonic()
        checked, objects = 0, set()
        for path, (layout, data) in files.items():
            ino = os.stat(path).st_ino
            for mib in range(len(data) // MiB):
                offset = mib * MiB
                got = settled(resolver, "data-read", str(path), offset)
                number, inside = place(layout, offset)
                obj = object_name(ino, number)
                truth = admin_map(bed, obj)
                assert got == f"osd.{truth['acting_primary']}", (path, offset, obj, truth)
                if obj not in objects:  # the object is there and holds the file's bytes
                    held = object_bytes(bed, obj, tmp_path / obj)
                    assert held[inside:inside + 4096] == data[offset:offset + 4096], obj
                objects.add(obj)
                checked += 1
        first_lookups = time.monotonic() - t0
        resolver_first = resolver.server("data-read", str(mount / "plain" / "data.bin"), 0)
        asked = resolver.asked
        assert settled(resolver, "md-stat", str(mount / "plain" / "data.bin"), None) == "mds.0"
        assert resolver.server("md-write", str(mount / "plain" / "file-1"), None) == "mds.0"
        t1 = time.monotonic()
        assert resolver.server("data-read", str(mount / "plain" / "missing"), 0) == UNKNOWN
        missing = time.monotonic() - t1
        plain = str(mount / "plain" / "data.bin")
        os.chmod(bed.ledger.base, 0o755)  # the service's own user reads the conf and key
        user = as_nobody(lambda: settled(CephResolver(mount), "data-read", plain, 0))
        keyring = bed.ledger.base / "keys" / "client.probe.keyring"
        keyring.chmod(0o600)  # a key only root may read
        locked_out = as_nobody(lambda: settled(CephResolver(mount), "data-read", plain, 0, 12))
        keyring.chmod(0o644)
        bed.server.ceph("osd", "set", "noout")  # a new osdmap epoch
        os.kill(bed.server.pid_of("mon.a"), 9)
        fresh = CephResolver(mount)
        t2 = time.monotonic()
        without_mon = fresh.server("data-read", plain, 0)  # a question started, not waited for
        first_try = time.monotonic() - t2
        fresh.wait(30)
        failed_after = time.monotonic() - t2
        t3 = time.monotonic()
        again = [fresh.server("data-read", plain, 0), fresh.server("md-stat", plain, None)]
        second_try = time.monotonic() - t3
        cached = resolver.server("data-read", plain, 0)
    print(f"\n{checked} offsets in {len(objects)} objects checked; the resolver asked the "
          f"monitors {asked} times ({first_lookups:.1f} s with the checks); a missing path "
          f"{missing * 1000:.0f} ms; a killed monitor: unknown in {first_try * 1000:.0f} ms, "
          f"its question failed after {failed_after:.1f} s, then unknown in "
          f"{second_try * 1000:.1f} ms asking nothing; testbed {bed.times}")
    print(f"as nobody: {user}; with a key it cannot read: {locked_out}")
    assert checked == 48 and len(objects) == 6 + 8
    assert user == resolver_first and locked_out == UNKNOWN
    assert asked <= 4  # the epochs, the pools, one batch per file
    assert missing < 1.0
    assert (without_mon, again) == (UNKNOWN, [UNKNOWN, UNKNOWN])
    assert first_try < 0.5 and failed_after < 15 and second_try < 0.1
    assert (fresh.asked, fresh.failures) == (1, 1)  # then the back-off: no question
    assert cached.startswith("osd.")  # what it knew stays until the map is seen to change
    assert bed.leftovers() == []
