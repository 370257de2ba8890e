"""slowdown-probe cleanup removes a workspace and only what the probe made, and the command line
of prepare and cleanup."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from slowdown.probe.command.workspace_commands import cleanup_command, prepare_command
from slowdown.probe.layout.errors import (
    UnsafePathError,
)
from slowdown.probe.layout.manifest import read_manifest
from slowdown.probe.workspaces.cleanup import cleanup
from slowdown.probe.workspaces.prepare import Workspace, prepare
from tests.kit.workspacekit import HOST, make_target, prepared_workspace, tree

# --- cleanup -----------------------------------------------------------------------------


@pytest.mark.timeout(30)
def test_cleanup_leaves_strays_and_symlinks_and_removes_the_rest(tmp_path: Path) -> None:
    target, ws = prepared_workspace(tmp_path / "target")
    outside = tmp_path / "outside"
    (outside / "0_0").mkdir(parents=True)
    precious = outside / "precious"
    precious.write_text("keep me")
    (outside / "0_0" / "file-0").write_text("also mine")
    # a stray file, a symlink named like an object, a symlink in place of data.bin
    (ws / "md" / "0_1" / "notes.txt").write_text("stray")
    (ws / "md" / "0_2" / "file-3").unlink()
    (ws / "md" / "0_2" / "file-3").symlink_to(precious)
    (ws / "data.bin").unlink()
    (ws / "data.bin").symlink_to(precious)
    (ws / "md" / "0_4").symlink_to(outside / "0_0")  # not a pool dir: stray

    report = cleanup(target, HOST)
    assert sorted(report.strays) == ["data.bin", "md/0_1/notes.txt", "md/0_2/file-3",
                                     "md/0_4"]
    assert report.manifest_kept
    assert precious.read_text() == "keep me"
    assert (outside / "0_0" / "file-0").read_text() == "also mine"
    assert (ws / "md" / "0_1" / "notes.txt").read_text() == "stray"
    assert (ws / "md" / "0_2" / "file-3").is_symlink()
    assert sorted(os.listdir(ws)) == ["MANIFEST", "data.bin", "md"]
    assert sorted(os.listdir(ws / "md")) == ["0_1", "0_2", "0_4"]
    assert os.listdir(ws / "md" / "0_1") == ["notes.txt"]
    assert os.listdir(ws / "md" / "0_2") == ["file-3"]

    for stray in ["md/0_1/notes.txt", "md/0_2/file-3", "data.bin", "md/0_4"]:
        (ws / stray).unlink()
    report = cleanup(target, HOST)
    assert report.strays == [] and not report.manifest_kept
    assert os.listdir(tmp_path) == ["outside"]
    assert precious.read_text() == "keep me"


@pytest.mark.timeout(30)
def test_cleanup_never_follows_a_symlinked_pool_or_workspace(tmp_path: Path) -> None:
    target, ws = prepared_workspace(tmp_path / "target")
    decoy = tmp_path / "decoy"
    for d in range(4):
        (decoy / f"0_{d}").mkdir(parents=True)
        (decoy / f"0_{d}" / "file-0").write_text("x" * 3901)
    for d in range(4):
        for name in os.listdir(ws / "md" / f"0_{d}"):
            (ws / "md" / f"0_{d}" / name).unlink()
        (ws / "md" / f"0_{d}").rmdir()
    (ws / "md").rmdir()
    (ws / "md").symlink_to(decoy)
    before = tree(decoy)
    report = cleanup(target, HOST)
    assert report.strays == ["md"] and report.manifest_kept
    assert tree(decoy) == before

    # the whole workspace replaced by a symlink to a copy with a MANIFEST
    (ws / "md").unlink()
    ws.rename(tmp_path / "moved")
    ws.symlink_to(tmp_path / "moved")
    with pytest.raises(UnsafePathError):
        cleanup(target, HOST)
    assert (tmp_path / "moved" / "MANIFEST").exists()


@pytest.mark.timeout(30)
def test_cleanup_refuses_a_symlink_in_the_target_path(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    target = make_target(tmp_path / "real" / "target")
    prepare(target, HOST, progress=False)
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(UnsafePathError):
        cleanup(make_target(tmp_path / "link" / "target"), HOST)
    assert (tmp_path / "real" / "target" / ".slowdown" / HOST / "MANIFEST").exists()


@pytest.mark.timeout(30)
def test_cleanup_without_a_workspace_does_nothing(tmp_path: Path) -> None:
    report = cleanup(make_target(tmp_path / "target"), HOST)
    assert not report.existed and report.removed_files == 0


@pytest.mark.timeout(30)
def test_cleanup_keeps_parents_it_did_not_create_and_other_hosts(tmp_path: Path) -> None:
    (tmp_path / "target" / ".slowdown").mkdir(parents=True)
    target = make_target(tmp_path / "target")
    prepare(target, HOST, progress=False)
    prepare(target, "node-b", progress=False)
    assert read_manifest(Workspace.of(target, HOST).dir).parents == []
    cleanup(target, HOST)
    assert os.listdir(tmp_path / "target" / ".slowdown") == ["node-b"]
    cleanup(target, "node-b")
    assert os.listdir(tmp_path / "target") == [".slowdown"]


# --- command line ------------------------------------------------------------------------


@pytest.mark.timeout(30)
def test_cli_prepare_and_cleanup_selected_targets(tmp_path: Path) -> None:
    one = make_target(tmp_path / "one", name="one")
    two = make_target(tmp_path / "two", name="two")
    config = SimpleNamespace(host=HOST, targets=(one, two))
    runner = CliRunner()
    result = runner.invoke(prepare_command, ["--target", "one", "--no-progress"],
                           obj={"config": config})
    assert result.exit_code == 0, result.output
    assert "one: created" in result.output
    assert (tmp_path / "one" / ".slowdown" / HOST / "MANIFEST").exists()
    assert not (tmp_path / "two").exists()

    result = runner.invoke(prepare_command, ["--target", "three"], obj={"config": config})
    assert result.exit_code == 2 and "no target named three" in result.output

    result = runner.invoke(prepare_command, ["--no-progress"], obj={"config": config})
    assert result.exit_code == 0
    assert "one: unchanged" in result.output and "two: created" in result.output

    result = runner.invoke(cleanup_command, ["--target", "two"], obj={"config": config})
    assert result.exit_code == 1 and "--yes" in result.output
    assert (tmp_path / "two" / ".slowdown").exists()

    (tmp_path / "one" / ".slowdown" / HOST / "md" / "0_0" / "keep.txt").write_text("x")
    result = runner.invoke(cleanup_command, ["--yes"], obj={"config": config})
    assert result.exit_code == 1  # a stray stayed
    assert "md/0_0/keep.txt" in result.output
    assert not (tmp_path / "two").exists()
    assert (tmp_path / "one" / ".slowdown" / HOST / "md" / "0_0" / "keep.txt").exists()


@pytest.mark.timeout(30)
def test_cli_reports_a_refusal_on_one_line_and_goes_on(tmp_path: Path) -> None:
    bad = make_target(Path("/"), name="bad")
    good = make_target(tmp_path / "good", name="good")
    config = SimpleNamespace(host=HOST, targets=(bad, good))
    result = CliRunner().invoke(prepare_command, ["--no-progress"], obj={"config": config})
    assert result.exit_code == 1
    assert "slowdown-probe prepare: target bad: target path / is a system directory" in (
        result.output)
    assert "good: created" in result.output


@pytest.mark.timeout(30)
def test_cli_takes_the_config_from_a_context_object(tmp_path: Path) -> None:
    target = make_target(tmp_path / "t", name="t")
    config = SimpleNamespace(host=HOST, targets=(target,))

    class Context:
        def config(self) -> SimpleNamespace:
            return config

    result = CliRunner().invoke(prepare_command, ["--no-progress"], obj=Context())
    assert result.exit_code == 0, result.output
