"""A probe worker run as the service runs it (a subprocess with its progress page), on a
workspace prepared for one target."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
from pathlib import Path

from slowdown.analysis.config import DataSize, Target
from slowdown.probe.probes.worker_position import Progress
from slowdown.probe.workspaces.prepare import Workspace, prepare

MIB = 1 << 20

# Fault rules for a hang after a run's last op: md-write's create answers ENOTCONN (a
# descriptor the filesystem declared dead), so after its last op the run lets go of the md
# probe and saves its position, and that save hangs.
DEAD_MD_WRITE = {"ops": ["create"], "path": "*file-*", "error": "ENOTCONN"}
HUNG_SAVE = {"ops": ["create", "open", "write"], "path": "*md-workbench.status.tmp",
             "hang": True}


def workspace(path: Path) -> Path:
    target = Target(name="t", path=path, data_size=DataSize(bytes=4 * MIB), pool_files=20,
                    pool_dirs=2)
    prepare(target, "node-a", progress=False)
    return Workspace.of(target, "node-a").dir


class Worker:
    """A worker started as the service starts it, read byte by byte as they arrive."""

    def __init__(self, ws: Path) -> None:
        self.progress, fd = Progress.create()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "slowdown.probe.probes.worker", str(ws),
             "--progress-fd", str(fd)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, pass_fds=(fd,))
        os.close(fd)

    def tick(self, n: int) -> None:
        self.process.stdin.write(json.dumps({"tick": n}).encode() + b"\n")
        self.process.stdin.flush()

    def read(self, timeout: float) -> bytes:
        """What one read returns (one write of the worker, unless it wrote again meanwhile),
        or b"" when nothing came within ``timeout``."""
        ready, _, _ = select.select([self.process.stdout], [], [], timeout)
        return os.read(self.process.stdout.fileno(), 1 << 16) if ready else b""

    def run(self, timeout: float) -> list[dict]:
        """A whole run's lines, up to its end: one write, or several when the run was slow
        (a first run on FUSE, opening its files on a loaded machine, may pass HOLD_ANSWERS)."""
        lines: list[dict] = []
        while not lines or "end" not in lines[-1]:
            chunk = self.read(timeout)
            assert chunk, f"no end of the run within {timeout} s: {lines}"
            lines += [json.loads(line) for line in chunk.splitlines()]
        return lines

    def close(self) -> None:
        self.process.kill()
        self.process.wait()
