"""The recorder: latencies in, minute records out, written once a minute in one transaction.

Results arrive from the workers' reader threads at any time; the minute flush takes every
minute that has ended and writes it with the node context and the service state. When the
database cannot be written (full or read-only volume), the finished minutes stay buffered,
bounded, and go out with the next flush that succeeds: probing never stops for the database.

No moment is counted twice. A step back of the wall clock (seen against the monotonic clock
with every event, so at once) closes the time up to where the clock was: the minutes in it go
out with the next flush, and results that the stepped-back clock puts into that time again are
left out (counted in ``refused`` and logged) instead of doubling minutes already measured;
recording resumes when the clock passes the mark. Latencies never see a step: the workers time
ops with the monotonic clock.

Nothing is written twice, and nothing is lost when a write lands in a file no reader opens (the
database deleted, moved or replaced under the service: ``store.file_identity``). Each write
carries this run's mark (``WRITER``: the run and the write's number) in the same transaction.
A write that committed but did not land is kept aside; once a file at the path is open again,
the mark in it says whether that write is in it after all (a WAL checkpointed into the file as
the old connection closed, a backup restored from after it), and only what is not goes out
again with the next write.

Beside the minutes, each op that returned is kept per server (``served``: the brick, OSD or
MDS rank that served it, as the worker resolved it; ``unknown`` where the filesystem cannot
say) in histograms per (target, op, server, minute), written as the ten minutes that hold
them (``server_records.py``: rows merge) in the same transaction as their minutes, and
buffered, put back and written again like them; while they wait they are merged per ten
minutes, and dropped past the bound once every minute of their ten is. Skipped ticks, a skipped
tick's wait and the age of a stuck op are not per server: no server is known until an op
returns.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable, Iterable

from slowdown.analysis.histogram import Histogram
from slowdown.analysis.store import Store
from slowdown.analysis.store.records import MINUTE, NodeContext, Record, minute_of
from slowdown.analysis.store.server_records import TEN, ServerRecord, ten_of

log = logging.getLogger(__name__)

CLOCK_STEP = 1.0  # seconds the wall clock must jump against the monotonic one to be a step
WRITER = "writer"  # the state key of the last write's mark: {"run": token, "seq": number}


class Recorder:
    """Minute records of one host, in memory until flushed."""

    def __init__(self, host: str, scale: int = 5, max_buffered_minutes: int = 240,
                 database: str = "", *, wall_clock: Callable[[], float] = time.time,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.host = host
        self.database = database  # named in the log when it cannot be written
        self.scale = scale
        self.max_buffered_minutes = max_buffered_minutes
        self._lock = threading.Lock()
        self._open: dict[tuple[str, str, int], Record] = {}
        self._node: dict[int, NodeContext] = {}
        # Per-server latencies by (target, op, server, minute): taken with their minute.
        self._served: dict[tuple[str, str, str, int], ServerRecord] = {}
        self._failing_since: float | None = None
        self.run = secrets.token_hex(8)  # this run's mark in the files it writes
        self._seq = 0  # the number of the last write attempted
        # Writes that committed into files no reader opens: (seq, records, nodes), until a file
        # at the path says whether each is in it.
        self._unlanded: list[tuple[int, list[Record], list[NodeContext], list[ServerRecord]]] = []
        self.written = 0
        self.dropped = 0
        self._floor = float("-inf")  # wall time before which nothing is recorded (steps back)
        self._wall_clock, self._monotonic = wall_clock, monotonic
        self._offset = wall_clock() - monotonic()  # wall minus monotonic, between steps
        self.refused = 0  # results, skips and stuck ages for closed minutes, left out
        self._refused_logged = 0
        self.not_landed: str | None = None  # why the last flush's write did not land
        self.failure: str | None = None  # why the last flush failed (a write or not landed)
        # Told of every result, server served, skipped tick, stuck age and node sample as they
        # arrive (the metrics endpoint): methods of the same names, where an observer has
        # them; they must be quick and never block.
        self.observers: list = []

    def _notify(self, event: str, *args: object, **keywords: object) -> None:
        for observer in self.observers:
            try:
                told = getattr(observer, event, None)  # an observer may want only some events
                if told is not None:
                    told(*args, **keywords)
            except Exception:  # an observer's bug must never cost a measurement
                log.exception("recorder observer %r failed on %s", observer, event)

    def _record(self, target: str, op: str, wall: float) -> Record | None:
        """The open record of that minute; None (counted) when its time is closed."""
        self._check_step()
        if wall < self._floor:
            self.refused += 1
            return None
        key = (target, op, minute_of(wall))
        rec = self._open.get(key)
        if rec is None:
            rec = self._open[key] = Record(self.host, target, op, key[2], Histogram(self.scale))
        return rec

    def result(self, target: str, op: str, latency: float | None, wall: float,
               failed: bool = False) -> None:
        """One finished op, in the minute it completed; ``latency=None`` counts an error.

        ``failed`` with a latency: an op that hung and then failed (ENOTCONN after a server's
        ping-timeout). It counts as an error and its latency goes into the histogram like any
        other: the user waited that long, and the statistics must say so (SPEC: a returning
        op's full latency is recorded, with a result or an error)."""
        with self._lock:
            rec = self._record(target, op, wall)
            if rec is not None:
                if latency is None or failed:
                    rec.errors += 1
                if latency is not None:
                    rec.histogram.record(latency)
        self._notify("result", target, op, latency, wall, failed=failed)

    def served(self, target: str, op: str, server: str, latency: float | None, wall: float,
               failed: bool = False) -> None:
        """The server that served an op just given to ``result`` (same latency, time and
        failure): its per-server record of that minute."""
        with self._lock:
            self._check_step()
            if wall < self._floor:
                return  # counted in ``refused`` by its result
            minute = minute_of(wall)
            key = (target, op, server, minute)
            rec = self._served.get(key)
            if rec is None:
                rec = self._served[key] = ServerRecord(self.host, target, op, server, minute,
                                                       Histogram(self.scale))
            if latency is None or failed:
                rec.errors += 1
            if latency is not None:
                rec.histogram.record(latency)
        self._notify("served", target, op, server, latency, wall, failed=failed)

    def waited(self, target: str, op: str, latency: float | None, wall: float,
               failed: bool = False) -> None:
        """A tick skipped while the run before it was still going, counted for ``op`` as
        the wait a user would have had at ``wall`` (``runner.TargetRunner._waited``): the
        same as a ``result`` of that latency in that minute, so that every window, command
        and metric weighs a slow period by the time it lasted."""
        self.result(target, op, latency, wall, failed=failed)

    def skipped(self, target: str, ops: Iterable[str], wall: float) -> None:
        """A tick that found the previous run still going."""
        with self._lock:
            for op in ops:
                rec = self._record(target, op, wall)
                if rec is not None:
                    rec.skipped += 1
        self._notify("skipped", target, ops, wall)

    def stuck(self, target: str, op: str, age: float, wall: float, at_end: bool = False
              ) -> None:
        """An op still in flight at ``wall`` for ``age`` seconds; ``at_end``: still in flight
        at the end of the time its minute's record covers (the minute's end, or at exit the
        moment of the last flush), so that windows ending there are raised to its age, and
        no window after the minute in which it returns."""
        with self._lock:
            rec = self._record(target, op, wall)
            if rec is not None:
                rec.stuck = max(rec.stuck, age)
                if at_end:
                    rec.stuck_end = max(rec.stuck_end, age)
        self._notify("stuck", target, op, age, wall)

    def node(self, context: NodeContext) -> None:
        with self._lock:
            self._check_step()
            if context.start < self._floor:
                return  # time lived again after a step back: its node row is taken already
            self._node[context.start] = context
        self._notify("node", context)

    def _check_step(self) -> None:
        """Under the lock, with every event: a step back closes the time lived so far."""
        mono = self._monotonic()
        offset = self._wall_clock() - mono
        if offset < self._offset - CLOCK_STEP:
            self._floor = max(self._floor, mono + self._offset)
        if abs(offset - self._offset) >= CLOCK_STEP:
            self._offset = offset

    def close_before(self, wall: float) -> None:
        """The wall clock stepped back from ``wall``: nothing more is recorded before it.

        Every minute that starts before ``wall`` goes out with the next flush, however far
        back the clock now is; the rest of the minute ``wall`` falls in is recorded (and
        merged into that minute's row) once the clock has passed ``wall`` again.
        """
        with self._lock:
            self._floor = max(self._floor, float(wall))

    @property
    def floor(self) -> float:
        """The wall time before which nothing is recorded any more (after steps back)."""
        with self._lock:
            return self._floor

    def take(self, before: float) -> tuple[list[Record], list[NodeContext]]:
        """Remove and return the records and node context of minutes before ``before``
        (and of every closed minute)."""
        with self._lock:
            before = max(before, self._floor)
            done = [k for k in self._open if k[2] < before]
            records = [self._open.pop(k) for k in done]
            nodes = [self._node.pop(t) for t in [t for t in self._node if t < before]]
        return records, nodes

    def take_servers(self, before: float) -> list[ServerRecord]:
        """Remove and return the per-server records of minutes before ``before`` (and of
        every closed minute), each of its minute (``by_ten`` makes the rows)."""
        with self._lock:
            before = max(before, self._floor)
            done = [k for k in self._served if k[3] < before]
            return [self._served.pop(k) for k in done]

    def put_back(self, records: list[Record], nodes: list[NodeContext],
                 servers: Iterable[ServerRecord] = ()) -> None:
        """Return unwritten records, merging with anything recorded for them since; the
        per-server ones merged into their ten minutes (while the database cannot be written,
        a filesystem of a hundred servers would otherwise keep a histogram per server and
        minute: up to 720 a minute with two targets, 600 bytes each)."""
        with self._lock:
            for srv in servers:
                ten = ten_of(srv.start)
                key = (srv.target, srv.op, srv.server, ten)
                kept = self._served.get(key)
                if kept is None:
                    self._served[key] = ServerRecord(srv.host, srv.target, srv.op, srv.server,
                                                     ten, srv.histogram, srv.errors)
                else:
                    kept.histogram.merge(srv.histogram)
                    kept.errors += srv.errors
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
            # Per-server records go by the ten minutes, once every minute of it is gone.
            for k in [k for k in self._served if ten_of(k[3]) + TEN - MINUTE <= cut]:
                del self._served[k]
            self.dropped += len(lost)
            log.error("database unwritable too long: dropped %d records up to minute %d",
                      len(lost), cut)

    def flush(self, store: Store | Callable[[], Store], now: float, everything: bool = False,
              state: dict[str, object] | None = None) -> bool:
        """Write every ended minute (all minutes with ``everything``) in one transaction.

        Returns True when the write succeeded and landed in the file at the path
        (``Store.moved``); on failure the records stay buffered (``not_landed`` says why when
        the write committed into files no reader opens).
        """
        self.not_landed = self.failure = None
        before = float("inf") if everything else minute_of(now)
        records, nodes = self.take(before)
        servers = self.take_servers(before)
        if not records and not nodes and not servers and not state and not self._unlanded:
            return True
        tens: list[ServerRecord] | None = None  # with the unlanded writes', once merged in
        try:
            target = store() if callable(store) else store
            records, nodes, tens = self._with_unlanded(target, records, nodes, by_ten(servers))
            self._seq += 1
            target.write(records, nodes, {**(state or {}),
                                          WRITER: {"run": self.run, "seq": self._seq}},
                         servers=tens)
        except Exception as exc:  # any database failure: keep the data, say why once
            self.put_back(records, nodes, servers if tens is None else tens)
            self.failure = str(exc)
            if self._failing_since is None:
                self._failing_since = now
                log.error("cannot write the database %s(%s); probing goes on and minute records "
                          "are kept in memory, up to %d minutes, until it can be written",
                          f"{self.database} " if self.database else "", exc,
                          self.max_buffered_minutes)
            return False
        moved = getattr(target, "moved", lambda: None)()
        if moved is not None:  # committed into files that readers no longer open
            self._unlanded.append((self._seq, records, nodes, tens))
            self.not_landed = self.failure = moved
            return False
        if self._failing_since is not None:
            log.warning("database writable again after %.0f s; %d buffered minute records "
                        "written", now - self._failing_since, len(records))
            self._failing_since = None
        self.written += len(records)
        if self.refused > self._refused_logged:
            log.warning("wall clock went back: %d results fell into time already measured and "
                        "were left out (no moment is counted twice)",
                        self.refused - self._refused_logged)
            self._refused_logged = self.refused
        return True

    def _with_unlanded(self, store: Store, records: list[Record], nodes: list[NodeContext],
                       servers: list[ServerRecord]
                       ) -> tuple[list[Record], list[NodeContext], list[ServerRecord]]:
        """``records``, ``nodes`` and ``servers`` with every write that did not land and is
        not in ``store``'s file either (its mark says how far this run's writes reached it)."""
        if not self._unlanded:
            return records, nodes, servers
        mark = store.state(WRITER) or {}
        reached = mark.get("seq", 0) if mark.get("run") == self.run else 0
        missing = [(r, n, s) for seq, r, n, s in self._unlanded if seq > reached]
        found = len(self._unlanded) - len(missing)
        if found:
            log.info("%d write(s) that seemed lost are in %s after all", found, store.path)
        self._unlanded = []
        for r, n, s in missing:
            records, nodes, servers = r + records, n + nodes, s + servers
        return records, nodes, servers

    def pending_minutes(self) -> int:
        with self._lock:
            return len({k[2] for k in self._open})


def by_ten(records: Iterable[ServerRecord]) -> list[ServerRecord]:
    """Per-server records of minutes merged into the ten minutes that hold them (new
    histograms: the minutes' stay as they were, to be put back if the write fails)."""
    tens: dict[tuple[str, str, str, str, int], list[ServerRecord]] = {}
    for rec in records:
        key = (rec.host, rec.target, rec.op, rec.server, ten_of(rec.start))
        tens.setdefault(key, []).append(rec)
    return [ServerRecord(*key, Histogram.merged([r.histogram for r in recs],
                                                recs[0].histogram.scale),
                         sum(r.errors for r in recs))
            for key, recs in tens.items()]


__all__ = ["MINUTE", "Recorder", "by_ten"]
