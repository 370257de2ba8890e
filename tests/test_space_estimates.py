"""prepare's free space and inode estimates, per filesystem: what statvfs cannot tell (CephFS's
-1 free inodes, 0 of 0) is not checked and is said, never taken for "none free"; a small file
costs f_frsize in general and, on CephFS (known by its mount type, not by its numbers), its
bytes in 4 KiB units and 4 KiB more, not the 4 MiB object size statvfs names there (prepare
refused every ceph-fuse mount: "not enough free inodes ... -1 free", then "390.99GiB to write,
9.21GiB free" for 100,000 files). The numbers are those a ceph-fuse mount of Ceph 16.2 gave.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from slowdown.analysis.cli.output import space_notes
from slowdown.probe.layout.errors import NoSpaceError
from slowdown.probe.layout.fs_counts import free_inodes
from slowdown.probe.workspaces.space import allocation, check_space, estimate
from tests.kit.faultfs import FaultFS
from tests.kit.workerkit import Worker, workspace

MIB = 1 << 20
OBJECT = 4 * MIB


def statvfs(*, bsize: int = OBJECT, frsize: int = OBJECT, blocks: int = 4791,
            avail: int = 4791, files: int = 1, favail: int = -1) -> os.statvfs_result:
    """statvfs numbers as a ceph-fuse mount gives them (18.7 GiB free of a 60 GiB cluster
    with 3 replicas; one file in use; free inodes unknown)."""
    return os.statvfs_result((bsize, frsize, blocks, avail, avail, files, favail, favail,
                              4102, 255))


def mountinfo(tmp_path: Path, fstype: str) -> Path:
    """A mountinfo that names the device of `tmp_path` a mount of type `fstype`."""
    st = os.stat(tmp_path)
    path = tmp_path / f"mountinfo-{fstype}"
    path.write_text(f"42 27 {os.major(st.st_dev)}:{os.minor(st.st_dev)} / {tmp_path} "
                    f"rw,nosuid,nodev,relatime - {fstype} {fstype} rw\n")
    return path


def test_unknown_free_inodes_are_unknown_not_none() -> None:
    assert free_inodes(statvfs()) is None  # ceph-fuse: -1 free beside 1 file in use
    assert free_inodes(statvfs(files=100_000, favail=(1 << 64) - 1)) is None  # unsigned
    assert free_inodes(statvfs(files=0, favail=0)) is None  # 0 of 0
    assert free_inodes(statvfs(files=1000, favail=0)) == 0  # a full table: none free
    assert free_inodes(statvfs(files=1000, favail=250)) == 250


def test_a_reader_shows_no_inode_use_where_the_count_said_unknown() -> None:
    """A live state written before the worker knew CephFS's -1 read "inodes 200% used (-1
    free)" on the slowdown line."""
    def service(files_free: int, files: int) -> SimpleNamespace:
        return SimpleNamespace(probes={"ceph": {"space": {
            "bytes_free": 9 << 30, "bytes": 18 << 30, "files_free": files_free,
            "files": files}}})

    assert space_notes([service(-1, 1), service(-1, 100_000)], "ceph") == []
    assert space_notes([service(5, 1000)], "ceph") == ["inodes 99.5% used (5 free)"]


@pytest.mark.parametrize("fstype", ["fuse.ceph-fuse", "ceph"])
def test_on_cephfs_a_small_file_costs_its_bytes_not_an_object(tmp_path: Path,
                                                               fstype: str) -> None:
    info = mountinfo(tmp_path, fstype)
    alloc = allocation(tmp_path, statvfs(), info)
    assert (alloc.unit, alloc.fstype) == (4096, fstype)
    need_bytes, need_inodes = estimate(tmp_path, 1280 * MIB, 100_000, 3901, 13, statvfs(), info)
    assert need_bytes == 1280 * MIB + 100_000 * 8192 + 13 * 8192  # 2.01 GiB, was 391.93 GiB
    assert need_inodes == 100_016
    notes = check_space(tmp_path, need_bytes, need_inodes, statvfs())
    assert notes == [f"{tmp_path}: free inodes not checked (100,016 to create): the filesystem "
                     "does not say how many are free (statvfs: -1 free of 1)"]


