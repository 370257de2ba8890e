"""Beside the shared data file: a workspace with its own data file (the layout before) goes on
as it is, prepare's warning without O_DIRECT, check-config's footprint of a cluster, and the
configuration keys of the data file."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from slowdown.analysis.config import DataSize, Target
from slowdown.analysis.units import format_size
from slowdown.probe.command.main import main as probe_main
from slowdown.probe.layout.errors import WorkspaceError
from slowdown.probe.layout.manifest import read_manifest, write_manifest
from slowdown.probe.probes.data import FADVISE
from slowdown.probe.probes.worker import Probes
from slowdown.probe.workspaces.cleanup import cleanup
from slowdown.probe.workspaces.footprint import footprint
from slowdown.probe.workspaces.prepare import Workspace, prepare
from tests.kit.faultfs.realfs import ramfs
from tests.kit.shareddatakit import (
    MIB,
    close,
    identity,
    ok,
    shared_target,
    ticks,
)

# --- the layout of before ----------------------------------------------------------------


@pytest.mark.timeout(30)
def test_a_workspace_with_its_own_data_file_goes_on_as_it_is(tmp_path: Path) -> None:
    own = Target(name="t", path=tmp_path / "target", data_size=DataSize(bytes=4 * MIB),
                 pool_files=8, pool_dirs=2)  # data_file "own": the layout before shared files
    prepare(own, "node-a", progress=False)
    ws = Workspace.of(own, "node-a")
    doc = json.loads(ws.manifest.read_text())
    assert doc["version"] == 1 and doc["data"] == {"file": "data.bin", "size": 4 * MIB,
                                                   "block_size": MIB}
    now_shared = shared_target(tmp_path / "target", data_mib=16)
    report = prepare(now_shared, "node-a", progress=False)
    assert report.action == "unchanged" and report.shared is None
    assert any("keeps its own data.bin" in n and "run cleanup, then prepare" in n
               for n in report.notes)
    assert sorted(os.listdir(ws.dir.parent)) == ["node-a"], "no shared file for it"
    assert ws.data.stat().st_size == 4 * MIB, "not extended to the new data_size"
    before = identity(ws.data)
    probes = Probes(ws.dir)
    assert ok(ticks(probes, 5))
    assert probes.data.path == str(ws.data) and probes.data.write_path is None
    assert identity(ws.data)[3] != before[3]  # it writes its own data.bin, as before
    close(probes)

    manifest = read_manifest(ws.dir)
    manifest.complete = False
    write_manifest(ws.dir, manifest)
    with pytest.raises(WorkspaceError, match=r"did not finish.*run cleanup first"):
        prepare(now_shared, "node-a", progress=False)
    assert cleanup(now_shared, "node-a").strays == []
    assert not (tmp_path / "target").exists()


@pytest.mark.timeout(30)
def test_without_o_direct_prepare_says_when_the_file_is_not_larger_than_ram(
        tmp_path: Path, root_only: None) -> None:
    with ramfs(tmp_path) as point:
        target = shared_target(point / "target")
        report = prepare(target, "node-a", progress=False, ram_bytes=1 << 30)
        assert report.mode == FADVISE
        assert any("refuses O_DIRECT" in n and "8MiB <= 1GiB" in n and '"4xRAM"' in n
                   for n in report.notes), report.notes
        report = prepare(target, "node-b", progress=False, ram_bytes=4 * MIB)
        # ramfs says no size and no inode count: said, and nothing about O_DIRECT
        assert report.mode == FADVISE and [n.split(": ", 1)[1].split(" (")[0]
                                           for n in report.notes] == [
            "free space not checked", "free inodes not checked"], report.notes
        probes = Probes(Workspace.of(target, "node-b").dir)
        answers = ticks(probes, 3)
        assert ok(answers) and {a["mode"] for a in answers if a.get("end")} == {FADVISE}
        close(probes)


# --- check-config --nodes ----------------------------------------------------------------


def _expected(nodes: int, data: int, write: int | None) -> tuple[int, int]:
    """Bytes and inodes as DEPLOY.md states them: 100,000 objects of 3,901 B in 10 dirs."""
    per_node_small = 100_000 * 4096 + (10 + 4) * 4096
    if write is None:  # own
        return 4096 + nodes * (data + per_node_small), 1 + nodes * 100_015
    return 4096 + data + 2 * 4096 + nodes * (write + per_node_small), 4 + nodes * 100_015


@pytest.mark.timeout(30)
def test_check_config_states_the_footprint_of_a_cluster(tmp_path: Path) -> None:
    path = tmp_path / "slowdown.toml"
    for parent in ("lustre/work", "nfs/home"):  # where prepare can make the targets
        (tmp_path / parent).mkdir(parents=True)
    path.write_text(textwrap.dedent(f"""\
        host = "node01"
        [[target]]
        name = "work"
        path = "{tmp_path}/lustre/work/slowdown-probe"
        [[target]]
        name = "home"
        path = "{tmp_path}/nfs/home/slowdown-probe"
        data_file = "own"
        data_size = "1GiB"
    """))
    for nodes in (1, 50, 500):
        args = ["--config", str(path), "check-config"] + (["--nodes", str(nodes)] if
                                                           nodes > 1 else [])
        result = CliRunner().invoke(probe_main, args)
        assert result.exit_code == 0, result.output
        who = "1 node" if nodes == 1 else f"{nodes} nodes"
        work = _expected(nodes, 64 << 30, 256 * MIB)
        home = _expected(nodes, 1 << 30, None)
        assert f"footprint    {who}: {format_size(work[0])} and {work[1]:,} inodes" in (
            result.output)
        assert f"footprint    {who}: {format_size(home[0])} and {home[1]:,} inodes" in (
            result.output)
        total = (f"footprint      all targets, {nodes:,} node{'s' if nodes > 1 else ''}: "
                 f"{format_size(work[0] + home[0])} and {work[1] + home[1]:,} inodes")
        assert total in result.output
    assert f"{tmp_path}/lustre/work/slowdown-probe/.slowdown/shared/data.bin, 64GiB, read by " \
        'every node (data_file = "shared")' in result.output
    assert "write file   write.bin in the workspace, 256MiB" in result.output
    assert 'data.bin in the workspace, 1GiB (data_file = "own")' in result.output
    assert "(inodes: pool_files + pool_dirs + 5)" in result.output
    # The shared part does not grow with the nodes; an own data file does.
    work_1, work_500 = (footprint(Target("w", Path("/w"), DataSize(bytes=64 << 30),
                                         data_file="shared"), n) for n in (1, 500))
    assert work_500.once_bytes == work_1.once_bytes == (64 << 30) + 3 * 4096
    assert work_500.total_bytes - work_1.total_bytes == 499 * work_1.node_bytes


@pytest.mark.timeout(30)
def test_configuration_keys_of_the_data_file(tmp_path: Path) -> None:
    path = tmp_path / "slowdown.toml"
    base = '[[target]]\nname = "t"\npath = "/srv/probe"\n'
    result = CliRunner().invoke(probe_main, ["check-config", str(path)])
    for extra, message in [
        ('data_file = "both"\n', "target[1].data_file: expected one of 'shared', 'own'"),
        ('data_file = "own"\nwrite_size = "1GiB"\n',
         'target[1].write_size: applies to data_file = "shared" only'),
        ('write_size = "4KiB"\n', "target[1].write_size: must be at least 1MiB"),
        ('host = "shared"\n', "target[1].data_file: the host name 'shared'"),
    ]:
        text = (extra + base) if extra.startswith("host") else base + extra
        path.write_text(text)
        result = CliRunner().invoke(probe_main, ["check-config", str(path)])
        assert result.exit_code == 2 and message in result.output, (extra, result.output)
    path.write_text(base + 'data_size = "4xRAM"\nwrite_size = "1.5MiB"\n')
    result = CliRunner().invoke(probe_main, ["check-config", str(path)])
    assert result.exit_code == 0 and "write.bin in the workspace, 1MiB" in result.output
