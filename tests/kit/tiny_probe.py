"""A probe that only the tests register: two ops on a workspace's MANIFEST, each timed,
reported with where it went (tests/test_probe_registry.py runs it in the real worker)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from slowdown.probe.layout.names import MANIFEST_NAME
from slowdown.probe.probes import Place, Probe, Report, Result


class TinyProbe(Probe):
    """Two ops on the workspace's MANIFEST: a stat and a whole read, each timed."""

    name = "tiny"
    ops = ("tiny-stat", "tiny-read")

    def __init__(self, path: str) -> None:
        self.path = path

    @classmethod
    def open(cls, workspace: Path, *, sync: bool = False) -> TinyProbe:
        return cls(str(workspace / MANIFEST_NAME))

    def step(self, report: Report) -> None:
        t0 = time.perf_counter()
        os.stat(self.path)
        report(Result("tiny-stat", time.perf_counter() - t0, where=Place(self.path)))
        t0 = time.perf_counter()
        with open(self.path, "rb") as f:
            size = len(f.read())
        report(Result("tiny-read", time.perf_counter() - t0, where=Place(self.path, 0)))
        assert size > 0
