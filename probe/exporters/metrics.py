"""The Prometheus ``/metrics`` endpoint of the service (off unless ``[metrics]`` is configured).

A scrape never waits for a probe, a worker or the database. prometheus_client's HTTP server
answers in its own threads from memory only:

- latencies, errors and skipped ticks are counted as the recorder receives them (it tells
  its observers, see ``Recorder.observers``);
- what is in flight, the last tick and the service's state are copied once per tick by the
  tick job into an immutable snapshot, which a scrape only reads (an op stuck at the last
  tick keeps ageing in the answer, so the stuck age grows even between ticks);
- the slowdown gauges are computed once a minute after the flush, from the service's own
  database (``slowdown.analysis.stats.slowdown``), never while a scrape waits.

Latency histograms are classic Prometheus histograms whose ``le`` bounds are edges of the
store's exponential bucket scheme at scale ``EXPORT_SCALE`` (-1: bounds ``4 ** k``, from
4**-10 s (~1 us) to 4**5 s (~17 min), plus +Inf): 17 buckets per (host, target, op) instead
of the ~950 of scale 5. Every host exports the same bounds, which are edges of every finer
scale, so ``sum by (le)`` over hosts is an exact merge, and they line up with the ``buckets``
column the SQLite dashboard reads. ``series_budget`` states what a node costs Prometheus;
the per-server counters are ``server_metrics.py``'s.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.process_collector import ProcessCollector

from slowdown.analysis.config.model import MetricsConfig
from slowdown.analysis.histogram import mapping_for
from slowdown.analysis.stats.baseline import BaselineBook
from slowdown.analysis.stats.slowdown import op_slowdown, window_selection
from slowdown.analysis.store import Store, aggregate
from slowdown.analysis.store.records import NodeContext
from slowdown.analysis.units import format_duration
from slowdown.probe.exporters.server_metrics import ServerCounters, server_series
from slowdown.probe.probes import probe_ops, registered

if TYPE_CHECKING:
    from slowdown.analysis.config import Config
    from slowdown.probe.runtime.recorder import Recorder
    from slowdown.probe.runtime.runner import TargetRunner

log = logging.getLogger(__name__)

EXPORT_SCALE = -1
LOWEST_EDGE = -10  # the lowest bound is 4 ** LOWEST_EDGE seconds (2**-20, ~1 us)
HIGHEST_EDGE = 5  # the highest finite bound is 4 ** HIGHEST_EDGE seconds (1024 s)
# Series a node exports at most (``series_budget``; tests/test_metrics.py counts a scrape): a
# fixed part (9 of the service, 7 of the node, 6 process_*), and per target its skipped
# ticks, ticks, last tick and abandoned workers, the target's ratio per window and statistic,
# and per op its histogram (17 buckets, _sum, _count), errors, stuck age, the ratio and the
# observed value per window and statistic, the expected value and whether it is provisional
# per statistic (486 series for two targets with the default 3 windows and 2 statistics);
# and per target its per-server counters (``server_metrics.server_series``: 607 with the
# default ``max_servers`` of 100). Two targets, all defaults: 1,700 series.
FIXED_SERIES = 22
DEFAULT_MAX_SERVERS = MetricsConfig.max_servers


def series_budget(targets: int, windows: int = 3, statistics: int = 2, ops: int = 6,
                  servers: int = DEFAULT_MAX_SERVERS, probes: int = 2) -> int:
    """The most series one node exports with this many targets, windows and statistics,
    and ``servers`` as ``[metrics] max_servers`` (``probes``: the probes whose ops name them)."""
    buckets = HIGHEST_EDGE - LOWEST_EDGE + 2  # the finite bounds and +Inf
    per_op = buckets + 2 + 2 + 2 * windows * statistics + 2 * statistics
    per_target = ops * per_op + 4 + windows * statistics + server_series(servers, probes)
    return FIXED_SERIES + targets * per_target


def bucket_bounds() -> list[float]:
    """The finite ``le`` bounds: upper edges of the native buckets at ``EXPORT_SCALE``."""
    mapping = mapping_for(EXPORT_SCALE)
    return [mapping.upper_bound(k - 1) for k in range(LOWEST_EDGE, HIGHEST_EDGE + 1)]


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("slowdown")
    except Exception:
        return "unknown"


@dataclass(frozen=True)
class _TargetView:
    name: str
    in_flight: tuple[tuple[str, float], ...]  # (op, age in seconds at the snapshot)
    ticks: int
    last_tick: float | None
    abandoned: int


@dataclass(frozen=True)
class _Snapshot:
    """What the last tick saw; a scrape reads it and nothing else of the runners."""

    mono: float  # monotonic time of the snapshot
    targets: tuple[_TargetView, ...]
    pending_minutes: int
    written: int
    dropped: int
    tick_delay: float | None


@dataclass(frozen=True)
class _Slowdowns:
    """The gauges of one minute's slowdown computation."""

    at: float
    ops: tuple[tuple[str, str, str, str, float | None, float | None], ...]
    #           target, op, window, statistic, ratio, observed seconds
    expected: tuple[tuple[str, str, str, float, bool], ...]
    #                target, op, statistic, seconds, provisional
    targets: tuple[tuple[str, str, str, float], ...]  # target, window, statistic, ratio


