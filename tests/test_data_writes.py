"""What a data-write carries and does: fresh bytes every time (never what a read brought in,
never the previous write's), and with the target's `sync = true` an fdatasync inside the
timed write (seen with strace on the real worker)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from slowdown.analysis.config import DataSize, Target
from slowdown.probe.probes.data import DIRECT, DataProbe
from slowdown.probe.workspaces.prepare import Workspace, prepare

MIB = 1 << 20
PAGE = 4096


def pages(data: bytes) -> list[bytes]:
    return [data[i:i + PAGE] for i in range(0, len(data), PAGE)]


@pytest.mark.timeout(30)
def test_every_write_carries_fresh_bytes(tmp_path: Path) -> None:
    path = tmp_path / "one-block.bin"
    path.write_bytes(os.urandom(MIB))  # one block: every read and write is at offset 0
    with DataProbe(path) as probe:
        probe.read_block()
        read = bytes(probe._buf)
        assert read == path.read_bytes()
        written = []
        for _ in range(3):
            probe.fresh_bytes()
            probe.write_block()
            written.append(path.read_bytes())
        probe.write_block()  # without fresh_bytes first: the write makes its own
        written.append(path.read_bytes())
    for before, after in zip([read, *written], written):
        # every 4 KiB page differs from the one before it: no layer can deduplicate a write
        assert all(a != b for a, b in zip(pages(before), pages(after)))
    assert len({*pages(read), *(p for w in written for p in pages(w))}) == 5 * MIB // PAGE


def fdatasyncs(tmp_path: Path, *worker_args: str, ticks: int = 3) -> tuple[int, str]:
    """The fdatasync calls of a real worker that ran `ticks` runs, and its data mode."""
    target = Target(name="t", path=tmp_path / "target", data_size=DataSize(bytes=4 * MIB),
                    pool_files=20, pool_dirs=2)
    prepare(target, "node-a", progress=False)
    ws = Workspace.of(target, "node-a").dir
    trace = tmp_path / f"strace{'-'.join(worker_args)}.txt"
    done = subprocess.run(
        [shutil.which("strace") or "strace", "-f", "-qq", "-e", "trace=fdatasync", "-o",
         str(trace), sys.executable, "-m", "slowdown.probe.probes.worker", str(ws), *worker_args],
        input="".join(json.dumps({"tick": n}) + "\n" for n in range(1, ticks + 1)),
        capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    ends = [json.loads(line) for line in done.stdout.splitlines() if '"end"' in line]
    assert len(ends) == ticks and all(e["mode"] for e in ends), done.stdout
    calls = re.findall(r"fdatasync\(\d+\)\s+= 0", trace.read_text())
    return len(calls), ends[-1]["mode"]


@pytest.mark.timeout(60)
def test_sync_true_adds_one_fdatasync_to_each_write(tmp_path: Path) -> None:
    plain, mode = fdatasyncs(tmp_path)
    assert mode == DIRECT  # ext4 takes O_DIRECT: only sync = true makes the worker sync
    assert plain == 0
    (tmp_path / "sync").mkdir()
    synced, mode = fdatasyncs(tmp_path / "sync", "--sync")
    assert mode == DIRECT
    assert synced == 3


@pytest.mark.timeout(30)
def test_the_service_hands_sync_true_to_the_worker(tmp_path: Path) -> None:
    from slowdown.analysis.config import loads
    from slowdown.probe.runtime.recorder import Recorder
    from slowdown.probe.runtime.runner import TargetRunner

    config = loads(f'[[target]]\nname = "t"\npath = "{tmp_path}"\nsync = true\n'
                   f'[[target]]\nname = "u"\npath = "{tmp_path / "u"}"\n')
    assert [t.sync for t in config.targets] == [True, False]
    for target in config.targets:
        runner = TargetRunner(target.name, tmp_path, Recorder("h"), sync=target.sync)
        runner.start()
        try:
            pid = runner._current.pid
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            assert (b"--sync" in argv) is target.sync
        finally:
            runner.close()
