"""A pool md-workbench made (or continued) is adopted by prepare, and one slowdown made is one
md-workbench can continue."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from slowdown.probe.layout.errors import (
    ForeignWorkspaceError,
)
from slowdown.probe.layout.manifest import read_manifest
from slowdown.probe.probes.md import MdProbe
from slowdown.probe.workspaces.cleanup import cleanup
from slowdown.probe.workspaces.prepare import Workspace, prepare
from tests.kit.workspacekit import HOST, MIB, make_target, tree

# --- adopting an md-workbench pool -------------------------------------------------------


def md_workbench_pool(ws: Path, dirs: int, per_dir: int, size: int, starts: list[int],
                      status: str | None) -> None:
    """The tree `md-workbench -1 -o <ws>/md -D=dirs -P=per_dir -S=size` leaves (followed by
    benchmark runs when starts > 0): <ws>/md/0_<d>/file-<i>, plus its run-info file."""
    for d in range(dirs):
        (ws / "md" / f"0_{d}").mkdir(parents=True)
        for i in range(starts[d], starts[d] + per_dir):
            (ws / "md" / f"0_{d}" / f"file-{i}").write_bytes(b"m" * size)
    if status is not None:
        (ws / "md-workbench.status").write_text(status)


@pytest.mark.timeout(30)
def test_an_md_workbench_pool_is_adopted_with_its_position(tmp_path: Path) -> None:
    target = make_target(tmp_path / "target", files=40, dirs=4, size=3901)
    ws = Workspace.of(target, HOST).dir
    md_workbench_pool(ws, 4, 10, 3901, [5, 5, 5, 5], "pos: 5\n")
    objects_before = tree(ws / "md")
    report = prepare(target, HOST, progress=False)
    assert report.action == "adopted" and report.position == 20
    assert report.objects_created == 0 and report.data_written == 4 * MIB
    assert tree(ws / "md") == objects_before
    manifest = read_manifest(ws)
    assert manifest.complete and manifest.pool.adopted and manifest.workspace_adopted
    assert manifest.pool.first_index == 5 and manifest.pool.position == 20
    assert (ws / "md-workbench.status").read_text().startswith("pos: 5\n")
    probe = MdProbe.from_workspace(ws)
    assert probe.position == 20
    for _ in range(60):
        assert probe.step().errors == {}
    assert prepare(target, HOST, progress=False).action == "unchanged"
    assert cleanup(target, HOST).strays == []
    assert os.listdir(tmp_path / "target" / ".slowdown") == []  # it was there before


@pytest.mark.timeout(30)
def test_an_md_workbench_pool_paused_mid_round_is_adopted(tmp_path: Path) -> None:
    target = make_target(tmp_path / "target", files=40, dirs=4)
    ws = Workspace.of(target, HOST).dir
    md_workbench_pool(ws, 4, 10, 3901, [3, 3, 2, 2], None)
    report = prepare(target, HOST, progress=False)
    assert report.action == "adopted" and report.position == 2 * 4 + 2


@pytest.mark.timeout(30)
def test_an_md_workbench_status_file_elsewhere_is_honoured(tmp_path: Path) -> None:
    target = make_target(tmp_path / "target", files=40, dirs=4)
    ws = Workspace.of(target, HOST).dir
    md_workbench_pool(ws, 4, 10, 3901, [7, 7, 7, 7], None)
    elsewhere = tmp_path / "mdw.status"
    elsewhere.write_text("pos: 6\n")
    with pytest.raises(ForeignWorkspaceError, match="says pos 6"):
        prepare(target, HOST, progress=False, md_workbench_status=elsewhere)
    elsewhere.write_text("pos: 7\n")
    assert prepare(target, HOST, progress=False,
                   md_workbench_status=elsewhere).position == 28
    assert elsewhere.read_text() == "pos: 7\n"


@pytest.mark.timeout(30)
@pytest.mark.parametrize("spoil", ["extra-file", "wrong-size", "missing-object", "extra-dir",
                                   "status-mismatch", "symlink", "other-entry"])
def test_anything_but_an_exact_md_workbench_pool_is_foreign(tmp_path: Path,
                                                            spoil: str) -> None:
    target = make_target(tmp_path / "target", files=40, dirs=4)
    ws = Workspace.of(target, HOST).dir
    md_workbench_pool(ws, 4, 10, 3901, [0, 0, 0, 0], "pos: 0\n")
    d1 = ws / "md" / "0_1"
    if spoil == "extra-file":
        (d1 / "file-x").write_text("x")
    elif spoil == "wrong-size":
        (d1 / "file-4").write_bytes(b"m" * 100)
    elif spoil == "missing-object":
        (d1 / "file-4").unlink()
    elif spoil == "extra-dir":
        (ws / "md" / "0_4").mkdir()
    elif spoil == "status-mismatch":
        (ws / "md-workbench.status").write_text("pos: 3\n")
    elif spoil == "symlink":
        (d1 / "file-4").unlink()
        (d1 / "file-4").symlink_to(tmp_path)
    elif spoil == "other-entry":
        (ws / "results.txt").write_text("mine")
    before = tree(tmp_path)
    with pytest.raises(ForeignWorkspaceError):
        prepare(target, HOST, progress=False)
    assert tree(tmp_path) == before