class ServiceMetrics:
    """Everything the endpoint exports about one service; see the module docstring.

    It is given what it reads of the service (its configuration, recorder and runners, and
    when it started) and is told of the service's jobs by calls: it never imports the service.
    """

    def __init__(self, config: Config, recorder: Recorder, runners: list[TargetRunner],
                 started: float) -> None:
        assert config.metrics is not None
        self.config = config
        self.recorder = recorder
        self.runners = runners
        self.started = started
        self.host = config.host
        self.version = _version()
        disable_created_series()
        self.registry = CollectorRegistry(auto_describe=True)
        self._server = None
        self._snapshot = _Snapshot(time.monotonic(), (), 0, 0, 0, None)
        self._slowdowns = _Slowdowns(0.0, (), (), ())
        self._reader: Store | None = None
        self._lock = threading.Lock()  # guards the small node and flush state below
        self._node: dict[str, float] = {}
        self._node_totals = {"disk_read_bytes": 0, "disk_write_bytes": 0, "net_rx_bytes": 0,
                             "net_tx_bytes": 0}
        self._last_write: float | None = None
        self._write_failures = 0
        self._slowdown_failed = False

        labels = ("host", "target", "op")
        self._latency = Histogram(
            "slowdown_op_latency_seconds",
            "Latency of successful probe operations (bucket bounds are edges of the native "
            "exponential scheme at scale -1, 4**k s: hosts merge exactly with sum by (le)).",
            labels, buckets=bucket_bounds(), registry=self.registry)
        self._errors = Counter("slowdown_op_errors", "Probe operations that failed.", labels,
                              registry=self.registry)
        self._skipped = Counter("slowdown_skipped_ticks",
                               "Ticks skipped because the previous run was still going.",
                               ("host", "target"), registry=self.registry)
        for target in config.targets:  # every series exists from the start, at zero
            self._skipped.labels(self.host, target.name)
            for op in probe_ops():
                self._latency.labels(self.host, target.name, op)
                self._errors.labels(self.host, target.name, op)
        collector = _Collector(self)
        self.registry.register(collector)
        self.servers = ServerCounters(self.host, config.metrics.max_servers,
                                      {op: p.name for p in registered() for op in p.ops})
        self.registry.register(self.servers)
        ProcessCollector(registry=self.registry)
        # What the textfile holds (exporters/textfile.py): the same, with the process metrics named
        # apart from node_exporter's own process_*.
        self.file_registry = CollectorRegistry(auto_describe=True)
        for part in (self._latency, self._errors, self._skipped, collector, self.servers):
            self.file_registry.register(part)
        ProcessCollector(namespace="slowdown", registry=self.file_registry)
        recorder.observers.append(self)

    # -- the endpoint ------------------------------------------------------------------------

    def start(self) -> bool:
        """Listen on the configured address; False (and an error logged) when it cannot."""
        metrics = self.config.metrics
        if not metrics.serve:  # a textfile only: no port opened
            return True
        try:
            served = start_http_server(metrics.listen_port, metrics.listen_host,
                                       registry=self.registry)
        except OSError as exc:
            log.error("metrics endpoint: cannot listen on %s: %s (probing goes on without it)",
                      metrics.listen, exc)
            return False
        self._server = served[0] if served else None
        log.info("metrics endpoint on http://%s/metrics", metrics.listen)
        return True

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    # -- recorder observer (reader threads of the workers) -----------------------------------

    def result(self, target: str, op: str, latency: float | None, wall: float,
               failed: bool = False) -> None:
        """An op's latency, or its error; a hang that ended in an error (``failed``) both,
        as the minute records have it."""
        if latency is None or failed:
            self._errors.labels(self.host, target, op).inc()
        if latency is not None:
            self._latency.labels(self.host, target, op).observe(latency)

    def served(self, target: str, op: str, server: str, latency: float | None, wall: float,
               failed: bool = False) -> None:
        """The server that served an op given to ``result`` just before."""
        self.servers.served(target, op, server, latency, wall, failed=failed)

    def skipped(self, target: str, ops: Iterable[str], wall: float) -> None:
        self._skipped.labels(self.host, target).inc()

    def stuck(self, target: str, op: str, age: float, wall: float) -> None:
        """Stuck ages come from the tick snapshot, which also sees them end."""

    def node(self, context: NodeContext) -> None:
        values = context.values
        with self._lock:
            self._node = {k: float(values[k]) for k in ("load1", "cpu", "memory")
                          if values.get(k) is not None}
            for key in self._node_totals:
                self._node_totals[key] += int(values.get(key) or 0)

    # -- the service's jobs ------------------------------------------------------------------

    def tick(self, now: float, tick_delay: float | None = None) -> None:
        """Copy what the scrape shows of the runners (tick job, once per interval);
        `tick_delay`: how late this tick started."""
        views = tuple(
            _TargetView(r.name, tuple((op, age) for op, age, _ in r.in_flight()),
                        r.status.ticks, r.status.last_tick, r.abandoned)
            for r in self.runners)
        recorder = self.recorder
        self._snapshot = _Snapshot(time.monotonic(), views, recorder.pending_minutes(),
                                   recorder.written, recorder.dropped, tick_delay)

    def flushed(self, ok: bool, now: float, everything: bool = False) -> None:
        """After each minute flush: the write's outcome, then the slowdown gauges."""
        with self._lock:
            if ok:
                self._last_write = now
            else:
                self._write_failures += 1
        if ok and not everything:
            self.update_slowdowns(now)

    def drop_reader(self) -> None:
        """The service's writes stopped landing in the file at the path (store/landing.py): the
        next computation reads whatever file is there then (called from the flush, as
        ``update_slowdowns`` is)."""
        reader, self._reader = self._reader, None
        if reader is not None:
            reader.close()

    def update_slowdowns(self, now: float) -> None:
        """Slowdown per op, window and statistic from the service's own database."""
        try:
            if self._reader is None:
                self._reader = Store(self.config.database, readonly=True,
                                     check_same_thread=False)
            self._slowdowns = self._compute(self._reader, now)
            if self._slowdown_failed:
                log.info("metrics: slowdown gauges computed again")
            self._slowdown_failed = False
        except Exception as exc:
            if not self._slowdown_failed:
                log.warning("metrics: cannot compute the slowdown gauges: %s", exc)
            self._slowdown_failed = True
            if self._reader is not None:
                self._reader.close()
                self._reader = None

    def _compute(self, store: Store, now: float) -> _Slowdowns:
        cfg = self.config
        book = BaselineBook([store], cfg.baseline.expected, zone=cfg.baseline.weekly())
        live = self.live_stuck()
        hosts = (self.host,)
        ops_rows, expected_rows, target_rows = [], {}, []
        for target in (t.name for t in cfg.targets):
            for window in cfg.windows:
                label = format_duration(window)
                worst: dict[str, float] = {}
                for op in probe_ops():
                    agg = aggregate([store], window_selection(now, window, hosts=hosts,
                                                              targets=(target,), ops=(op,)))
                    for statistic in cfg.statistics:
                        s = op_slowdown([store], book, target, op, window, statistic, now,
                                        hosts=hosts, live_stuck=live.get((target, op), 0.0),
                                        agg=agg)
                        observed = s.observed.value
                        ops_rows.append((target, op, label, statistic, s.value,
                                         None if observed != observed else observed))
                        if s.expected is not None:
                            expected_rows[(target, op, statistic)] = (
                                s.expected.value, s.expected.provisional)
                        if s.value is not None:
                            worst[statistic] = max(worst.get(statistic, 0.0), s.value)
                target_rows += [(target, label, st, v) for st, v in worst.items()]
        return _Slowdowns(now, tuple(ops_rows),
                          tuple((*k, *v) for k, v in expected_rows.items()), tuple(target_rows))

    def live_stuck(self) -> dict[tuple[str, str], float]:
        """Age of every op in flight longer than the interval, per (target, op), now."""
        snap = self._snapshot
        since = time.monotonic() - snap.mono
        interval = self.config.interval
        stuck: dict[tuple[str, str], float] = {}
        for view in snap.targets:
            for op, age in view.in_flight:
                if age > interval:  # only what was already stuck keeps ageing
                    key = (view.name, op)
                    stuck[key] = max(stuck.get(key, 0.0), age + since)
        return stuck


