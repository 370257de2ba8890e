"""What a reader sees of the service behind each database, and of each target over them:
running, collecting its first minute, preparing its workspaces, or stopped.

From the live state the service keeps beside its database (``store/live.py``), and from the
start state ``slowdown-probe`` keeps there while it prepares and starts, before any live
state (``store/starting.py``: it also tells a service gone without a word from one that
runs). A live state fresh within ``LIVE_FRESH`` and without its ``stopped`` mark is a
running service.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from slowdown.analysis.store import Selection, Store, StoreError
from slowdown.analysis.store.landing import PROBES, Landing
from slowdown.analysis.store.landing import STATE_KEY as LANDING
from slowdown.analysis.store.records import MINUTE, minute_of
from slowdown.analysis.store.starting import LIVE_FRESH

RUNNING = "running"  # the live state is fresh and minute records exist
COLLECTING = "collecting"  # the live state is fresh, no minute record yet
PREPARING = "preparing"  # slowdown-probe prepares the workspaces: the service is not probing
STOPPED = "stopped"  # no fresh live state (or the service no longer probes the target)
NOT_YET = (COLLECTING, PREPARING)  # no numbers yet, and no sign of trouble either

# One database as the states are made of it: its path, its store (None: not there yet, a
# start state tells why), its series and its live state as a reader takes it.
Entry = tuple[Path, "Store | None", list, "dict | None"]


def service_states(entries: Sequence[Entry], wanted: Callable[..., bool], now: float
                   ) -> list[ServiceState]:
    """The service state of each database, as ``wanted`` (host, target, op) filters."""
    found = []
    for path, store, series, live in entries:
        names = {h for h, _, _ in series} | ({live["host"]} if live and "host" in live
                                             else set())
        if names and not any(wanted(host=h) for h in names):
            continue  # another host's file, filtered out
        found.append(_service_state(path, store, series, live, wanted, now))
    return found


def _service_state(path: Path, store: Store | None, series: list, live: dict | None,
                   wanted: Callable[..., bool], now: float) -> ServiceState:
    host = live.get("host") if live else (series[0][0] if series else None)
    running = fresh(live, now)
    preparing = running and live is not None and "preparing" in live
    recorded = sorted({t for h, t, o in series if wanted(h, t, o)})
    probed = [t for t in (live or {}).get("targets", {}) if wanted(target=t)]
    targets = {t: (PREPARING if preparing else RUNNING if t in recorded else COLLECTING)
               for t in (probed if running else ())}
    for t in recorded:
        targets.setdefault(t, STOPPED)
    newest = {t: _newest(store, t) for t in recorded} if store is not None else {}
    mark = None if live or store is None else _published(store)
    landing = Landing.of(live.get("records") if live else _state(store, LANDING))
    probes = _probes(live) if live else _state(store, PROBES)
    state = (STOPPED if not running else PREPARING if preparing else
             RUNNING if RUNNING in targets.values() else COLLECTING)
    return ServiceState(
        database=path, host=host, state=state,
        since=(live.get("started") if running else
               live.get("updated") if live else None),
        last_seen=live.get("updated") if live else None,
        first_numbers_at=(first_numbers_at(live) if running and not preparing
                          and COLLECTING in targets.values() else None),
        newest_record=max((v for v in newest.values() if v is not None), default=None),
        targets=dict(sorted(targets.items())), newest=newest, live=live,
        published=mark.get("at") if mark else None,
        published_every=_seconds(mark.get("every")) if mark else None,
        landing=landing, pending=live.get("pending_minutes") if running and live else None,
        probes=probes if isinstance(probes, dict) else {})


def target_states(services: Sequence[ServiceState]) -> dict[str, TargetState]:
    """Each target's state over the databases: running when a service probes it and has
    written its numbers, collecting (or preparing) when none has written any yet, else
    stopped; ``gone``: the hosts whose service is known to have stopped."""
    found: dict[str, TargetState] = {}
    for service in services:
        where = service.host or str(service.database)
        for target, state in service.targets.items():
            ts = found.setdefault(target, TargetState(target, STOPPED))
            ts.hosts[where] = state
            if state == COLLECTING:
                ts.first_numbers_at = _earliest(ts.first_numbers_at, service.first_numbers_at)
            if state != STOPPED:
                ts.since = _earliest(ts.since, service.since)
            elif service.state == STOPPED and service.last_seen is not None:
                # when the last of its services stopped: its live state says it
                ts.stopped_since = max(ts.stopped_since or 0.0, service.last_seen)
                ts.gone.append(where)
            newest = service.newest.get(target)
            if newest is not None and (ts.newest_record is None or newest > ts.newest_record):
                ts.newest_record = newest
            if state == STOPPED and service.state != STOPPED:
                ts.not_probed.append(where)
            if service.published is not None:
                ts.published[where] = service.published
    for ts in found.values():
        states = set(ts.hosts.values())
        ts.state = (RUNNING if RUNNING in states else STOPPED if STOPPED in states else
                    PREPARING if PREPARING in states else COLLECTING)
        if ts.state != COLLECTING:
            ts.first_numbers_at = None
        if ts.state == STOPPED:
            ts.since = ts.stopped_since
    return dict(sorted(found.items()))


@dataclass
class ServiceState:
    """One database's service as a reader sees it now: from its live state and records."""

    database: Path
    host: str | None
    state: str  # RUNNING, COLLECTING or STOPPED
    since: float | None  # the state began: the service started, or (stopped) was last seen
    last_seen: float | None  # the live state's last update
    first_numbers_at: float | None  # when collecting: when the first minute is written
    newest_record: int | None  # start of the newest minute record
    targets: dict[str, str]  # each target's state on this host
    newest: dict[str, int | None] = field(default_factory=dict)  # per target
    live: dict | None = field(default=None, repr=False)  # the live state itself
    published: float | None = None  # a copy published to a shared directory: when
    published_every: float | None = None  # and how often such copies are made, if said
    landing: Landing | None = None  # whether its records reach the file (store/landing.py)
    pending: int | None = None  # minutes its running service keeps in memory
    # Per target: its filesystem's free space ("space") and each op's last error ("errors"),
    # as the live state or the file's state says (store/live.py, ``probes_state``).
    probes: dict = field(default_factory=dict)

    def json(self, now: float) -> dict:
        return {
            "database": str(self.database),
            "host": self.host,
            "state": self.state,
            "since": self.since,
            "last_seen": self.last_seen,
            "first_numbers_at": self.first_numbers_at,
            "newest_record": self.newest_record,
            "age": _age(self.newest_record, now),
            "targets": self.targets,
            "published": self.published,
            "records": self.landing.json() if self.landing else None,
            "probes": self.probes,
        }


