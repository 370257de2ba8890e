"""A testbed's daemon held to a share of one CPU: a cpu cgroup of its own (cgroup v1's
``cpu.cfs_quota_us``), named after the testbed's prefix so that its ``clean`` removes it,
with a busy loop beside it in the group when asked (a quota alone barely slows a daemon that
needs little CPU; a loaded server is one whose CPU is used up)."""

from __future__ import annotations

import contextlib
import subprocess
from pathlib import Path

CPU_CGROUPS = Path("/sys/fs/cgroup/cpu")


class CpuQuotas:
    """The quotas and busy loops one testbed put on its daemons (``ledger``: the testbed's,
    with its ``prefix`` and the ``cgroups`` its ``clean`` removes)."""

    def __init__(self, ledger) -> None:
        self.ledger = ledger
        self.busy: dict[int, subprocess.Popen] = {}  # daemon pid -> the busy loop beside it

    def slow_down(self, pid: int, percent: float, busy: bool) -> Path:
        """Hold ``pid`` (the process with all its threads) to ``percent`` of one CPU."""
        group = CPU_CGROUPS / f"{self.ledger.prefix}-{pid}"
        group.mkdir()
        self.ledger.cgroups.append(group)
        (group / "cpu.cfs_period_us").write_text("100000")
        (group / "cpu.cfs_quota_us").write_text(str(int(1000 * percent)))
        (group / "cgroup.procs").write_text(str(pid))
        if busy:  # its command line names the prefix: ``clean`` ends it if the test does not
            loop = subprocess.Popen(["sh", "-c", "while :; do :; done",
                                     f"{self.ledger.prefix}-busy"])
            self.busy[pid] = loop
            (group / "cgroup.procs").write_text(str(loop.pid))
        return group

    def release(self, pid: int) -> None:
        """The daemon back in the root cpu cgroup, at full speed, its busy loop ended."""
        with contextlib.suppress(ProcessLookupError, OSError):
            (CPU_CGROUPS / "cgroup.procs").write_text(str(pid))
        loop = self.busy.pop(pid, None)
        if loop is not None:
            loop.kill()
            loop.wait()


__all__ = ["CPU_CGROUPS", "CpuQuotas"]