class _Collector:
    """The metrics read from snapshots at scrape time (never from the runners)."""

    def __init__(self, metrics: ServiceMetrics) -> None:
        self.m = metrics

    def describe(self):
        return []

    def collect(self):
        m = self.m
        host = m.host
        snap = m._snapshot
        slow = m._slowdowns

        def gauge(name: str, doc: str, labels: tuple[str, ...] = ()) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, doc, labels=("host", *labels))

        info = gauge("slowdown_service_info", "The service: version and histogram scales.",
                     ("version", "histogram_scale", "exported_scale"))
        info.add_metric([host, m.version, str(m.config.scale), str(EXPORT_SCALE)], 1)
        yield info
        started = gauge("slowdown_service_start_time_seconds", "When the service started.")
        started.add_metric([host], m.started)
        yield started

        stuck = gauge("slowdown_stuck_seconds",
                      "Age of the op in flight if longer than the interval, else 0.",
                      ("target", "op"))
        ages = m.live_stuck()
        for target in m.config.targets:
            for op in probe_ops():
                stuck.add_metric([host, target.name, op], ages.get((target.name, op), 0.0))
        yield stuck

        last = gauge("slowdown_last_tick_timestamp_seconds", "When the last tick was dispatched.",
                     ("target",))
        ticks = CounterMetricFamily("slowdown_ticks", "Ticks dispatched to a worker.",
                                    labels=("host", "target"))
        abandoned = gauge("slowdown_abandoned_workers",
                          "Stuck workers abandoned and not yet exited.", ("target",))
        for view in snap.targets:
            if view.last_tick is not None:
                last.add_metric([host, view.name], view.last_tick)
            ticks.add_metric([host, view.name], view.ticks)
            abandoned.add_metric([host, view.name], view.abandoned)
        yield from (last, ticks, abandoned)

        delay = gauge("slowdown_tick_delay_seconds", "How late the last tick started.")
        if snap.tick_delay is not None:
            delay.add_metric([host], snap.tick_delay)
        yield delay
        pending = gauge("slowdown_pending_minutes",
                        "Minutes held in memory, not yet written (more than 1: database "
                        "unwritable).")
        pending.add_metric([host], snap.pending_minutes)
        yield pending
        for name, doc, value in (
                ("slowdown_records_written", "Minute records written.", snap.written),
                ("slowdown_records_dropped", "Minute records lost to a long database outage.",
                 snap.dropped),
                ("slowdown_database_write_failures", "Minute flushes that failed (the write, "
                 "or it did not land in the file at the database's path).",
                 m._write_failures)):
            counter = CounterMetricFamily(name, doc, labels=("host",))
            counter.add_metric([host], value)
            yield counter
        written = gauge("slowdown_last_write_timestamp_seconds",
                        "When the minute flush last succeeded.")
        if m._last_write is not None:
            written.add_metric([host], m._last_write)
        yield written

        ratio = gauge("slowdown_ratio", "Slowdown of the target: its worst op's (observed / "
                      "expected), per window and statistic.", ("target", "window", "statistic"))
        for target, window, statistic, value in slow.targets:
            ratio.add_metric([host, target, window, statistic], value)
        op_ratio = gauge("slowdown_op_ratio", "Slowdown of one op (observed / expected).",
                         ("target", "op", "window", "statistic"))
        observed = gauge("slowdown_op_observed_seconds",
                         "The statistic over the window, raised to the stuck age.",
                         ("target", "op", "window", "statistic"))
        for target, op, window, statistic, value, seen in slow.ops:
            if value is not None:
                op_ratio.add_metric([host, target, op, window, statistic], value)
            if seen is not None:
                observed.add_metric([host, target, op, window, statistic], seen)
        expected = gauge("slowdown_op_expected_seconds", "The baseline: expected value.",
                         ("target", "op", "statistic"))
        provisional = gauge("slowdown_op_expected_provisional",
                            "1 while the baseline is provisional.", ("target", "op", "statistic"))
        for target, op, statistic, value, prov in slow.expected:
            expected.add_metric([host, target, op, statistic], value)
            provisional.add_metric([host, target, op, statistic], float(prov))
        computed = gauge("slowdown_ratio_timestamp_seconds",
                         "When the slowdown gauges were computed (once a minute).")
        if slow.at:
            computed.add_metric([host], slow.at)
        yield from (ratio, op_ratio, observed, expected, provisional, computed)

        with m._lock:
            node = dict(m._node)
            totals = dict(m._node_totals)
        for key, name, doc, scale in (
                ("load1", "slowdown_node_load1", "1-minute load average.", 1.0),
                ("cpu", "slowdown_node_cpu_busy_ratio", "CPUs busy over the last minute.", 0.01),
                ("memory", "slowdown_node_memory_used_ratio", "Memory in use.", 0.01)):
            family = gauge(name, doc)
            if key in node:
                family.add_metric([host], node[key] * scale)
            yield family
        for key, name, doc in (
                ("disk_read_bytes", "slowdown_node_disk_read_bytes", "Bytes read by the disks."),
                ("disk_write_bytes", "slowdown_node_disk_written_bytes",
                 "Bytes written by the disks."),
                ("net_rx_bytes", "slowdown_node_network_receive_bytes", "Bytes received."),
                ("net_tx_bytes", "slowdown_node_network_transmit_bytes", "Bytes sent.")):
            counter = CounterMetricFamily(name, doc + " (summed a minute at a time)",
                                          labels=("host",))
            counter.add_metric([host], totals[key])
            yield counter


def disable_created_series() -> None:
    """No ``_created`` series: they would double the counters for nothing a dashboard uses."""
    try:
        from prometheus_client import disable_created_metrics
    except ImportError:  # prometheus_client before 0.18
        return
    disable_created_metrics()
