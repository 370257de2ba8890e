"""The data and metadata probes on real filesystems: ext4 (real O_DIRECT), ramfs (which
refuses O_DIRECT), tmpfs (read-only remounts), a directory on disk."""

from __future__ import annotations

import errno
import mmap
import os
import re
from pathlib import Path

import pytest

from slowdown.analysis.config import DataSize, Target
from slowdown.analysis.words import MD_OPS
from slowdown.probe.layout.manifest import ManifestError, read_manifest, write_manifest
from slowdown.probe.layout.md_status import (
    format_status,
    parse_status,
    parse_status_full,
    write_status,
)
from slowdown.probe.probes.data import DIRECT, FADVISE, DataProbe
from slowdown.probe.probes.md import MdProbe, PoolLayout
from slowdown.probe.workspaces.prepare import Workspace, prepare
from tests.kit.faultfs.mounts import run
from tests.kit.faultfs.realfs import ext4_image, ramfs, tmpfs
from tests.kit.iorkit import md_workbench

HOST = "node-a"
MIB = 1 << 20


def data_file(path: Path, mib: int) -> Path:
    with open(path, "wb") as f:
        for _ in range(mib):
            f.write(os.urandom(MIB))
    return path


def fd_flags(fd: int) -> int:
    text = Path(f"/proc/self/fdinfo/{fd}").read_text()
    return int(re.search(r"^flags:\s*([0-7]+)", text, re.MULTILINE).group(1), 8)


def hammer(probe: DataProbe, path: Path, calls: int) -> set[int]:
    """Reads and writes; the file never changes size or allocation; offsets are aligned."""
    before = os.stat(path)
    offsets = set()
    for _ in range(calls):
        offsets.add(probe.read_block())
        offsets.add(probe.write_block())
    after = os.stat(path)
    assert after.st_size == before.st_size
    assert after.st_blocks == before.st_blocks
    assert all(o % MIB == 0 and 0 <= o <= before.st_size - MIB for o in offsets)
    return offsets


# --- data probe --------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_probes_on_ext4_use_o_direct(tmp_path: Path, root_only: None) -> None:
    with ext4_image(tmp_path, 64) as point:
        target = Target(name="t", path=point / "target", data_size=DataSize(bytes=8 * MIB),
                        pool_files=400, pool_dirs=4)
        prepare(target, HOST, progress=False)
        ws = Workspace.of(target, HOST)
        with DataProbe(ws.data, seed=1) as probe:
            assert probe.mode == DIRECT and probe.blocks == 8
            assert fd_flags(probe.fileno()) & os.O_DIRECT
            # ext4 really checks O_DIRECT alignment on this descriptor:
            aligned = mmap.mmap(-1, MIB)
            with pytest.raises(OSError) as excinfo:
                os.preadv(probe.fileno(), [aligned], 512 * 3 + 1)
            assert excinfo.value.errno == errno.EINVAL
            assert len(hammer(probe, ws.data, 150)) == 8
        md = MdProbe.from_workspace(ws.dir)
        for _ in range(120):
            assert md.step().errors == {}
        assert sum(len(os.listdir(ws.pool / f"0_{d}")) for d in range(4)) == 400


@pytest.mark.timeout(60)
def test_data_probe_falls_back_to_fadvise_where_o_direct_is_refused(
        tmp_path: Path, root_only: None) -> None:
    with ramfs(tmp_path) as point:
        path = data_file(point / "data.bin", 8)
        with pytest.raises(OSError) as excinfo:
            os.close(os.open(path, os.O_RDONLY | os.O_DIRECT))
        assert excinfo.value.errno == errno.EINVAL
        with DataProbe(path, seed=2) as probe:
            assert probe.mode == FADVISE
            assert not fd_flags(probe.fileno()) & os.O_DIRECT
            assert len(hammer(probe, path, 2000)) == 8


@pytest.mark.timeout(60)
def test_data_probe_never_grows_the_file_on_tmpfs(tmp_path: Path, root_only: None) -> None:
    with tmpfs(tmp_path, 16 * MIB) as mount:
        path = data_file(mount.path / "data.bin", 5)
        with DataProbe(path, seed=3) as probe:
            # tmpfs accepts O_DIRECT since Linux 6.6; older kernels refuse it.
            release = tuple(int(x) for x in re.findall(r"\d+", os.uname().release)[:2])
            assert probe.mode == (DIRECT if release >= (6, 6) else FADVISE)
            assert len(hammer(probe, path, 2000)) == 5


