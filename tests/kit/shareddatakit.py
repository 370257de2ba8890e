"""Two nodes, one data file: a target whose data file is shared, where it lies, its identity,
and the ticks of probes run as each node."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np

from slowdown.analysis.config import DataSize, Target
from slowdown.probe.probes.worker import Probes
from slowdown.probe.workspaces.data_file import STAMP_MAGIC

MIB = 1 << 20


HOSTS = ("node-a", "node-b")


def shared_target(path: Path, *, data_mib: int = 8, write_mib: int = 2, files: int = 8,
                  dirs: int = 2) -> Target:
    return Target(name="t", path=path, data_size=DataSize(bytes=data_mib * MIB),
                  pool_files=files, pool_dirs=dirs, data_file="shared",
                  write_size=write_mib * MIB)


def identity(path: Path) -> tuple:
    """Inode, size, mtime and content: equal only if nobody wrote the file."""
    st = os.stat(path)
    return st.st_ino, st.st_size, st.st_mtime_ns, hashlib.sha256(path.read_bytes()).hexdigest()


def all_stamped(path: Path) -> bool:
    data = np.fromfile(path, dtype=np.uint64)
    return bool(np.all(data[:: 4096 // 8] == STAMP_MAGIC))


def shared_dir(target: Target) -> Path:
    return Path(target.path) / ".slowdown" / "shared"


def ticks(probes: Probes, n: int) -> list[dict]:
    """What the worker answers to `n` ticks: every op line and the end lines."""
    answers: list[dict] = []
    for tick in range(n):
        probes.tick(tick, answers.append)
    return answers


def close(probes: Probes) -> None:
    if probes.data is not None:
        probes.data.close()


def ok(answers: list[dict]) -> bool:
    return not [a for a in answers if "err" in a or a.get("skip")]
