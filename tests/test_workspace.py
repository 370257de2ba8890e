"""Workspace prepare and cleanup on real filesystems: a directory on disk, tmpfs, ext4.

Interruptions are real: prepare runs in a child process that is SIGKILLed mid-way.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from slowdown.analysis.config import DataSize, Target
from slowdown.probe.layout.errors import (
    ForeignWorkspaceError,
    NoSpaceError,
    UnsafePathError,
    WorkspaceError,
)
from slowdown.probe.layout.manifest import read_manifest, write_manifest
from slowdown.probe.layout.path_safety import check_target_path
from slowdown.probe.probes.md import MdProbe
from slowdown.probe.probes.worker import Probes
from slowdown.probe.workspaces.cleanup import cleanup
from slowdown.probe.workspaces.data_file import STAMP_MAGIC
from slowdown.probe.workspaces.prepare import Workspace, prepare
from tests.kit.faultfs.realfs import ext4_image, tmpfs
from tests.kit.workspacekit import HOST, MIB, kill_when, make_target, tree


def all_stamped(path: Path) -> bool:
    data = np.fromfile(path, dtype=np.uint64)
    return bool(np.all(data[:: 4096 // 8] == STAMP_MAGIC))


def assert_complete(ws: Path, target: Target) -> None:
    data = ws / "data.bin"
    assert data.stat().st_size == target.data_size.bytes
    assert all_stamped(data)
    per_dir = target.pool_files // target.pool_dirs
    assert sorted(os.listdir(ws / "md")) == sorted(f"0_{d}" for d in range(target.pool_dirs))
    for d in range(target.pool_dirs):
        names = os.listdir(ws / "md" / f"0_{d}")
        assert sorted(names) == sorted(f"file-{i}" for i in range(per_dir))
        for name in names:
            assert os.lstat(ws / "md" / f"0_{d}" / name).st_size == target.object_size
    manifest = read_manifest(ws)
    assert manifest is not None and manifest.complete


@pytest.fixture
def root_only() -> None:
    if os.geteuid() != 0:
        pytest.fail("mounts need root; run the suite as root (CI does)", pytrace=False)


@pytest.fixture
def small_fs(tmp_path: Path, root_only: None) -> Iterator[Path]:
    with tmpfs(tmp_path, 8 * MIB) as mount:
        yield mount.path


# --- prepare -----------------------------------------------------------------------------


@pytest.mark.timeout(30)
def test_prepare_creates_layout_sizes_and_manifest(tmp_path: Path) -> None:
    target = make_target(tmp_path / "target", data_mib=4, files=40, dirs=4)
    report = prepare(target, HOST, progress=False)
    ws = tmp_path / "target" / ".slowdown" / HOST
    assert report.action == "created" and report.workspace == ws
    assert report.data_written == 4 * MIB and report.objects_created == 40
    assert_complete(ws, target)
    data = os.lstat(ws / "data.bin")
    assert data.st_blocks * 512 >= data.st_size, "data.bin must not be sparse"

    doc = json.loads((ws / "MANIFEST").read_text())
    assert doc["format"] == "slowdown-workspace" and doc["version"] == 1
    assert doc["host"] == HOST and doc["target"] == "t" and doc["complete"] is True
    assert doc["uid"] == os.geteuid() and doc["created"] <= doc["completed"] <= time.time()
    assert doc["parents"] == [".", ".slowdown"]
    assert doc["data"] == {"file": "data.bin", "size": 4 * MIB, "block_size": MIB}
    pool = doc["pool"]
    assert pool["dirs"] == ["0_0", "0_1", "0_2", "0_3"] and pool["files_per_dir"] == 10
    assert pool["object_size"] == 3901 and pool["first_index"] == 0
    assert pool["position"] == 0 and pool["adopted"] is False
    assert (ws / "md-workbench.status").read_text().startswith("pos: 0\n")
    assert sorted(os.listdir(ws)) == ["MANIFEST", "data.bin", "md", "md-workbench.status"]


@pytest.mark.timeout(30)
def test_prepare_twice_changes_nothing(tmp_path: Path) -> None:
    target = make_target(tmp_path / "target")
    prepare(target, HOST, progress=False)
    before = tree(tmp_path)
    report = prepare(target, HOST, progress=False)
    assert report.action == "unchanged"
    assert report.data_written == 0 and report.objects_created == 0
    assert tree(tmp_path) == before


@pytest.mark.timeout(30)
def test_prepare_grows_data_but_never_touches_a_rotating_pool(tmp_path: Path) -> None:
    target = make_target(tmp_path / "target", data_mib=2)
    prepare(target, HOST, progress=False)
    ws = Workspace.of(target, HOST).dir
    probe = MdProbe.from_workspace(ws)
    for _ in range(7):
        probe.step()
    probe.save_position()
    pool_before = tree(ws / "md")
    bigger = make_target(tmp_path / "target", data_mib=5)
    report = prepare(bigger, HOST, progress=False)
    assert report.action == "extended" and report.data_written == 3 * MIB
    assert (ws / "data.bin").stat().st_size == 5 * MIB and all_stamped(ws / "data.bin")
    assert tree(ws / "md") == pool_before
    assert read_manifest(ws).data_size == 5 * MIB
    assert prepare(bigger, HOST, progress=False).action == "unchanged"


def worker_tick(workspace: Path) -> list[dict]:
    """What the service's worker answers to one tick on `workspace`: a line per op."""
    answers: list[dict] = []
    Probes(workspace).tick(1, answers.append)
    ops = [a for a in answers if "op" in a]
    assert ops
    return ops


