"""The probes' registry: the built-in probes name this release's ops (the vocabulary the
reading side knows), and a probe that only a test registers runs through the real worker
process, runner and recorder, with the built-in ones, without a line of theirs changed."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from slowdown.analysis.config import DataSize, Target
from slowdown.analysis.words import OPS
from slowdown.probe.layout.names import STATE_FILES, WORKSPACE_FILES
from slowdown.probe.probes import (
    probe_ops,
    probe_state_files,
    register,
    registered,
    unregister,
)
from slowdown.probe.runtime.recorder import Recorder
from slowdown.probe.runtime.runner import TargetRunner
from slowdown.probe.workspaces.prepare import Workspace, prepare
from tests.kit.tiny_probe import TinyProbe

ROOT = Path(__file__).resolve().parent.parent
MIB = 1 << 20


SITECUSTOMIZE = f"""import sys
sys.path.insert(0, {str(ROOT)!r})
from slowdown.probe.probes import register
from tests.kit.tiny_probe import TinyProbe
register(TinyProbe)
"""


def test_the_built_in_probes_name_the_ops_the_readers_know() -> None:
    assert tuple(op for probe in registered()[:2] for op in probe.ops) == OPS
    assert [probe.name for probe in registered()[:2]] == ["data", "md"]
    assert (*probe_state_files(), *WORKSPACE_FILES) == STATE_FILES


def test_a_probe_must_bring_ops_of_its_own() -> None:
    class Again(TinyProbe):
        ops = ("md-stat",)

    with pytest.raises(ValueError, match="already named"):
        register(Again)
    assert probe_ops() == OPS


def test_the_test_probe_is_not_in_the_package() -> None:
    assert TinyProbe not in registered()
    assert not [p for p in (ROOT / "probe").rglob("*.py") if "tiny" in p.read_text()]


def test_a_registered_probe_runs_in_the_worker_and_is_recorded(tmp_path, monkeypatch) -> None:
    target = Target(name="t", path=tmp_path / "fs", data_size=DataSize(bytes=4 * MIB),
                    pool_files=20, pool_dirs=2)
    (tmp_path / "fs").mkdir()
    prepare(target, "node-a", progress=False)
    ws = Workspace.of(target, "node-a").dir
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    monkeypatch.setenv("PYTHONPATH", str(site))  # the worker registers it as this process
    register(TinyProbe)
    try:
        assert probe_ops() == (*OPS, "tiny-stat", "tiny-read")
        recorder = Recorder("node-a")
        runner = TargetRunner("t", ws, recorder)
        try:
            for _ in range(3):
                ended = runner.status.last_end
                assert runner.tick()
                # The run's end, not its last op's: in_flight() is empty once every op has
                # returned, while the answers may still be on their way (the next tick skips).
                deadline = time.monotonic() + 30
                while runner.status.last_end == ended and time.monotonic() < deadline:
                    time.sleep(0.02)
                assert runner.status.last_end != ended, "the run did not end"
        finally:
            runner.close()
        assert runner.status.errors == 0, runner.status.last
        records, _ = recorder.take(float("inf"))
        counts: dict[str, int] = {}
        for rec in records:
            counts[rec.op] = counts.get(rec.op, 0) + rec.histogram.count
        assert counts == {op: 3 for op in probe_ops()}
        assert {rec.op for rec in records if rec.errors} == set()
    finally:
        unregister(TinyProbe)
    assert probe_ops() == OPS