@pytest.mark.timeout(30)
def test_data_probe_can_be_told_not_to_use_o_direct(tmp_path: Path) -> None:
    path = data_file(tmp_path / "data.bin", 2)
    with DataProbe(path, allow_direct=False) as probe:
        assert probe.mode == FADVISE
        assert len(hammer(probe, path, 50)) == 2


@pytest.mark.timeout(30)
def test_data_probe_ignores_a_partial_last_block(tmp_path: Path) -> None:
    path = data_file(tmp_path / "data.bin", 3)
    with open(path, "ab") as f:
        f.write(b"x" * 4096)
    with DataProbe(path) as probe:
        assert probe.blocks == 3
        hammer(probe, path, 100)


@pytest.mark.timeout(30)
def test_data_probe_errors_carry_their_errno(tmp_path: Path) -> None:
    small = tmp_path / "small.bin"
    small.write_bytes(b"x" * 4096)
    with pytest.raises(OSError) as excinfo:
        DataProbe(small)
    assert excinfo.value.errno == errno.EINVAL
    with pytest.raises(FileNotFoundError):
        DataProbe(tmp_path / "missing.bin")
    link = tmp_path / "link.bin"
    link.symlink_to(data_file(tmp_path / "real.bin", 1))
    with pytest.raises(OSError) as excinfo:
        DataProbe(link)
    assert excinfo.value.errno == errno.ELOOP

    path = data_file(tmp_path / "data.bin", 2)
    with DataProbe(path) as probe:
        os.truncate(path, 0)  # behind the probe's back
        with pytest.raises(OSError) as excinfo:
            probe.read_block()
        assert excinfo.value.errno == errno.EIO and "short read" in str(excinfo.value)


# --- md probe ----------------------------------------------------------------------------


def prepared(path: Path, files: int = 40, dirs: int = 4) -> Path:
    target = Target(name="t", path=path, data_size=DataSize(bytes=MIB), pool_files=files,
                    pool_dirs=dirs)
    prepare(target, HOST, progress=False)
    return Workspace.of(target, HOST).dir


def pool_contents(ws: Path, dirs: int = 4) -> list[set[int]]:
    return [{int(n[5:]) for n in os.listdir(ws / "md" / f"0_{d}")} for d in range(dirs)]


@pytest.mark.timeout(30)
def test_md_probe_keeps_the_pool_and_visits_every_directory(tmp_path: Path) -> None:
    ws = prepared(tmp_path / "target")
    probe = MdProbe.from_workspace(ws)
    layout = probe.layout
    heard: list[tuple[str, float | None, int]] = []
    visited = set()
    for n in range(100):  # two and a half rotations of 40 objects
        d, i = layout.oldest(probe.position)
        assert os.path.exists(layout.object_path(d, i))
        heard.clear()
        result = probe.step(on_op=lambda op, t, e: heard.append((op, t, e)))
        assert result.step == n and probe.position == n + 1
        assert result.errors == {} and result.skipped == ()
        assert set(result.latencies) == set(MD_OPS)
        assert all(0 < t < 5 for t in result.latencies.values())
        assert [h[0] for h in heard] == list(MD_OPS)
        assert [h[1] for h in heard] == [result.latencies[op] for op in MD_OPS]
        assert not os.path.exists(layout.object_path(d, i))
        assert os.path.getsize(layout.object_path(d, i + 10)) == 3901
        visited.add(d)
        assert sum(len(s) for s in pool_contents(ws)) == 40
    assert visited == {0, 1, 2, 3}
    contents = pool_contents(ws)
    for d in range(4):
        assert contents[d] == set(layout.window(100, d))
    assert contents == [set(range(25, 35))] * 4


@pytest.mark.timeout(30)
def test_md_position_survives_a_restart(tmp_path: Path) -> None:
    ws = prepared(tmp_path / "target")
    probe = MdProbe.from_workspace(ws)
    for _ in range(13):
        probe.step()
    probe.save_position()  # mid-round: md-workbench continues from the next round
    assert (ws / "md-workbench.status").read_text() == "pos: 4\nslowdown-step: 13\n"
    assert not (ws / "md-workbench.status.tmp").exists()
    again = MdProbe.from_workspace(ws)
    assert again.position == 13
    for _ in range(40):
        assert again.step().errors == {}


