"""The md rotation status file, ``md-workbench.status``: md-workbench's ``--run-info-file``
format (``pos: <n>``) with the probe's exact step on a line of its own (``slowdown-step: <k>``).

Why both lines, and how md-workbench and the probe continue each other's rotation, is told in
``layout/manifest.py``'s docstring, beside the MANIFEST that names the pool.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import NamedTuple

from slowdown.analysis.atomic_write import replace_whole
from slowdown.probe.layout.manifest import ManifestError
from slowdown.probe.layout.names import tmp_path

_POS_RE = re.compile(rb"\A\s*pos:\s*([+-]?\d+)")
_STEP_RE = re.compile(rb"^slowdown-step:\s*(\d+)\s*$", re.MULTILINE)


def format_status(step: int, dirs: int, pos: int | None = None) -> bytes:
    """The status file for rotation step `step` of a pool with `dirs` data sets; `pos` is the
    round md-workbench continues from (default: the round of `step`)."""
    return f"pos: {step // dirs if pos is None else pos}\nslowdown-step: {step}\n".encode()


class Status(NamedTuple):
    """A status file read: md-workbench's round, the step to continue from, and whether that
    step is ours (our exact step line, written with this round) or only `pos * dirs`."""

    pos: int
    step: int
    ours: bool


def parse_status_full(data: bytes, dirs: int, where: str = "status file") -> Status:
    """The status file's round and step (ours or md-workbench's)."""
    match = _POS_RE.match(data)
    if match is None:
        raise ManifestError(f"{where}: no 'pos: <n>' line (md-workbench run-info format)")
    pos = int(match.group(1))
    if pos < 0:
        raise ManifestError(f"{where}: negative position {pos}")
    step = _STEP_RE.search(data)
    if step is not None:
        k = int(step.group(1))
        # Ours only while md-workbench has not rewritten the file: we write the round of the
        # step, or the next one (the round md-workbench can continue from mid-round).
        if k // dirs <= pos <= k // dirs + 1:
            return Status(pos, k, True)
    return Status(pos, pos * dirs, False)


def parse_status(data: bytes, dirs: int, where: str = "status file") -> int:
    """The rotation step recorded in a status file (ours or md-workbench's)."""
    return parse_status_full(data, dirs, where).step


def read_status_full(path: Path, dirs: int) -> Status | None:
    """The status file at `path`, None when there is none."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ManifestError(f"{path}: cannot open: {exc.strerror}") from exc
    try:
        data = os.read(fd, 4096)
    finally:
        os.close(fd)
    if not data.strip():  # a power cut before the data reached the disk: as if none
        return None
    return parse_status_full(data, dirs, str(path))


def read_status(path: Path, dirs: int) -> int | None:
    """The step in the status file at `path`, None when there is none."""
    status = read_status_full(path, dirs)
    return None if status is None else status.step


def write_status(path: Path, step: int, dirs: int, *, pos: int | None = None,
                 fsync: bool = True) -> None:
    replace_whole(path, format_status(step, dirs, pos), 0o644, temp=tmp_path(path), sync=fsync)
