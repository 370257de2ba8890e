"""Two nodes, one data file: a target's shared data file on real filesystems.

A node is a host name: prepare, the worker and cleanup take it as an argument, and two real
services run with configurations whose `host` differs, as two nodes of a cluster share one
filesystem. ext4 on a loop device gives real O_DIRECT; ramfs refuses O_DIRECT. Concurrent and
interrupted prepares run in child processes (killed with SIGKILL where a test says so).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from slowdown.analysis.config import Target
from slowdown.analysis.words import OPS
from slowdown.probe.command.workspace_commands import cleanup_command, prepare_command
from slowdown.probe.layout.errors import ForeignWorkspaceError, WorkspaceError
from slowdown.probe.layout.manifest import read_shared_manifest
from slowdown.probe.locks.lock_file import boot_id
from slowdown.probe.locks.shared_claim import STALE_AFTER, Claim, ClaimLost, try_claim
from slowdown.probe.locks.shared_claim import ClaimHolder as Holder
from slowdown.probe.probes.data import DIRECT, FADVISE
from slowdown.probe.probes.worker import Probes
from slowdown.probe.workspaces import shared_data as shared_module
from slowdown.probe.workspaces.cleanup import cleanup
from slowdown.probe.workspaces.prepare import Workspace, prepare
from slowdown.probe.workspaces.shared_cleanup import cleanup_shared
from tests.kit.faultfs.realfs import ext4_image
from tests.kit.servicekit import records, start_service, wait_service
from tests.kit.shareddatakit import (
    HOSTS,
    MIB,
    all_stamped,
    close,
    identity,
    ok,
    shared_dir,
    shared_target,
    ticks,
)
from tests.kit.workspacekit import kill_when

# --- two nodes, one file -----------------------------------------------------------------


@pytest.mark.timeout(60)
def test_two_nodes_read_one_shared_file_and_write_their_own(tmp_path: Path,
                                                            root_only: None) -> None:
    with ext4_image(tmp_path, 64) as point:
        target = shared_target(point / "target")
        shared = shared_dir(target)
        a = prepare(target, "node-a", progress=False)
        assert a.action == "created" and a.mode == DIRECT
        assert a.shared.action == "created" and a.shared.written == 8 * MIB
        assert a.shared.creator == "node-a" and a.shared.path == shared / "data.bin"
        assert all_stamped(shared / "data.bin")
        before = identity(shared / "data.bin")

        b = prepare(target, "node-b", progress=False)
        assert b.action == "created" and b.mode == DIRECT
        assert b.shared.action == "unchanged" and b.shared.written == 0
        assert b.shared.creator == "node-a" and b.shared.size == 8 * MIB
        assert identity(shared / "data.bin") == before, "the second node wrote it again"
        assert sorted(os.listdir(shared.parent)) == ["node-a", "node-b", "shared"]
        assert sorted(os.listdir(shared)) == ["MANIFEST", "data.bin"]
        doc = json.loads((shared / "MANIFEST").read_text())
        assert doc["format"] == "slowdown-shared" and doc["host"] == "node-a"
        assert doc["complete"] is True and doc["parents"] == [".", ".slowdown"]
        assert doc["data"] == {"file": "data.bin", "size": 8 * MIB, "block_size": MIB}
        for host in HOSTS:
            ws = Workspace.of(target, host)
            assert sorted(os.listdir(ws.dir)) == ["MANIFEST", "md", "md-workbench.status",
                                                  "write.bin"]
            assert ws.write.stat().st_size == 2 * MIB and all_stamped(ws.write)
            doc = json.loads(ws.manifest.read_text())
            assert doc["version"] == 2 and doc["data"] == {
                "file": "write.bin", "size": 2 * MIB, "block_size": MIB,
                "read": "../shared/data.bin"}
            assert doc["parents"] == ([".", ".slowdown"] if host == "node-a" else [])

        # Both probe it: reads of the one shared file (read-only, O_DIRECT), writes of their own.
        writes = {h: identity(Workspace.of(target, h).write) for h in HOSTS}
        probes = {h: Probes(Workspace.of(target, h).dir) for h in HOSTS}
        for host in HOSTS:
            answers = ticks(probes[host], 30)
            assert ok(answers), answers
            assert sorted({a["op"] for a in answers if "op" in a}) == sorted(OPS)
            assert {a["mode"] for a in answers if a.get("end")} == {DIRECT}
            data = probes[host].data
            assert os.readlink(f"/proc/self/fd/{data.fileno()}") == str(shared / "data.bin")
            flags = int(Path(f"/proc/self/fdinfo/{data.fileno()}").read_text().split(
                "flags:")[1].split()[0], 8)
            assert flags & os.O_ACCMODE == os.O_RDONLY and flags & os.O_DIRECT
            assert data.write_path == str(Workspace.of(target, host).write)
        assert identity(shared / "data.bin") == before, "a probe wrote the shared file"
        for host in HOSTS:
            now = identity(Workspace.of(target, host).write)
            assert now[:2] == writes[host][:2] and now[3] != writes[host][3], host

        # One node's cleanup leaves the other probing; the shared file goes last.
        with pytest.raises(WorkspaceError, match="still read by the workspaces of node-a, "
                                                 "node-b"):
            cleanup_shared(target, "node-a")
        close(probes["node-a"])
        assert cleanup(target, "node-a").strays == []
        assert sorted(os.listdir(shared.parent)) == ["node-b", "shared"]
        assert ok(ticks(probes["node-b"], 5))
        with pytest.raises(WorkspaceError, match="read by the workspaces of node-b:"):
            cleanup_shared(target, "node-a")
        assert identity(shared / "data.bin")[:2] == before[:2]
        close(probes["node-b"])
        assert cleanup(target, "node-b").strays == []
        report = cleanup_shared(target, "node-b")
        assert report.removed_files == 2 and report.removed_dirs == 3 and not report.strays
        assert os.listdir(point) == ["lost+found"]


@pytest.mark.timeout(60)
def test_two_services_with_their_own_host_names_share_the_data_file(tmp_path: Path,
                                                                    root_only: None) -> None:
    with ext4_image(tmp_path, 64) as point:
        target_path = point / "probe"
        configs = {}
        for host in HOSTS:
            configs[host] = tmp_path / f"{host}.toml"
            configs[host].write_text(textwrap.dedent(f"""\
                host = "{host}"
                database = "{tmp_path / host / 'slowdown.db'}"
                [[target]]
                name = "t"
                path = "{target_path}"
                data_size = "8MiB"
                write_size = "2MiB"
                pool_files = 20
                pool_dirs = 2
            """))
        target_path.mkdir()
        done = [subprocess.run([sys.executable, "-m", "slowdown.probe.command.main", "--config",
                                str(configs[h]), "prepare", "--no-progress"],
                               capture_output=True, text=True, timeout=60) for h in HOSTS]
        assert [d.returncode for d in done] == [0, 0], [d.stderr for d in done]
        assert "shared data file" in done[0].stdout and "created (8MiB" in done[0].stdout
        assert "unchanged (8MiB, created by host node-a)" in done[1].stdout
        shared = target_path / ".slowdown" / "shared" / "data.bin"
        before = identity(shared)
        services = [start_service(configs[h], "--duration", "4s") for h in HOSTS]
        for proc in services:
            out = wait_service(proc, 60)
            assert proc.returncode == 0, out
        assert identity(shared) == before
        for host in HOSTS:
            by_op: dict[str, list] = {}
            for rec in records(tmp_path / host / "slowdown.db"):
                assert rec.host == host
                by_op.setdefault(rec.op, []).append(rec)
            assert sorted(by_op) == sorted(OPS), host
            for op in ("data-read", "data-write"):
                assert sum(r.histogram.count for r in by_op[op]) >= 2, (host, op)
                assert sum(r.errors for r in by_op[op]) == 0, (host, op)


# --- one writer --------------------------------------------------------------------------


def spawn_prepare(target: Target, host: str, *, go: Path | None = None,
                  out: Path | None = None, wait: float = 0.0) -> subprocess.Popen:
    """prepare in a child process (after `go` exists, when given), its report to `out`."""
    code = textwrap.dedent(f"""
        import json, os, time
        from pathlib import Path
        from slowdown.analysis.config import DataSize, Target
        from slowdown.probe.workspaces import shared_data as shared
        from slowdown.probe.workspaces.prepare import prepare
        shared.WAIT_POLL = 0.05
        target = Target(name="t", path=Path({str(target.path)!r}),
                        data_size=DataSize(bytes={target.data_size.bytes}),
                        pool_files={target.pool_files}, pool_dirs={target.pool_dirs},
                        data_file="shared", write_size={target.write_size})
        go = {str(go) if go else None!r}
        while go and not os.path.exists(go):
            time.sleep(0.001)
        r = prepare(target, {host!r}, progress=False, wait={wait})
        out = {str(out) if out else None!r}
        if out:
            Path(out).write_text(json.dumps({{"action": r.shared.action,
                "written": r.shared.written, "creator": r.shared.creator}}))
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    return subprocess.Popen([sys.executable, "-c", code], env=env)


