"""Per-server counters for Prometheus: which server a fleet's ops went to, and how long they took.

Per (target, probe, server) three counters, added to as the recorder is told which server
served each op (``Recorder.served``: after the op, outside its timed region, in the reader
thread of the worker's pipe; a dictionary look-up and three additions, under a lock no scrape
holds for longer than a copy):

- ``slowdown_server_ops_total``: ops that returned with a latency (the per-server
  histogram's count in ``server_tens``);
- ``slowdown_server_op_seconds_total``: those latencies, summed;
- ``slowdown_server_op_errors_total``: ops that failed (as the per-server records count them).

So ``sum by (target, server) (rate(..._seconds_total[10m])) / sum by (target, server)
(rate(..._ops_total[10m]))`` over every host is a fleet's mean latency per server, exact.
Why counters and not buckets: docs/SERVERS.md, "In Prometheus".

Per probe (``data``, ``md``), not per op: a server serves every op of a probe alike, and
one label value per probe instead of per op costs a third of the series.

**The budget.** The first ``max_servers`` servers a target's ops go to (``[metrics]
max_servers``, default 100) get series of their own for as long as the service runs; the ops
of every further server add up in ``server="other"``, so totals always add up and nothing is
dropped, and a counter never moves from one series to another. ``unknown`` is a server like
any other: a filesystem without a resolver costs that one server's series. The gauge
``slowdown_servers`` says how many servers each target's ops went to, the folded ones
included: above ``max_servers``, raise it.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

OTHER = "other"  # the servers beyond the budget, together
COUNTERS = 3  # series per (target, probe, server)


def server_series(servers: int, probes: int = 2) -> int:
    """The most per-server series of one target: ``servers`` of their own and ``other``,
    for each probe, three counters each, and the target's ``slowdown_servers`` gauge."""
    return (servers + 1) * probes * COUNTERS + 1


class ServerCounters:
    """The per-server counters of one service; a collector for prometheus_client.

    ``probe_of`` maps an op to the name of its probe (the label ``probe``).
    """

    def __init__(self, host: str, max_servers: int, probe_of: Mapping[str, str]) -> None:
        self.host = host
        self.max_servers = max_servers
        self.probe_of = dict(probe_of)
        self._lock = threading.Lock()
        self._own: dict[str, set[str]] = {}  # per target: the servers with series of their own
        self._folded: dict[str, set[str]] = {}  # per target: the servers counted in OTHER
        # (target, probe, server or OTHER) -> [ops with a latency, their seconds, errors]
        self._counts: dict[tuple[str, str, str], list[float]] = {}

    def served(self, target: str, op: str, server: str, latency: float | None, wall: float,
               failed: bool = False) -> None:
        """A recorder observer: ``server`` served ``op`` (same arguments as ``Recorder.served``)."""
        probe = self.probe_of.get(op, op)
        with self._lock:
            own = self._own.setdefault(target, set())
            label = server
            if server not in own:
                if len(own) < self.max_servers:
                    own.add(server)
                else:
                    self._folded.setdefault(target, set()).add(server)
                    label = OTHER
            counts = self._counts.get((target, probe, label))
            if counts is None:
                counts = self._counts[(target, probe, label)] = [0, 0.0, 0]
            if latency is not None:
                counts[0] += 1
                counts[1] += latency
            if latency is None or failed:
                counts[2] += 1

    def describe(self):
        return []

    def collect(self):
        with self._lock:
            counts = {key: tuple(value) for key, value in self._counts.items()}
            seen = {t: len(own) + len(self._folded.get(t, ())) for t, own in self._own.items()}
        labels = ("host", "target", "probe", "server")
        families = (
            CounterMetricFamily("slowdown_server_ops", "Probe operations that returned with a "
                                "latency, per server that served them (server=\"other\": the "
                                "servers beyond [metrics] max_servers).", labels=labels),
            CounterMetricFamily("slowdown_server_op_seconds", "Latencies of those operations, "
                                "summed: over ops_total, the mean per server.", labels=labels),
            CounterMetricFamily("slowdown_server_op_errors", "Probe operations that failed, per "
                                "server.", labels=labels))
        for (target, probe, server), values in sorted(counts.items()):
            for family, value in zip(families, values):
                family.add_metric([self.host, target, probe, server], value)
        yield from families
        servers = GaugeMetricFamily("slowdown_servers", "Servers the target's ops went to since "
                                    "the service started, those in server=\"other\" included.",
                                    labels=("host", "target"))
        for target, n in sorted(seen.items()):
            servers.add_metric([self.host, target], n)
        yield servers


__all__ = ["COUNTERS", "OTHER", "ServerCounters", "server_series"]