@dataclass
class TargetState:
    """A target's state over every database that knows it."""

    target: str
    state: str
    since: float | None = None  # the state began: the earliest start of a service probing
    #                             it, or (stopped) the last sight of the last one
    first_numbers_at: float | None = None  # when collecting
    newest_record: int | None = None  # start of its newest minute record, over the hosts
    hosts: dict[str, str] = field(default_factory=dict)  # host (or database) -> state there
    not_probed: list[str] = field(default_factory=list)  # hosts running without it
    stopped_since: float | None = None  # the last update of a stopped service's live state
    # Hosts read from copies published to a shared directory (no live state beside them):
    # when each copy was made. Their numbers end there, whether or not the service runs.
    published: dict[str, float] = field(default_factory=dict)
    # Hosts whose service is known to have stopped: its live state says so, has gone
    # stale, or the process that wrote it is gone (no live state at all: not known).
    gone: list[str] = field(default_factory=list)

    @property
    def known_stopped(self) -> bool:
        """Stopped on every host that has it, each known to have stopped."""
        return self.state == STOPPED and bool(self.hosts) and set(self.hosts) <= set(self.gone)

    def json(self, now: float) -> dict:
        return {
            "state": self.state,
            "since": self.since,
            "first_numbers_at": self.first_numbers_at,
            "newest_record": self.newest_record,
            "age": _age(self.newest_record, now),
            "hosts": self.hosts,
        }


def fresh(live: dict | None, now: float) -> bool:
    """Whether a live state belongs to a service running now (its last one, written as it
    stopped, says so)."""
    return bool(live) and "stopped" not in live and now - live.get("updated", 0) <= LIVE_FRESH


def first_numbers_at(live: dict) -> float:
    """When a new service's first minute records are written: the service flushes every
    ended minute at the start of the next (probe/daemon/service.py, ``second=0``), so the first
    records come at the first minute boundary after the first tick."""
    started = float(live.get("started") or live.get("updated") or 0)
    interval = float(live.get("interval") or 1.0)
    estimates = [info["last_tick"] - (info["ticks"] - 1) * interval
                 for info in live.get("targets", {}).values()
                 if info.get("last_tick") is not None and info.get("ticks")]
    # The first tick comes on the interval's grid, at a per-host phase: within two intervals
    # of the start.
    first_tick = min(estimates, default=started + interval)
    first_tick = min(max(first_tick, started), started + 2 * interval)
    return float(minute_of(first_tick) + MINUTE)


def _newest(store: Store, target: str) -> int | None:
    """Start of the target's newest minute record (a damaged file: an error naming it)."""
    try:
        return store.latest_start(Selection(targets=(target,)))
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"{store.path}: {exc}") from None


def _published(store: Store) -> dict | None:
    """The mark of a copy published to a shared directory (probe/exporters/publish.py), or None."""
    mark = _state(store, "published")
    return mark if isinstance(mark, dict) else None


def _state(store: Store | None, key: str) -> object:
    """A value of the state a service kept in the file, None when it cannot be read."""
    if store is None:
        return None
    try:
        return store.state(key)
    except (sqlite3.DatabaseError, ValueError):
        return None


def _probes(live: dict) -> dict:
    """``probes_state`` of a live state (store/live.py)."""
    return {t: {"space": info.get("space"),
                "errors": {op: v for op, v in (info.get("last") or {}).items()
                           if isinstance(v, dict) and "err" in v}}
            for t, info in (live.get("targets") or {}).items() if isinstance(info, dict)}


def _seconds(value: object) -> float | None:
    """A number of seconds from a mark written by another version, or None."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0
    return float(value) if ok else None  # type: ignore[arg-type]


def _earliest(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else min(a, b)


def _age(newest: float | None, now: float) -> float | None:
    return None if newest is None else round(max(0.0, now - newest), 3)


__all__ = ["COLLECTING", "LIVE_FRESH", "NOT_YET", "PREPARING", "RUNNING", "STOPPED",
           "ServiceState", "TargetState", "first_numbers_at", "fresh", "service_states",
           "target_states"]