@pytest.mark.timeout(30)
def test_data_size_follows_ram_and_the_service_opens_only_finished_workspaces(
        tmp_path: Path) -> None:
    target = Target(name="t", path=tmp_path / "target", data_size=DataSize(ram_factor=4),
                    pool_files=8, pool_dirs=2)
    ws = Workspace.of(target, HOST)
    assert all("prepare" in a.get("msg", "") for a in worker_tick(ws.dir))
    report = prepare(target, HOST, ram_bytes=3 * MIB, progress=False)
    assert report.data_size == 12 * MIB
    assert not [a for a in worker_tick(ws.dir) if "err" in a]
    manifest = read_manifest(ws.dir)
    assert ws.data.stat().st_size == 12 * MIB and manifest.complete
    assert ws.dir == target.workspace(HOST)
    manifest.complete = False
    write_manifest(ws.dir, manifest)
    assert all("did not finish" in a.get("msg", "") for a in worker_tick(ws.dir))


@pytest.mark.timeout(30)
def test_prepare_refuses_changed_pool_shape(tmp_path: Path) -> None:
    prepare(make_target(tmp_path / "target"), HOST, progress=False)
    with pytest.raises(WorkspaceError, match="run cleanup first"):
        prepare(make_target(tmp_path / "target", files=80), HOST, progress=False)


@pytest.mark.timeout(30)
def test_prepare_requires_whole_directories(tmp_path: Path) -> None:
    with pytest.raises(WorkspaceError, match="multiple of pool_dirs"):
        prepare(make_target(tmp_path / "target", files=41, dirs=4), HOST, progress=False)
    assert not (tmp_path / "target").exists()


@pytest.mark.timeout(30)
def test_progress_bar_goes_to_a_terminal_only(tmp_path: Path) -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=100)
    prepare(make_target(tmp_path / "a"), HOST, console=console)
    text = out.getvalue()
    assert "data.bin" in text and "md/" in text and "ETA" in text
    quiet = io.StringIO()
    prepare(make_target(tmp_path / "b"), HOST, console=Console(file=quiet, force_terminal=False))
    prepare(make_target(tmp_path / "c"), HOST, progress=False,
            console=Console(file=quiet, force_terminal=True))
    assert quiet.getvalue() == ""


# --- interrupted prepare -----------------------------------------------------------------


