"""Node context from psutil each minute: "my node is busy" apart from "the filesystem is slow"."""

from __future__ import annotations

import os

import psutil

from slowdown.analysis.store.records import NodeContext


class NodeSampler:
    """Counters are cumulative; each sample reports what happened since the previous one."""

    def __init__(self, host: str) -> None:
        self.host = host
        psutil.cpu_percent(interval=None)  # starts the CPU measurement interval
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
        disk, net = self._disk_counters(), self._net_counters()
        values: dict[str, float | int | None] = {
            "load1": os.getloadavg()[0],
            "cpu": psutil.cpu_percent(interval=None),
            "memory": psutil.virtual_memory().percent,
        }
        if disk and self._disk:
            d = [max(0, a - b) for a, b in zip(disk, self._disk)]
            values.update(disk_read_bytes=d[0], disk_write_bytes=d[1], disk_reads=d[2],
                          disk_writes=d[3])
        if net and self._net:
            n = [max(0, a - b) for a, b in zip(net, self._net)]
            values.update(net_rx_bytes=n[0], net_tx_bytes=n[1])
        self._disk, self._net = disk, net
        return NodeContext(self.host, minute_start, values)