@pytest.mark.timeout(30)
def test_md_position_recovers_after_lost_saves(tmp_path: Path) -> None:
    ws = prepared(tmp_path / "target")
    probe = MdProbe.from_workspace(ws)
    for _ in range(27):
        probe.step()
    # The status of an older slowdown, saved once a minute: 17 steps behind after a crash.
    write_status(ws / "md-workbench.status", 10, 4)
    assert MdProbe.from_workspace(ws, recover=False).position == 10
    assert MdProbe.from_workspace(ws, max_scan=2).position == 27  # by listing the pool
    recovered = MdProbe.from_workspace(ws)  # by lstat of the next objects
    assert recovered.position == 27
    for _ in range(80):
        assert recovered.step().errors == {}
    assert sum(len(s) for s in pool_contents(ws)) == 40


def test_md_status_left_empty_by_a_power_cut_counts_as_none(tmp_path: Path) -> None:
    ws = prepared(tmp_path / "target")
    probe = MdProbe.from_workspace(ws)
    for _ in range(9):
        probe.step()
    (ws / "md-workbench.status").write_bytes(b"")
    again = MdProbe.from_workspace(ws)  # from the MANIFEST's position, to the first object
    assert again.position == 9
    assert all(again.step().errors == {} for _ in range(40))


def test_md_status_names_a_round_md_workbench_can_continue_from(tmp_path: Path) -> None:
    """Written at a start and at the end of each round (once per round), never between."""
    ws = prepared(tmp_path / "target")
    status = ws / "md-workbench.status"
    probe = MdProbe.from_workspace(ws)
    seen = []
    for k in range(12):
        before = status.stat().st_mtime_ns, status.stat().st_ino
        probe.step()
        text = status.read_text()
        seen.append(text)
        layout = probe.layout
        pos = int(text.split()[1])
        for d in range(4):  # every data set holds md-workbench's next object
            assert os.path.exists(layout.object_path(d, pos))
        if k and k % 4 != 3:  # written at the start, then at the end of each round
            assert (status.stat().st_mtime_ns, status.stat().st_ino) == before
    assert seen[0] == "pos: 1\nslowdown-step: 0\n"
    assert seen[4] == "pos: 2\nslowdown-step: 4\n"
    assert len(set(seen)) == 4  # after steps 0, 3, 7 and 11


@pytest.mark.timeout(30)
def test_md_recovery_of_an_empty_pool_keeps_the_position(tmp_path: Path) -> None:
    ws = prepared(tmp_path / "target")
    for d in range(4):
        for name in os.listdir(ws / "md" / f"0_{d}"):
            os.unlink(ws / "md" / f"0_{d}" / name)
    probe = MdProbe.from_workspace(ws, max_scan=8)
    assert probe.position == 0
    for _ in range(40):
        result = probe.step()
        assert result.errors.get("md-stat") == errno.ENOENT
    assert sum(len(s) for s in pool_contents(ws)) == 40  # healed in one rotation
    assert all(probe.step().errors == {} for _ in range(40))


@pytest.mark.timeout(30)
def test_md_probe_heals_a_missing_object(tmp_path: Path) -> None:
    ws = prepared(tmp_path / "target")
    probe = MdProbe.from_workspace(ws)
    for _ in range(5):
        probe.step()
    d, i = probe.layout.oldest(probe.position)
    os.unlink(probe.layout.object_path(d, i))
    heard: list[tuple[str, float | None, int]] = []
    result = probe.step(on_op=lambda op, t, e: heard.append((op, t, e)))
    assert result.errors == {"md-stat": errno.ENOENT}  # one failed op, as md-workbench counts
    assert result.skipped == ("md-read", "md-delete")
    assert set(result.latencies) == {"md-stat", "md-write"}
    assert [(op, e) for op, _, e in heard] == [
        ("md-stat", errno.ENOENT), ("md-read", 0), ("md-delete", 0), ("md-write", 0)]
    assert heard[1][1] is None and heard[2][1] is None
    assert os.path.getsize(probe.layout.object_path(d, i + 10)) == 3901
    assert sum(len(s) for s in pool_contents(ws)) == 40