@pytest.mark.timeout(60)
def test_concurrent_prepares_create_the_shared_file_once(tmp_path: Path) -> None:
    target = shared_target(tmp_path / "target", data_mib=64, files=400, dirs=4)
    (tmp_path / "target").mkdir()
    go = tmp_path / "go"
    outs = {h: tmp_path / f"{h}.json" for h in HOSTS}
    procs = [spawn_prepare(target, h, go=go, out=outs[h], wait=30) for h in HOSTS]
    time.sleep(1.0)  # both children started and are spinning on the go file
    go.touch()
    assert [p.wait(50) for p in procs] == [0, 0]
    reports = {h: json.loads(outs[h].read_text()) for h in HOSTS}
    written = sorted(r["written"] for r in reports.values())
    assert written == [0, 64 * MIB], reports
    writer = next(h for h, r in reports.items() if r["written"])
    other = next(h for h in HOSTS if h != writer)
    assert reports[writer]["action"] == "created"
    assert reports[other]["action"] == "unchanged" and reports[other]["creator"] == writer
    manifest = read_shared_manifest(shared_dir(target))
    assert manifest.host == writer and manifest.complete and manifest.data_size == 64 * MIB
    assert all_stamped(shared_dir(target) / "data.bin")
    assert sorted(os.listdir(tmp_path / "target" / ".slowdown")) == [*HOSTS, "shared"]
    for host in HOSTS:
        assert ok(ticks(Probes(Workspace.of(target, host).dir), 3))