def test_elsewhere_a_small_file_costs_f_frsize(tmp_path: Path) -> None:
    """The same numbers from a mount not known as CephFS: the generic rule, whole blocks of
    f_frsize, refuses what does not fit."""
    info = mountinfo(tmp_path, "fuse.other")
    need_bytes, _ = estimate(tmp_path, 1280 * MIB, 100_000, 3901, 13, statvfs(), info)
    assert need_bytes == 1280 * MIB + 100_013 * OBJECT
    with pytest.raises(NoSpaceError, match=r"391\.93GiB to write"):
        check_space(tmp_path, need_bytes, 100_016, statvfs())
    ext4 = statvfs(bsize=4096, frsize=4096, blocks=1 << 20, avail=1 << 19, files=1 << 16,
                   favail=1 << 15)
    assert estimate(tmp_path, 0, 10, 3901, 2, ext4, mountinfo(tmp_path, "ext4")) == (
        12 * 4096, 15)
    with pytest.raises(NoSpaceError, match="not enough free inodes"):  # a count is a count
        check_space(tmp_path, 4096, 1 << 15, ext4)


def test_a_mount_not_found_falls_back_to_f_frsize(tmp_path: Path) -> None:
    empty = tmp_path / "mountinfo"
    empty.write_text("")
    assert allocation(tmp_path, statvfs(), empty).unit == OBJECT
    assert allocation(tmp_path, statvfs(), tmp_path / "none").unit == OBJECT


def test_no_size_at_all_is_said_not_checked(tmp_path: Path) -> None:
    ramfs = statvfs(bsize=4096, frsize=4096, blocks=0, avail=0, files=0, favail=0)
    notes = check_space(tmp_path, 5 * MIB, 30, ramfs)
    assert [n.split(": ", 1)[1] for n in notes] == [
        "free space not checked (5MiB to write): the filesystem reports no size (statvfs: 0 "
        "blocks)",
        "free inodes not checked (30 to create): the filesystem does not say how many are free "
        "(statvfs: 0 free of 0)"]


CEPH_FUSE = {"f_bsize": OBJECT, "f_frsize": OBJECT, "f_blocks": 64, "f_bfree": 40,
             "f_bavail": 40, "f_files": 1, "f_ffree": -1, "f_favail": -1}


@pytest.mark.root
@pytest.mark.timeout(120)
def test_prepare_and_the_worker_on_a_mount_that_answers_as_ceph_fuse(tmp_path: Path) -> None:
    """A real FUSE mount of type fuse.ceph-fuse that says what ceph-fuse says (4 MiB blocks,
    160 MiB free, -1 free inodes): `slowdown-probe prepare` makes the workspace and says what
    it could not check; by the generic rule 400 objects would need 1.56 GiB. The worker then
    reports no inode count, and a reader shows no inode use."""
    with FaultFS(tmp_path / "backing", tmp_path / "mnt", subtype="ceph-fuse",
                 statfs=CEPH_FUSE) as fs:
        sv = os.statvfs(fs.mountpoint)
        assert (sv.f_favail, sv.f_bsize, sv.f_frsize) == (-1, OBJECT, OBJECT)
        config = tmp_path / "slowdown.toml"
        config.write_text(
            f'host = "n1"\ndatabase = "{tmp_path / "n1.db"}"\n[[target]]\nname = "ceph"\n'
            f'path = "{fs.mountpoint / "probe"}"\ndata_size = "16MiB"\nwrite_size = "4MiB"\n'
            'pool_files = 400\npool_dirs = 4\n')
        (fs.mountpoint / "probe").mkdir()
        done = subprocess.run(["slowdown-probe", "--config", str(config), "prepare"],
                              capture_output=True, text=True, timeout=90)
        out = done.stdout + done.stderr
        assert done.returncode == 0, out
        assert "ceph: created" in out and "free inodes not checked (411 to create)" in out, out
        ws = fs.mountpoint / "probe" / ".slowdown" / "n1"
        assert len(list((ws / "md").rglob("file-*"))) == 400
        other = mountinfo(tmp_path, "fuse.other")  # the same numbers elsewhere: refused
        with pytest.raises(NoSpaceError, match=r"1\.61GiB to write"):
            check_space(ws, *estimate(ws, 20 * MIB, 400, 3901, 6, mountinfo=other))
        worker = Worker(workspace(fs.mountpoint / "w"))
        try:
            worker.tick(1)
            (end,) = [m for m in worker.run(30) if m.get("end")]
        finally:
            worker.close()
        assert end["space"] == {"bytes_free": 40 * OBJECT, "bytes": 64 * OBJECT,
                                "files_free": None, "files": None}, json.dumps(end)
