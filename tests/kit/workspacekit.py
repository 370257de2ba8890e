"""Workspaces for tests: a target of a chosen size, the tree of what a workspace holds, and
killing a process (a prepare) at a chosen moment of its work."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from slowdown.analysis.config import DataSize, Target
from slowdown.probe.workspaces.prepare import Workspace, prepare


def kill_when(proc: subprocess.Popen, ready: Callable[[], bool], timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    try:
        while not ready():
            assert proc.poll() is None, "prepare finished before it could be interrupted"
            assert time.monotonic() < deadline, "prepare made no progress"
            time.sleep(0.001)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()


HOST = "node-a"


MIB = 1 << 20


def make_target(path: Path, *, data_mib: int = 4, files: int = 40, dirs: int = 4,
                size: int = 3901, name: str = "t") -> Target:
    return Target(name=name, path=path, data_size=DataSize(bytes=data_mib * MIB),
                  pool_files=files, pool_dirs=dirs, object_size=size)


def prepared_workspace(path: Path, **kw) -> tuple[Target, Path]:
    """make_target(path, **kw) prepared for HOST: the target and its workspace directory."""
    target = make_target(path, **kw)
    prepare(target, HOST, progress=False)
    return target, Workspace.of(target, HOST).dir


def tree(root: Path) -> dict[str, tuple[int, int, int]]:
    """Every entry under root: (inode, size, mtime_ns), without following symlinks."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = os.lstat(p)
            out[str(p.relative_to(root))] = (st.st_ino, st.st_size, st.st_mtime_ns)
    return out