@pytest.mark.timeout(30)
def test_md_probe_records_errnos_on_a_read_only_filesystem(tmp_path: Path,
                                                           root_only: None) -> None:
    with tmpfs(tmp_path, 32 * MIB) as mount:
        ws = prepared(mount.path / "target")
        probe = MdProbe.from_workspace(ws)
        probe.step()
        run(["mount", "-o", "remount,ro", str(mount.path)])
        try:
            result = probe.step()
        finally:
            run(["mount", "-o", "remount,rw", str(mount.path)])
        assert result.errors == {"md-delete": errno.EROFS, "md-write": errno.EROFS}
        assert set(result.latencies) == set(MD_OPS)
        assert probe.position == 2
        assert probe.stale == 1
        assert probe.step().errors == {}  # and the stale object goes, untimed
        assert probe.stale == 0
        assert sum(len(s) for s in pool_contents(ws)) == 39  # file-1 of 0_1 never came
        for _ in range(38):
            assert probe.step().errors == {}
        result = probe.step()  # reaches the object the read-only step could not create
        assert result.step == 41 and result.errors["md-stat"] == errno.ENOENT
        assert sum(len(s) for s in pool_contents(ws)) == 40  # healed
        for _ in range(40):
            assert probe.step().errors == {}


@pytest.mark.timeout(30)
def test_md_probe_refuses_an_unfinished_or_missing_workspace(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="no MANIFEST"):
        MdProbe.from_workspace(tmp_path)
    ws = prepared(tmp_path / "target")
    manifest = read_manifest(ws)
    manifest.complete = False
    write_manifest(ws, manifest)
    with pytest.raises(ManifestError, match="did not finish"):
        MdProbe.from_workspace(ws)


# --- interplay with md-workbench -----------------------------------------------------------


@pytest.mark.timeout(60)
def test_md_workbench_and_the_probe_take_turns_on_one_pool(tmp_path: Path) -> None:
    ws = prepared(tmp_path / "target")
    status = ws / "md-workbench.status"
    probe = MdProbe.from_workspace(ws)
    for _ in range(8):  # two whole rounds
        probe.step()
    probe.save_position()
    assert md_workbench(ws, 4, 10, 3901, 3)[0] == 0  # -X: slowdown's objects verify
    probe = MdProbe.from_workspace(ws)
    assert probe.position == (2 + 3) * 4
    for _ in range(10):  # stop mid-round (a crash): step 30, the status says round 8
        assert probe.step().errors == {}
    assert status.read_text().startswith("pos: 8\n")
    errors, out = md_workbench(ws, 4, 10, 3901, 2)
    assert errors == 0, out
    # md-workbench left file-7 behind in the two data sets the round had not reached, and
    # never created their file-17: the next start removes the one and fills the other.
    assert [7 in s for s in pool_contents(ws)] == [False, False, True, True]
    probe = MdProbe.from_workspace(ws)
    assert probe.position == 10 * 4
    assert pool_contents(ws) == [set(range(10, 20))] * 4
    for _ in range(60):
        assert probe.step().errors == {}
    assert sum(len(s) for s in pool_contents(ws)) == 40
    probe.finish_round()  # a clean stop: the exact round, nothing left over
    assert md_workbench(ws, 4, 10, 3901, 12)[0] == 0


# --- formats -----------------------------------------------------------------------------


def test_status_file_format_matches_md_workbench() -> None:
    assert format_status(13, 4) == b"pos: 3\nslowdown-step: 13\n"
    assert parse_status(b"pos: 3\nslowdown-step: 13\n", 4) == 13
    assert parse_status(b"pos: 5\n", 4) == 20  # written by md-workbench
    assert parse_status(b"pos:5", 4) == 20  # fscanf("pos: %d") accepts it too
    assert parse_status(b"pos: 5\nslowdown-step: 13\n", 4) == 20  # md-workbench moved on
    assert parse_status(b"pos: 4\nslowdown-step: 13\n", 4) == 13  # ours, written mid-round
    assert parse_status_full(b"pos: 4\nslowdown-step: 13\n", 4).ours
    assert not parse_status_full(b"pos: 4\n", 4).ours
    assert format_status(13, 4, pos=4) == b"pos: 4\nslowdown-step: 13\n"
    for bad in (b"", b"position: 3\n", b"pos: -1\n", b"pos: x\n"):
        with pytest.raises(ManifestError):
            parse_status(bad, 4)


def test_pool_layout_names_objects_like_md_workbench(tmp_path: Path) -> None:
    layout = PoolLayout(tmp_path / "md", dirs=10, per_dir=10000, object_size=3901)
    assert layout.object_path(3, 42) == f"{tmp_path}/md/0_3/file-42"
    assert layout.oldest(0) == (0, 0) and layout.oldest(9) == (9, 0)
    assert layout.oldest(10) == (0, 1) and layout.oldest(123) == (3, 12)
    assert layout.window(123, 2) == range(13, 10013)
    assert layout.window(123, 3) == range(12, 10012)
