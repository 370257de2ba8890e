"""The recorder: latencies in, minute records out, written once a minute in one transaction.

Results arrive from the workers' reader threads at any time; the minute flush takes every
minute that has ended and writes it with the node context and the service state. When the
database cannot be written (full or read-only volume), the finished minutes stay buffered,
bounded, and go out with the next flush that succeeds: probing never stops for the database.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable

from slowdown.analysis.histogram import Histogram
from slowdown.analysis.records import MINUTE, NodeContext, Record, minute_of
from slowdown.analysis.store import Store

log = logging.getLogger(__name__)


class Recorder:
    """Minute records of one host, in memory until flushed."""

    def __init__(self, host: str, scale: int = 5, max_buffered_minutes: int = 240) -> None:
        self.host = host
        self.scale = scale
        self.max_buffered_minutes = max_buffered_minutes
        self._lock = threading.Lock()
        self._open: dict[tuple[str, str, int], Record] = {}
        self._node: dict[int, NodeContext] = {}
        self._failing_since: float | None = None
        self.written = 0
        self.dropped = 0
        # Told of every result, skipped tick, stuck age and node sample as they arrive (the
        # metrics endpoint): methods of the same names; they must be quick and never block.
        self.observers: list = []

    def _notify(self, event: str, *args: object) -> None:
        for observer in self.observers:
            try:
                getattr(observer, event)(*args)
            except Exception:  # an observer's bug must never cost a measurement
                log.exception("recorder observer %r failed on %s", observer, event)

    def _record(self, target: str, op: str, wall: float) -> Record:
        key = (target, op, minute_of(wall))
        rec = self._open.get(key)
        if rec is None:
            rec = self._open[key] = Record(self.host, target, op, key[2], Histogram(self.scale))
        return rec

    def result(self, target: str, op: str, latency: float | None, wall: float) -> None:
        """One finished op, in the minute it completed; ``latency=None`` counts an error."""
        with self._lock:
            rec = self._record(target, op, wall)
            if latency is None:
                rec.errors += 1
            else:
                rec.histogram.record(latency)
        self._notify("result", target, op, latency, wall)

    def skipped(self, target: str, ops: Iterable[str], wall: float) -> None:
        """A tick that found the previous run still going."""
        with self._lock:
            for op in ops:
                self._record(target, op, wall).skipped += 1
        self._notify("skipped", target, ops, wall)

    def stuck(self, target: str, op: str, age: float, wall: float) -> None:
        """An op still in flight at ``wall`` for ``age`` seconds."""
        with self._lock:
            rec = self._record(target, op, wall)
            rec.stuck = max(rec.stuck, age)
        self._notify("stuck", target, op, age, wall)

    def node(self, context: NodeContext) -> None:
        with self._lock:
            self._node[context.start] = context
        self._notify("node", context)

    def take(self, before: float) -> tuple[list[Record], list[NodeContext]]:
        """Remove and return the records and node context of minutes before ``before``."""
        with self._lock:
            done = [k for k in self._open if k[2] < before]
            records = [self._open.pop(k) for k in done]
            nodes = [self._node.pop(t) for t in [t for t in self._node if t < before]]
        return records, nodes

    def put_back(self, records: list[Record], nodes: list[NodeContext]) -> None:
        """Return unwritten records, merging with anything recorded for them since."""
        with self._lock:
            for rec in records:
                key = (rec.target, rec.op, rec.start)
                if key in self._open:
                    rec.merge(self._open[key])
                self._open[key] = rec
            for n in nodes:
                self._node.setdefault(n.start, n)
            self._trim()

    def _trim(self) -> None:
        """Keep at most ``max_buffered_minutes`` minutes; the oldest go first."""
        minutes = sorted({k[2] for k in self._open})
        excess = minutes[: max(0, len(minutes) - self.max_buffered_minutes)]
        if excess:
            cut = excess[-1]
            lost = [k for k in self._open if k[2] <= cut]
            for k in lost:
                del self._open[k]
            for t in [t for t in self._node if t <= cut]:
                del self._node[t]
            self.dropped += len(lost)
            log.error("database unwritable too long: dropped %d records up to minute %d",
                      len(lost), cut)

    def flush(self, store: Store | Callable[[], Store], now: float, everything: bool = False,
              state: dict[str, object] | None = None) -> bool:
        """Write every ended minute (all minutes with ``everything``) in one transaction.

        Returns True when the write succeeded; on failure the records stay buffered.
        """
        before = float("inf") if everything else minute_of(now)
        records, nodes = self.take(before)
        if not records and not nodes and not state:
            return True
        try:
            target = store() if callable(store) else store
            target.write(records, nodes, state)
        except Exception as exc:  # any database failure: keep the data, say why once
            self.put_back(records, nodes)
            if self._failing_since is None:
                self._failing_since = now
                log.error("cannot write the database, buffering in memory: %s", exc)
            return False
        if self._failing_since is not None:
            log.warning("database writable again after %.0f s; buffered minutes written",
                        now - self._failing_since)
            self._failing_since = None
        self.written += len(records)
        return True

    def pending_minutes(self) -> int:
        with self._lock:
            return len({k[2] for k in self._open})


__all__ = ["MINUTE", "Recorder"]
