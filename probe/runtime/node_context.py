"""Node context from psutil each minute: "my node is busy" apart from "the filesystem is slow".

The CPU share is measured between two of the sampler's own readings of the CPU times, never
by ``psutil.cpu_percent``, which keeps its last reading per thread: its first call in a
thread (the first minute after a start, and the first flush run by each of the scheduler's
pool threads) compared the times with themselves and said 0 %. A span too short to mean
anything (under ``MIN_CPU_SPAN``) gives no CPU share (NULL): unknown, never a made-up 0.
"""

from __future__ import annotations

import os
import threading
import time

import psutil

from slowdown.analysis.store.records import NodeContext

MIN_CPU_SPAN = 5.0  # seconds of wall time between two readings for a CPU share to mean much


class NodeSampler:
    """Counters are cumulative; each sample reports what happened since the previous one."""

    def __init__(self, host: str) -> None:
        self.host = host
        self._lock = threading.Lock()  # samples come from the scheduler's pool threads
        self._cpu = (time.monotonic(), psutil.cpu_times())
        self._disk = self._disk_counters()
        self._net = self._net_counters()

    @staticmethod
    def _disk_counters() -> tuple[int, int, int, int] | None:
        c = psutil.disk_io_counters(perdisk=False)
        return None if c is None else (c.read_bytes, c.write_bytes, c.read_count, c.write_count)

    @staticmethod
    def _net_counters() -> tuple[int, int] | None:
        c = psutil.net_io_counters(pernic=False)
        return None if c is None else (c.bytes_recv, c.bytes_sent)

    def sample(self, minute_start: int) -> NodeContext:
        with self._lock:
            disk, net = self._disk_counters(), self._net_counters()
            cpu = (time.monotonic(), psutil.cpu_times())
            values: dict[str, float | int | None] = {
                "load1": os.getloadavg()[0],
                "cpu": (cpu_share(self._cpu[1], cpu[1])
                        if cpu[0] - self._cpu[0] >= MIN_CPU_SPAN else None),
                "memory": psutil.virtual_memory().percent,
            }
            if disk and self._disk:
                d = [max(0, a - b) for a, b in zip(disk, self._disk)]
                values.update(disk_read_bytes=d[0], disk_write_bytes=d[1], disk_reads=d[2],
                              disk_writes=d[3])
            if net and self._net:
                n = [max(0, a - b) for a, b in zip(net, self._net)]
                values.update(net_rx_bytes=n[0], net_tx_bytes=n[1])
            self._cpu, self._disk, self._net = cpu, disk, net
        return NodeContext(self.host, minute_start, values)


def cpu_share(before, after) -> float | None:
    """Percent of CPU time busy between two ``psutil.cpu_times()`` (as ``cpu_percent``
    counts it: guest time is already in user time, idle and iowait are not busy); None when
    no time passed."""
    delta = {name: max(0.0, getattr(after, name) - getattr(before, name))
             for name in after._fields}
    total = sum(delta.values()) - delta.get("guest", 0.0) - delta.get("guest_nice", 0.0)
    idle = delta.get("idle", 0.0) + delta.get("iowait", 0.0)
    if total <= 0:
        return None
    return round(max(0.0, min(100.0, (total - idle) / total * 100)), 1)
