"""Where a byte lives, without a cluster: CephFS's striping and object hash (checked against
answers a real Ceph 16.2 cluster gave), Lustre's layouts as real ``lfs`` prints them
(tests/kit/lustre_lfs/, sources in its SOURCES.md) and the offset -> OST arithmetic."""

from __future__ import annotations

import os
import stat
import sys
import time
from pathlib import Path

import pytest

from slowdown.analysis.store.server_records import UNKNOWN
from slowdown.probe.servers import Unknown, for_mount
from slowdown.probe.servers.ceph import CephResolver
from slowdown.probe.servers.ceph_client import CephClient, CephError, from_argv, mount_of
from slowdown.probe.servers.ceph_placement import (
    FileLayout,
    object_name,
    object_number,
    object_numbers,
    parse_layout,
    pg_of,
    raw_hash,
    stable_mod,
)
from slowdown.probe.servers.lustre import (
    LustreResolver,
    parse_getdirstripe,
    parse_getstripe,
    parse_index,
    server_of,
)

LFS = Path(__file__).parent / "kit" / "lustre_lfs"
MiB = 1 << 20


def reference_object(layout: FileLayout, offset: int) -> tuple[int, int]:
    """(object, offset in it) by laying the file out unit by unit, round robin over the
    object set's objects: an independent statement of Ceph's RAID-0 file layout."""
    su, sc = layout.stripe_unit, layout.stripe_count
    per_set = sc * (layout.object_size // su)  # stripe units in one object set
    unit, within = divmod(offset, su)
    object_set, k = divmod(unit, per_set)
    return object_set * sc + k % sc, (k // sc) * su + within


def test_ceph_layout_words_parse_and_bad_ones_are_named() -> None:
    got = parse_layout("stripe_unit=4194304 stripe_count=1 object_size=4194304 "
                       "pool=cephfs_data")
    assert got == FileLayout(4 * MiB, 1, 4 * MiB, "cephfs_data", "")
    assert parse_layout("stripe_unit=65536 stripe_count=4 object_size=4194304 pool=3 "
                        "pool_namespace=ns").pool_namespace == "ns"
    with pytest.raises(ValueError, match="no pool"):
        parse_layout("stripe_unit=1 stripe_count=1 object_size=1")
    with pytest.raises(ValueError, match="not a valid layout"):
        parse_layout("stripe_unit=3 stripe_count=1 object_size=4 pool=p")


@pytest.mark.parametrize("su,sc,size", [(4 * MiB, 1, 4 * MiB), (MiB, 4, 4 * MiB),
                                        (64 << 10, 3, MiB), (MiB, 2, 8 * MiB)])
def test_ceph_object_of_an_offset_matches_the_layout_laid_out_by_hand(su, sc, size) -> None:
    layout = FileLayout(su, sc, size, "p")
    for offset in range(0, 40 * MiB, 37 << 10):
        number, inside = reference_object(layout, offset)
        assert object_number(layout, offset) == number, offset
        assert 0 <= inside < size


def test_ceph_striped_layout_by_example() -> None:
    """1 MiB units over 4 objects of 4 MiB: the first 4 MiB go to objects 0-3, the next 12 MiB
    fill them, the 17th MiB opens the next object set (object 4)."""
    layout = FileLayout(MiB, 4, 4 * MiB, "p")
    assert [object_number(layout, m * MiB) for m in range(18)] == \
        [0, 1, 2, 3] * 4 + [4, 5]
    assert object_numbers(FileLayout(64 << 10, 4, 4 * MiB, "p"), 0, MiB) == [0, 1, 2, 3]
    assert object_numbers(FileLayout(4 * MiB, 1, 4 * MiB, "p"), 3 * MiB + 4096, MiB) == [0, 1]
    assert object_name(0x10000000000, 3) == "10000000000.00000003"


def test_ceph_object_hash_and_pg_match_a_real_cluster() -> None:
    """``ceph osd map cephfs_data <object>`` on Ceph 16.2 answered these raw PGs (pool 3,
    pg_num 16)."""
    seen = {"10000000000.00000000": ("3.f0b56f30", "3.0"),
            "10000000000.00000001": ("3.53388f2a", "3.a"),
            "10000000000.00000003": ("3.131b020f", "3.f"),
            "10000000000.000003e7": ("3.8f5fc57", "3.7")}
    for name, (raw, pg) in seen.items():
        assert f"3.{raw_hash(name):x}" == raw
        assert pg_of(3, 16, name) == pg
    assert raw_hash("x", "ns") != raw_hash("x")  # a namespace is part of the key
    assert [stable_mod(x, 12, 15) for x in (3, 11, 12, 15)] == [3, 11, 4, 7]


def test_ceph_client_options_as_ceph_fuse_and_mount_fuse_ceph_pass_them() -> None:
    argv = ["ceph-fuse", "-c", "/etc/ceph/a.conf", "--id", "probe", "--keyring=/k",
            "--client_fs", "fs2", "/mnt/x"]
    assert from_argv(argv) == {"conf": "/etc/ceph/a.conf", "id": "probe", "keyring": "/k",
                               "fs": "fs2"}
    assert from_argv(["ceph-fuse", "--id=admin", "-n", "client.x", "/m"]) == \
        {"id": "admin", "name": "client.x"}
    info = ("36 25 0:40 / /mnt/ceph rw,relatime shared:1 - fuse.ceph-fuse ceph-fuse "
            "rw,user_id=0\n40 25 0:41 / /mnt/cephx rw - ceph probe@fsid.fs2=/ rw,name=probe\n")
    assert mount_of(Path("/mnt/ceph/a/b"), info)[:2] == ("/mnt/ceph", "fuse.ceph-fuse")
    assert mount_of(Path("/mnt/cephx"), info)[1:3] == ("ceph", "probe@fsid.fs2=/")


def test_resolvers_are_registered_by_fstype(tmp_path) -> None:
    assert isinstance(for_mount(tmp_path, "fuse.ceph-fuse"), CephResolver)
    assert isinstance(for_mount(tmp_path, "ceph"), CephResolver)
    assert isinstance(for_mount(tmp_path, "lustre"), LustreResolver)
    assert isinstance(for_mount(tmp_path, "ext4"), Unknown)


def test_ceph_resolver_off_cephfs_says_unknown_at_once(tmp_path) -> None:
    (tmp_path / "f").write_bytes(b"x")
    r = CephResolver(tmp_path)
    assert r.server("data-read", str(tmp_path / "f"), 0) == UNKNOWN  # no ceph.file.layout
    assert r.server("data-read", str(tmp_path / "missing"), 0) == UNKNOWN
    assert r.asked == 0  # not a CephFS mount: no question to the monitors started


def lfs(name: str) -> str:
    return (LFS / name).read_text()


def test_lustre_plain_layouts_map_offsets_to_osts() -> None:
    three = parse_getstripe(lfs("getstripe-3-stripes.txt"))
    assert [server_of(three, m * MiB) for m in range(4)] == \
        ["OST0001", "OST0006", "OST000b", "OST0001"]
    assert server_of(three, MiB // 2) == "OST0001+OST0006"  # 1 MiB across two stripes
    one = parse_getstripe(lfs("getstripe-1-stripe-raid0.txt"))
    assert {server_of(one, m * MiB) for m in range(10)} == {"OST0001"}
    two = parse_getstripe(lfs("getstripe-2-stripes-4m.txt"))
    assert [server_of(two, m * MiB) for m in (0, 3, 4, 7, 8)] == \
        ["OST0001", "OST0001", "OST0000", "OST0000", "OST0001"]


def test_lustre_pfl_components_each_their_own_raid0() -> None:
    pfl = parse_getstripe(lfs("getstripe-pfl-3-components.txt"))
    assert [(c.start, c.end) for c in pfl] == [(0, MiB), (MiB, 4 * MiB), (4 * MiB, None)]
    assert [server_of(pfl, m * MiB) for m in (0, 1, 2, 3)] == \
        ["OST0001", "OST0001", "OST0000", "OST0001"]
    assert [server_of(pfl, m * MiB) for m in (4, 6, 9)] == ["OST0000", "OST0001", "OST0000"]
    half = parse_getstripe(lfs("getstripe-pfl-uninstantiated.txt"))
    assert server_of(half, 0) == "OST0001"
    assert server_of(half, 4 * MiB) == UNKNOWN  # the second component has no objects yet


def test_lustre_directories_and_mdts() -> None:
    with pytest.raises(ValueError, match="lmm_stripe_count"):
        parse_getstripe(lfs("getstripe-d-directory-default.txt"))
    d = parse_getdirstripe(lfs("getdirstripe-2-mdts.txt"))
    assert (d.stripe_count, d.master, d.mdts) == (2, 0, (0, 1))
    assert parse_index(lfs("getstripe-M.txt")) == 0
    with pytest.raises(ValueError):
        parse_index("lfs: not a Lustre file\n")


def test_lustre_resolver_runs_lfs_once_per_path(tmp_path, monkeypatch) -> None:
    """Lustre cannot run here: an ``lfs`` on PATH that prints the transcribed outputs and
    counts its runs stands in for it."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    runs = tmp_path / "runs"
    script = bin_dir / "lfs"
    script.write_text(f"""#!{sys.executable}
import sys
open({str(runs)!r}, "a").write(" ".join(sys.argv[1:]) + "\\n")
args = sys.argv[1:]
out = {{("getstripe", "/l/data.bin"): "getstripe-3-stripes.txt",
        ("getdirstripe", "/l/md"): None,
        ("getstripe", "-m", "/l/md"): "getstripe-M.txt",
        ("getdirstripe", "/l/striped"): "getdirstripe-2-mdts.txt"}}.get(tuple(args), "missing")
if out == "missing":
    sys.stderr.write("lfs: no such file\\n"); sys.exit(2)
print("lmv_stripe_count: 0 lmv_stripe_offset: 0" if out is None
      else open({str(LFS)!r} + "/" + out).read(), end="")
""")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    r = LustreResolver(tmp_path)
    assert [r.server("data-read", "/l/data.bin", m * MiB) for m in range(3)] == \
        ["OST0001", "OST0006", "OST000b"]
    assert r.server("md-stat", "/l/md/file-1", None) == "MDT0000"
    assert r.server("md-write", "/l/md/file-9", None) == "MDT0000"
    assert r.server("md-stat", "/l/striped/file-1", None) == UNKNOWN  # by name hash
    assert r.server("data-read", "/l/gone", 0) == UNKNOWN
    assert r.server("data-read", "/l/data.bin", None) == UNKNOWN
    assert runs.read_text().count("getstripe /l/data.bin") == 1  # cached
    r.refresh()
    r.server("data-read", "/l/data.bin", 0)
    assert runs.read_text().count("getstripe /l/data.bin") == 2


def test_ceph_questions_start_at_once_and_a_failure_is_said(tmp_path) -> None:
    """The real helper under the ``ceph`` command's Python, with a configuration that names
    no cluster: starting it costs milliseconds, its failure arrives as CephError."""
    client = CephClient(str(tmp_path / "missing.conf"), "client.probe")
    t0 = time.monotonic()
    pending = client.start([{"prefix": "osd stat", "format": "json"}])
    started = time.monotonic() - t0
    assert started < 0.5
    assert pending.done(wait=30)
    with pytest.raises(CephError, match="did not answer"):
        pending.result()
