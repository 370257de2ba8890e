"""GlusterFS's resolver: a file's ``glusterfs.pathinfo`` parsed into its brick or replica set.

The answers below were read with ``getfattr --only-values -n glusterfs.pathinfo`` on the
GlusterFS 10.3 testbed (tests/kit/testbed/gluster.py): a distribute volume of four bricks and a
2 x 2 distribute-replicate one. The resolver's lookups run on a real tmpfs file: with the
attribute name GlusterFS answers, tmpfs has no such attribute (``unknown``); the cache and its
refresh are checked through a ``user.`` attribute that holds a real answer.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from slowdown.analysis.store.server_records import UNKNOWN
from slowdown.probe.probes import Place
from slowdown.probe.probes.where import Where
from slowdown.probe.servers import REFRESH_EVERY, Unknown, for_mount, gluster
from slowdown.probe.servers.gluster import GlusterResolver, bricks_of
from tests.kit.faultfs.realfs import tmpfs

D = "/var/tmp/sdtb26648f14ff3"  # the distribute volume's bricks
R = "/var/tmp/sdtb306996f7e26"  # the distribute-replicate volume's
DIST_FILE_1 = (f"(<DISTRIBUTE:sdtb26648f14ff3-dht> <POSIX({D}/brick4/brick):vm:{D}/brick4/brick"
               "/d1/file-1>)")
DIST_FILE_2 = (f"(<DISTRIBUTE:sdtb26648f14ff3-dht> <POSIX({D}/brick1/brick):vm:{D}/brick1/brick"
               "/d1/file-2>)")
DIST_DIR = (
    f"((<DISTRIBUTE:sdtb26648f14ff3-dht> <POSIX({D}/brick4/brick):vm:{D}/brick4/brick/d1> "
    f"<POSIX({D}/brick3/brick):vm:{D}/brick3/brick/d1> <POSIX({D}/brick1/brick):vm:{D}/brick1/"
    f"brick/d1> <POSIX({D}/brick2/brick):vm:{D}/brick2/brick/d1>) (sdtb26648f14ff3-dht-layout "
    "(sdtb26648f14ff3-client-2 0 1073741822) (sdtb26648f14ff3-client-3 1073741823 2147483645) "
    "(sdtb26648f14ff3-client-0 2147483646 3221225468) (sdtb26648f14ff3-client-1 3221225469 "
    "4294967295)))")
REP_FILE_1 = (
    f"(<DISTRIBUTE:sdtb306996f7e26-dht> (<REPLICATE:sdtb306996f7e26-replicate-0> <POSIX({R}/"
    f"brick2/brick):vm:{R}/brick2/brick/d1/file-1> <POSIX({R}/brick1/brick):vm:{R}/brick1/brick"
    "/d1/file-1>))")
REP_FILE_2 = (
    f"(<DISTRIBUTE:sdtb306996f7e26-dht> (<REPLICATE:sdtb306996f7e26-replicate-1> <POSIX({R}/"
    f"brick3/brick):vm:{R}/brick3/brick/d1/file-2> <POSIX({R}/brick4/brick):vm:{R}/brick4/brick"
    "/d1/file-2>))")
REP_DIR = (
    f"((<DISTRIBUTE:sdtb306996f7e26-dht> (<REPLICATE:sdtb306996f7e26-replicate-0> <POSIX({R}/"
    f"brick2/brick):vm:{R}/brick2/brick/d1> <POSIX({R}/brick1/brick):vm:{R}/brick1/brick/d1>) "
    f"(<REPLICATE:sdtb306996f7e26-replicate-1> <POSIX({R}/brick4/brick):vm:{R}/brick4/brick/d1>"
    f" <POSIX({R}/brick3/brick):vm:{R}/brick3/brick/d1>)) (sdtb306996f7e26-dht-layout "
    "(sdtb306996f7e26-replicate-0 0 2147483646) (sdtb306996f7e26-replicate-1 2147483647 "
    "4294967295)))")


def test_a_distributed_file_is_its_one_brick():
    assert bricks_of(DIST_FILE_1) == f"vm:{D}/brick4/brick"
    assert bricks_of(DIST_FILE_2) == f"vm:{D}/brick1/brick"


def test_a_replicated_file_is_its_replica_set_sorted_and_joined():
    assert bricks_of(REP_FILE_1) == f"vm:{R}/brick1/brick+vm:{R}/brick2/brick"
    assert bricks_of(REP_FILE_2) == f"vm:{R}/brick3/brick+vm:{R}/brick4/brick"


@pytest.mark.parametrize("answer", [DIST_DIR, REP_DIR, "", "(<DISTRIBUTE:v-dht>)",
                                    "POSIX(/b):host:/b/f", "garbage"])
def test_a_directory_or_an_answer_without_a_brick_is_unknown(answer):
    assert bricks_of(answer) == UNKNOWN


def test_glusterfs_mounts_get_the_gluster_resolver_and_others_none(tmp_path):
    assert isinstance(for_mount(tmp_path, "fuse.glusterfs"), GlusterResolver)
    for other in ("ext4", "fuse.sshfs", "tmpfs", None):
        assert type(for_mount(tmp_path, other)) is Unknown
        assert for_mount(tmp_path, other).server("md-stat", str(tmp_path), None) == UNKNOWN


def test_a_file_without_the_attribute_or_gone_is_unknown(tmp_path):
    with tmpfs(tmp_path, 1 << 20) as fs:
        path = Path(os.fspath(fs)) / "file-1"
        path.write_bytes(b"x")
        resolver = GlusterResolver(Path(os.fspath(fs)))
        assert resolver.server("md-stat", str(path), None) == UNKNOWN
        assert resolver.server("md-delete", str(path.with_name("gone")), None) == UNKNOWN
        assert resolver.server("md-stat", str(path.parent), None) == UNKNOWN


def test_an_answer_is_kept_per_path_until_refresh(tmp_path, monkeypatch):
    monkeypatch.setattr(gluster, "NAMES", ("user.glusterfs.pathinfo",))
    with tmpfs(tmp_path, 1 << 20) as fs:
        root = Path(os.fspath(fs))
        one, two = root / "file-1", root / "file-2"
        for path, answer in ((one, DIST_FILE_1), (two, DIST_FILE_2)):
            path.write_bytes(b"x")
            os.setxattr(path, "user.glusterfs.pathinfo", answer.encode() + b"\0")
        resolver = GlusterResolver(root)
        assert resolver.server("data-read", str(one), 1 << 20) == f"vm:{D}/brick4/brick"
        assert resolver.server("md-stat", str(two), None) == f"vm:{D}/brick1/brick"
        os.setxattr(one, "user.glusterfs.pathinfo", REP_FILE_1.encode())  # the layout moved
        assert resolver.server("data-read", str(one), 0) == f"vm:{D}/brick4/brick"  # cached
        one.unlink()  # md-delete's object: its server was learnt before
        assert resolver.server("md-delete", str(one), None) == f"vm:{D}/brick4/brick"
        resolver.refresh()
        assert resolver.server("md-delete", str(one), None) == UNKNOWN
        two.write_bytes(b"y")
        os.setxattr(two, "user.glusterfs.pathinfo", REP_FILE_2.encode())
        assert resolver.server("md-write", str(two), None) == \
            f"vm:{R}/brick3/brick+vm:{R}/brick4/brick"


def test_where_looks_at_the_mount_again_and_refreshes_at_most_every_refresh_every(tmp_path):
    now = [0.0]
    with tmpfs(tmp_path, 1 << 20) as fs:
        root = Path(os.fspath(fs))
        where = Where(root, clock=lambda: now[0])
        assert where.server("md-stat", None) == UNKNOWN  # no place: never asked
        assert where.server("md-stat", Place(str(root))) == UNKNOWN
        chosen = where._resolver
        assert type(chosen) is Unknown and where._fstype == "tmpfs"
        now[0] = REFRESH_EVERY - 1
        where.server("md-stat", Place(str(root)))
        assert where._resolver is chosen and where._at == 0.0
        now[0] = REFRESH_EVERY + 1
        where.server("md-stat", Place(str(root)))
        assert where._at == REFRESH_EVERY + 1 and where._fstype == "tmpfs"