@pytest.mark.timeout(60)
def test_a_node_that_finds_another_writing_prepares_its_own_part_and_can_wait(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = shared_target(tmp_path / "target")
    (tmp_path / "target" / ".slowdown").mkdir(parents=True)
    claim = try_claim(tmp_path / "target" / ".slowdown" / "shared.claim", "node-x")
    assert isinstance(claim, Claim)
    report = prepare(target, "node-b", progress=False)
    assert report.action == "created" and report.shared.busy
    assert report.shared.holder.host == "node-x" and report.mode is None
    assert not shared_dir(target).exists()
    answers = ticks(Probes(Workspace.of(target, "node-b").dir), 1)
    assert all("shared data file is not prepared" in a["msg"] for a in answers if "op" in a)

    config = SimpleNamespace(host="node-b", targets=(target,))
    result = CliRunner().invoke(prepare_command, ["--no-progress"], obj={"config": config})
    assert result.exit_code == 1
    assert "t: unchanged" in result.output
    assert "is being prepared by host node-x" in result.output
    assert "run prepare again later (or with --wait)" in result.output

    monkeypatch.setattr(shared_module, "WAIT_POLL", 0.05)
    threading.Timer(0.5, claim.release).start()  # node-x gives up; node-b takes over
    t0 = time.monotonic()
    report = prepare(target, "node-b", progress=False, wait=20)
    assert 0.4 < time.monotonic() - t0 < 10
    assert report.shared.action == "created" and report.shared.creator == "node-b"
    assert report.mode in (DIRECT, FADVISE)
    assert ok(ticks(Probes(Workspace.of(target, "node-b").dir), 3))
    result = CliRunner().invoke(prepare_command, ["--no-progress"], obj={"config": config})
    assert result.exit_code == 0, result.output
    assert "shared data file" in result.output and "unchanged (8MiB, created by host " \
        "node-b)" in result.output


@pytest.mark.timeout(60)
def test_a_prepare_killed_while_writing_the_shared_file_is_taken_over(tmp_path: Path) -> None:
    target = shared_target(tmp_path / "target", data_mib=256)
    (tmp_path / "target").mkdir()
    data = shared_dir(target) / "data.bin"
    kill_when(spawn_prepare(target, "node-a"),
              lambda: data.exists() and data.stat().st_size >= 24 * MIB)
    claim = tmp_path / "target" / ".slowdown" / "shared.claim"
    manifest = read_shared_manifest(shared_dir(target))
    assert claim.exists() and manifest.host == "node-a" and not manifest.complete

    # Another node cannot know that node-a died: its claim is live until it is silent long.
    report = prepare(target, "node-b", progress=False)
    assert report.shared.busy and report.shared.holder.host == "node-a"
    old = time.time() - STALE_AFTER - 10
    os.utime(claim, (old, old))
    report = prepare(target, "node-b", progress=False)
    assert report.action == "unchanged" and report.shared.action == "resumed"
    assert 0 < report.shared.written <= 256 * MIB - 24 * MIB
    assert report.shared.creator == "node-a"  # who created it; node-b finished it
    assert data.stat().st_size == 256 * MIB and all_stamped(data)
    assert not claim.exists()
    assert read_shared_manifest(shared_dir(target)).complete


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


@pytest.mark.timeout(30)
def test_claims_of_the_dead_are_taken_over_and_a_holder_notices_it_lost(tmp_path: Path) -> None:
    path = tmp_path / "shared.claim"
    # The same host knows its holder died (pid gone, or an earlier boot): no wait.
    for boot in (boot_id(), "an-earlier-boot"):
        pid = dead_pid() if boot == boot_id() else os.getpid()
        path.write_text(json.dumps({"host": "node-a", "pid": pid, "boot": boot,
                                    "since": time.time(), "token": "t0"}))
        assert isinstance(try_claim(path, "node-b"), Holder)  # another host waits
        taken = try_claim(path, "node-a")
        assert isinstance(taken, Claim)
        taken.release()
        assert not path.exists()
    # A live holder keeps it; a claim file left empty by a kill is stale once old.
    mine = try_claim(path, "node-a")
    assert isinstance(mine, Claim)
    assert isinstance(try_claim(path, "node-a"), Holder)  # this pid runs
    path.write_text("")
    assert isinstance(try_claim(path, "node-b"), Holder)
    old = time.time() - STALE_AFTER - 1
    os.utime(path, (old, old))
    theirs = try_claim(path, "node-b")
    assert isinstance(theirs, Claim)
    with pytest.raises(ClaimLost, match="taken over by host node-b"):
        mine.beat(force=True)
    mine.release()  # not ours any more: left alone
    assert json.loads(path.read_text())["host"] == "node-b"
    theirs.release()
    assert not path.exists()


# --- safety ------------------------------------------------------------------------------


@pytest.mark.timeout(30)
def test_a_shared_directory_made_before_prepare_is_used_and_kept(tmp_path: Path) -> None:
    target = shared_target(tmp_path / "target")
    shared = shared_dir(target)
    shared.mkdir(parents=True)  # as `lfs setstripe -c -1` needs it, before the first prepare
    prepare(target, "node-a", progress=False)
    manifest = read_shared_manifest(shared)
    assert manifest.dir_existed and manifest.parents == []
    cleanup(target, "node-a")
    report = cleanup_shared(target, "node-a")
    assert report.removed_files == 2 and report.removed_dirs == 0
    assert os.listdir(tmp_path / "target" / ".slowdown") == ["shared"]
    assert os.listdir(shared) == []


@pytest.mark.timeout(30)
def test_what_slowdown_did_not_create_is_never_touched(tmp_path: Path) -> None:
    target = shared_target(tmp_path / "target")
    shared = shared_dir(target)
    shared.mkdir(parents=True)
    (shared / "data.bin").write_bytes(b"someone's" * 1000)
    with pytest.raises(ForeignWorkspaceError, match="without a slowdown MANIFEST"):
        prepare(target, "node-a", progress=False)
    assert sorted(os.listdir(shared.parent)) == ["shared"]
    with pytest.raises(ForeignWorkspaceError, match="no slowdown MANIFEST"):
        cleanup_shared(target, "node-a")
    assert (shared / "data.bin").read_bytes() == b"someone's" * 1000

    other = shared_target(tmp_path / "other")
    prepare(other, "node-a", progress=False)
    cleanup(other, "node-a")
    (shared_dir(other) / "notes.txt").write_text("mine")
    report = cleanup_shared(other, "node-a")
    assert report.strays == ["notes.txt"] and report.manifest_kept
    assert sorted(os.listdir(shared_dir(other))) == ["MANIFEST", "notes.txt"]

    with pytest.raises(WorkspaceError, match="host name 'shared'"):
        prepare(shared_target(tmp_path / "third"), "shared", progress=False)


@pytest.mark.timeout(30)
def test_cli_cleanup_leaves_the_shared_file_unless_asked(tmp_path: Path) -> None:
    target = shared_target(tmp_path / "target")
    for host in HOSTS:
        prepare(target, host, progress=False)
    runner = CliRunner()
    config = {h: SimpleNamespace(host=h, targets=(target,)) for h in HOSTS}
    result = runner.invoke(cleanup_command, ["--yes"], obj={"config": config["node-a"]})
    assert result.exit_code == 0, result.output
    assert "the shared data file stays for the other nodes" in result.output
    result = runner.invoke(cleanup_command, ["--yes", "--shared"],
                           obj={"config": config["node-a"]})
    assert result.exit_code == 1
    assert "no workspace at" in result.output and "still read by the workspaces of node-b" in (
        result.output)
    assert shared_dir(target).exists()
    result = runner.invoke(cleanup_command, ["--yes", "--shared"],
                           obj={"config": config["node-b"]})
    assert result.exit_code == 0, result.output
    assert f"removed 2 files and 3 directories of {shared_dir(target)}" in result.output
    assert not (tmp_path / "target").exists()