def spawn_prepare(target: Target) -> subprocess.Popen:
    code = textwrap.dedent(f"""
        from pathlib import Path
        from slowdown.analysis.config import DataSize, Target
        from slowdown.probe.workspaces.prepare import prepare
        target = Target(name="t", path=Path({str(target.path)!r}),
                        data_size=DataSize(bytes={target.data_size.bytes}),
                        pool_files={target.pool_files}, pool_dirs={target.pool_dirs},
                        object_size={target.object_size})
        prepare(target, {HOST!r}, progress=False)
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    return subprocess.Popen([sys.executable, "-c", code], env=env)


def size_of(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def count_in(path: Path) -> int:
    try:
        return len(os.listdir(path))
    except FileNotFoundError:
        return 0


@pytest.mark.timeout(60)
def test_prepare_killed_while_writing_data_resumes(tmp_path: Path) -> None:
    target = make_target(tmp_path / "target", data_mib=256, files=40, dirs=4)
    ws = Workspace.of(target, HOST).dir
    kill_when(spawn_prepare(target), lambda: size_of(ws / "data.bin") >= 24 * MIB)
    manifest = read_manifest(ws)
    assert manifest is not None and not manifest.complete
    assert not (ws / "md").exists()
    report = prepare(target, HOST, progress=False)
    assert report.action == "resumed"
    assert 0 < report.data_written <= 256 * MIB - 24 * MIB
    assert_complete(ws, target)


@pytest.mark.timeout(60)
def test_prepare_killed_while_creating_the_pool_resumes(tmp_path: Path) -> None:
    target = make_target(tmp_path / "target", data_mib=1, files=8000, dirs=4)
    ws = Workspace.of(target, HOST).dir
    kill_when(spawn_prepare(target), lambda: count_in(ws / "md" / "0_3") >= 50)
    assert not read_manifest(ws).complete
    existing = sum(count_in(ws / "md" / f"0_{d}") for d in range(4))
    assert existing < 8000
    report = prepare(target, HOST, progress=False)
    assert report.action == "resumed" and report.data_written == 0
    # The object being written at the kill may have been recreated.
    assert 8000 - existing <= report.objects_created <= 8000 - existing + 1
    assert_complete(ws, target)
    assert prepare(target, HOST, progress=False).action == "unchanged"


@pytest.mark.timeout(60)
def test_cleanup_removes_an_interrupted_prepare(tmp_path: Path) -> None:
    target = make_target(tmp_path / "target", data_mib=1, files=8000, dirs=4)
    ws = Workspace.of(target, HOST).dir
    kill_when(spawn_prepare(target), lambda: count_in(ws / "md" / "0_1") >= 50)
    report = cleanup(target, HOST)
    assert report.strays == [] and not report.manifest_kept
    assert not (tmp_path / "target").exists()


# --- free space --------------------------------------------------------------------------


@pytest.mark.timeout(30)
def test_prepare_refuses_without_space_and_creates_nothing(small_fs: Path) -> None:
    target = make_target(small_fs / "target", data_mib=16)
    with pytest.raises(NoSpaceError, match="not enough free space"):
        prepare(target, HOST, progress=False)
    assert os.listdir(small_fs) == []


@pytest.mark.timeout(30)
def test_prepare_refuses_without_inodes_and_creates_nothing(tmp_path: Path,
                                                             root_only: None) -> None:
    with tmpfs(tmp_path, 64 * MIB, nr_inodes=60) as mount:
        target = make_target(mount.path / "target", data_mib=1, files=100, dirs=4)
        with pytest.raises(NoSpaceError, match="inodes"):
            prepare(target, HOST, progress=False)
        assert os.listdir(mount.path) == []


@pytest.mark.timeout(30)
def test_prepare_on_ext4(tmp_path: Path, root_only: None) -> None:
    with ext4_image(tmp_path, 64) as point:
        target = make_target(point / "target", data_mib=8, files=400, dirs=4)
        report = prepare(target, HOST, progress=False)
        assert report.action == "created"
        ws = Workspace.of(target, HOST).dir
        assert_complete(ws, target)
        assert cleanup(target, HOST).strays == []
        assert sorted(os.listdir(point)) == ["lost+found"]


# --- unsafe paths ------------------------------------------------------------------------


@pytest.mark.timeout(30)
@pytest.mark.parametrize("path", ["/", "/etc", "/usr", "/proc/self", "relative/dir",
                                  "/tmp/../etc/x"])
def test_unsafe_paths_are_refused(path: str) -> None:
    with pytest.raises(UnsafePathError):
        check_target_path(path)
    with pytest.raises(UnsafePathError):
        prepare(make_target(Path(path)), HOST, progress=False)


@pytest.mark.timeout(30)
def test_a_home_directory_itself_is_refused(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home" / "alice"
    home.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    with pytest.raises(UnsafePathError, match="home directory"):
        prepare(make_target(home), HOST, progress=False)
    assert os.listdir(home) == []
    with pytest.raises(UnsafePathError, match="home directory"):
        check_target_path(Path.home())
    prepare(make_target(home / "probe"), HOST, progress=False)  # a subdirectory is fine


@pytest.mark.timeout(30)
def test_a_symlink_in_the_path_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(UnsafePathError, match="symlink"):
        prepare(make_target(tmp_path / "link" / "target"), HOST, progress=False)
    with pytest.raises(UnsafePathError, match="symlink"):
        prepare(make_target(tmp_path / "link"), HOST, progress=False)
    assert os.listdir(real) == []
    # .slowdown itself planted as a symlink
    target = tmp_path / "target"
    target.mkdir()
    (target / ".slowdown").symlink_to(real)
    with pytest.raises(UnsafePathError, match="symlink"):
        prepare(make_target(target), HOST, progress=False)
    assert os.listdir(real) == []


@pytest.mark.timeout(30)
def test_a_file_as_target_is_refused(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(UnsafePathError, match="not a directory"):
        prepare(make_target(tmp_path / "file"), HOST, progress=False)


@pytest.mark.timeout(30)
def test_a_workspace_of_another_user_is_refused(tmp_path: Path, root_only: None) -> None:
    ws = tmp_path / "target" / ".slowdown" / HOST
    ws.mkdir(parents=True)
    os.chown(ws, 4242, 4242)
    with pytest.raises(UnsafePathError, match="uid 4242"):
        prepare(make_target(tmp_path / "target"), HOST, progress=False)
    assert os.listdir(ws) == []
    with pytest.raises(UnsafePathError, match="uid 4242"):
        cleanup(make_target(tmp_path / "target"), HOST)


@pytest.mark.timeout(30)
def test_a_foreign_workspace_directory_is_refused(tmp_path: Path) -> None:
    ws = tmp_path / "target" / ".slowdown" / HOST
    (ws / "md").mkdir(parents=True)
    (ws / "md" / "results.csv").write_text("precious")
    before = tree(tmp_path)
    with pytest.raises(ForeignWorkspaceError):
        prepare(make_target(tmp_path / "target"), HOST, progress=False)
    with pytest.raises(ForeignWorkspaceError):
        cleanup(make_target(tmp_path / "target"), HOST)
    assert tree(tmp_path) == before
    # A MANIFEST that is not ours does not make it ours.
    (ws / "MANIFEST").write_text('{"format": "something-else"}')
    with pytest.raises(ForeignWorkspaceError):
        prepare(make_target(tmp_path / "target"), HOST, progress=False)
    with pytest.raises(ForeignWorkspaceError):
        cleanup(make_target(tmp_path / "target"), HOST)
    assert (ws / "md" / "results.csv").read_text() == "precious"


@pytest.mark.timeout(30)
def test_a_missing_parent_is_not_created(tmp_path: Path) -> None:
    with pytest.raises(WorkspaceError, match="does not exist"):
        prepare(make_target(tmp_path / "a" / "b"), HOST, progress=False)
    assert os.listdir(tmp_path) == []


@pytest.mark.timeout(30)
def test_bad_host_names_are_refused(tmp_path: Path) -> None:
    for host in ["", "..", "a/b", ".hidden"]:
        with pytest.raises(WorkspaceError):
            prepare(make_target(tmp_path / "target"), host, progress=False)
    assert not (tmp_path / "target").exists()
