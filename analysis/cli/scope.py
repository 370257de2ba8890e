"""What every read command shares: the databases, filters and moment it looks at."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import click

from slowdown.analysis.cli.names import unknown_names
from slowdown.analysis.cli.opening import open_all
from slowdown.analysis.config import Config, ConfigError, load
from slowdown.analysis.stats.baseline import BaselineBook
from slowdown.analysis.stats.window import quantile_of
from slowdown.analysis.store import Selection, Store, StoreError, expand_paths
from slowdown.analysis.store.live import read_live
from slowdown.analysis.store.merged import Merged, merged
from slowdown.analysis.store.records import MINUTE, minute_of
from slowdown.analysis.units import format_clock, parse_duration, parse_time
from slowdown.analysis.words import OPS

if TYPE_CHECKING:
    from slowdown.analysis.store import cluster_windows

EXIT_USAGE = 2
LIVE_FRESH = 5.0  # seconds: a live state older than this belongs to a stopped service

# What the service of a database (and each target in it) is doing, as a reader sees it now.
RUNNING = "running"  # the live state is fresh and minute records exist
COLLECTING = "collecting"  # the live state is fresh, no minute record yet
STOPPED = "stopped"  # no fresh live state (or the service no longer probes the target)


# -- parsing of option values -----------------------------------------------------------------

def parse_duration_option(value: str, flag: str) -> float:
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint=flag) from None


def parse_time_option(value: str | None, now: float, flag: str) -> float:
    if value is None:
        return now
    try:
        return parse_time(value, now)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint=flag) from None


def parse_statistic_option(value: str, flag: str = "--stat") -> str:
    try:
        quantile_of(value)
    except ValueError:
        raise click.BadParameter(
            f"{value!r} is not a statistic (median, mean, max, q90, q95, q99, qNN)",
            param_hint=flag) from None
    return value


def parse_fraction_option(value: str, flag: str) -> float:
    """A share strictly between 0 and 100 %, as a fraction: ``10%`` and ``10`` are percent,
    a bare number below 1 (``0.1``) is a fraction (the form accepted before ``10`` was)."""
    text = value.strip()
    try:
        if text.endswith("%"):
            number = float(text[:-1]) / 100
        else:
            number = float(text)
            if number >= 1:
                number /= 100
    except ValueError:
        raise click.BadParameter(f"expected a percentage like 10, 10% or 0.1; got {value!r}",
                                 param_hint=flag) from None
    if not 0 < number < 1:  # also no nan, no inf
        raise click.BadParameter(f"must be between 0 and 100%; got {value!r}", param_hint=flag)
    return number


# -- what every read command shares -----------------------------------------------------------

@dataclass
class Reader:
    """The databases, filters and moment a read command works on."""

    config: Config
    stores: list[Store]
    targets: tuple[str, ...]
    hosts: tuple[str, ...]
    ops: tuple[str, ...]
    now: float
    at_now: bool
    series: list[tuple[str, str, str]] = field(default_factory=list)
    # Per store, in the order of ``stores``: its series, and its live state (None when absent,
    # unreadable, or when looking at a past moment; read when first needed).
    store_series: list[list[tuple[str, str, str]]] = field(default_factory=list)
    lives: list[dict | None] = field(default_factory=list)
    _services: list[ServiceState] | None = field(default=None, repr=False)
    # Files of a cluster view left out as unreadable: (file, the one-line reason).
    skipped: list[tuple[str, str]] = field(default_factory=list)
    # Per store, what a cluster view reads of each file while opening it (kept_from, the
    # baselines and their histograms): one visit of each file instead of one per question,
    # each visit past the bound on open files (open_files.py) a new connection. Used once.
    early: list[tuple[dict, list, dict]] | None = field(default=None, repr=False)
    early_statistics: tuple[str, ...] | None = None  # the only ones of ``early``'s baselines
    # The windows asked for at opening (``open_reader``'s ``windows``), read in the same
    # visits: given to ``target_slowdowns``, used once.
    prepared: cluster_windows.Prepared | None = field(default=None, repr=False)

    @property
    def cluster(self) -> bool:
        """Several files were asked for: a cluster view (it goes on without a bad file)."""
        return len(self.stores) + len(self.skipped) > 1

    def merged(self, start: float, end: float) -> Merged:
        """What the view merges over ``[start, end)``: hosts, silent hosts, skipped files."""
        hosts = {h for h, t, o in self.series if self._wanted(h, t, o)}
        return merged(self.stores, sorted(hosts),
                      Selection(self.hosts, self.targets, self.ops, int(start), int(end)),
                      self.skipped)

    def target_ops(self) -> dict[str, list[str]]:
        """Targets (and their ops) present in the data or probed right now, as filtered."""
        found: dict[str, set[str]] = {}
        live_series = [(host, target, op) for host, target, op, _ in self._live_flights()]
        for host, target, op in [*self.series, *live_series]:
            if self.hosts and not any(fnmatchcase(host, p) for p in self.hosts):
                continue
            if self.targets and not any(fnmatchcase(target, p) for p in self.targets):
                continue
            if self.ops and not any(fnmatchcase(op, p) for p in self.ops):
                continue
            found.setdefault(target, set()).add(op)
        rank = {op: i for i, op in enumerate(OPS)}
        return {t: sorted(ops, key=lambda o: (rank.get(o, 99), o))
                for t, ops in sorted(found.items())}

    def check_kept(self, start: float, end: float, flag: str) -> None:
        """Stop with one line where ``[start, end)`` lies wholly before the records the
        files keep ([keep] hours removed them); say so on stderr where it begins before."""
        from slowdown.analysis.store.retention import kept_from

        known = [kept for kept, _, _ in self.early] if self.early is not None else None
        try:
            cutoff = kept_from(self.stores, known).get("hours")
        except StoreError as exc:
            raise click.ClickException(str(exc)) from None
        if cutoff is None or start >= cutoff:
            return
        files = ", ".join(str(s.path) for s in self.stores)
        said = f"records before {format_clock(cutoff, self.now)} are removed ([keep] hours)"
        if end <= cutoff:
            raise click.ClickException(
                f"{files}: {said}; {flag} asks for {format_clock(start, self.now)} .. "
                f"{format_clock(end, self.now)}")
        click.echo(f"note: {files}: {said}; {flag} begins before", err=True)

    def book(self) -> BaselineBook:
        """The baselines of the files. The first one made of what was read while opening
        (with ``one_moment``, the baselines in force at ``now`` only); later ones read again
        (a verdict's, watch's)."""
        loaded, self.early = self.early, None
        return BaselineBook(self.stores, self.config.baseline.expected,
                            [(rows, blobs) for _, rows, blobs in loaded] if loaded else None,
                            self.early_statistics)

    def _live_flights(self) -> list[tuple[str, str, str, float]]:
        """(host, target, op, age) of ops in flight longer than the interval, from the live
        state of each service still running (only when looking at now)."""
        if not self.at_now:
            return []
        flights = []
        for state in self._lives():
            if not fresh(state, self.now):
                continue
            interval = state.get("interval", 1.0)
            for target, info in state.get("targets", {}).items():
                for flight in info.get("in_flight", []):
                    age = flight["age"] + (self.now - state["updated"])
                    if age > interval:
                        flights.append((state.get("host", ""), target, flight["op"], age))
        return flights

    def live_stuck(self, host: str | None = None) -> dict[tuple[str, str], float]:
        """Longest age of an op in flight right now, per (target, op), over the hosts (or
        of that one host)."""
        stuck: dict[tuple[str, str], float] = {}
        for found, target, op, age in self._live_flights():
            if host is not None and found != host:
                continue
            if self.hosts and not any(fnmatchcase(found, p) for p in self.hosts):
                continue
            stuck[(target, op)] = max(stuck.get((target, op), 0.0), age)
        return stuck

    def _lives(self) -> list[dict | None]:
        if len(self.lives) != len(self.stores):
            self.lives = [read_live(s.path) if self.at_now else None for s in self.stores]
        return self.lives

    def _wanted(self, host: str | None = None, target: str | None = None,
                op: str | None = None) -> bool:
        for name, patterns in ((host, self.hosts), (target, self.targets), (op, self.ops)):
            if name is not None and patterns and not any(fnmatchcase(name, p)
                                                          for p in patterns):
                return False
        return True

    def services(self) -> list[ServiceState]:
        """The service state of each database, as filtered (none when looking at a past
        moment: a live state tells only of now)."""
        if self._services is not None:
            return self._services
        self._services = []
        if not self.at_now:
            return self._services
        if len(self.store_series) != len(self.stores):
            self.store_series = [store.series() for store in self.stores]
        for store, series, live in zip(self.stores, self.store_series, self._lives()):
            names = {h for h, _, _ in series} | ({live["host"]} if live and "host" in live
                                                 else set())
            if names and not any(self._wanted(host=h) for h in names):
                continue  # another host's file, filtered out
            host = live.get("host") if live else (series[0][0] if series else None)
            running = fresh(live, self.now)
            recorded = sorted({t for h, t, o in series if self._wanted(h, t, o)})
            probed = [t for t in (live or {}).get("targets", {}) if self._wanted(target=t)]
            targets = {t: (RUNNING if t in recorded else COLLECTING)
                       for t in (probed if running else ())}
            for t in recorded:
                targets.setdefault(t, STOPPED)
            newest = {t: _newest(store, t) for t in recorded}
            mark = None if live else _published(store)
            state = (STOPPED if not running else
                     RUNNING if RUNNING in targets.values() else COLLECTING)
            self._services.append(ServiceState(
                database=store.path, host=host, state=state,
                since=(live.get("started") if running else
                       live.get("updated") if live else None),
                last_seen=live.get("updated") if live else None,
                first_numbers_at=(first_numbers_at(live) if running
                                  and COLLECTING in targets.values() else None),
                newest_record=max((v for v in newest.values() if v is not None), default=None),
                targets=dict(sorted(targets.items())), newest=newest, live=live,
                published=mark.get("at") if mark else None,
                published_every=_seconds(mark.get("every")) if mark else None))
        return self._services

    def target_states(self) -> dict[str, TargetState]:
        """Each target's state over the databases: running when a service probes it and has
        written its numbers, collecting when none has written any yet, else stopped."""
        found: dict[str, TargetState] = {}
        for service in self.services():
            for target, state in service.targets.items():
                ts = found.setdefault(target, TargetState(target, STOPPED))
                ts.hosts[service.host or str(service.database)] = state
                if state == COLLECTING:
                    ts.first_numbers_at = _earliest(ts.first_numbers_at,
                                                    service.first_numbers_at)
                if state != STOPPED:
                    ts.since = _earliest(ts.since, service.since)
                elif service.state == STOPPED and service.last_seen is not None:
                    # when the last of its services stopped
                    ts.stopped_since = max(ts.stopped_since or 0.0, service.last_seen)
                newest = service.newest.get(target)
                if newest is not None and (ts.newest_record is None or newest > ts.newest_record):
                    ts.newest_record = newest
                if state == STOPPED and service.state != STOPPED:
                    ts.not_probed.append(service.host or str(service.database))
                if service.published is not None:
                    ts.published[service.host or str(service.database)] = service.published
        for ts in found.values():
            states = set(ts.hosts.values())
            ts.state = (RUNNING if RUNNING in states else
                        STOPPED if STOPPED in states else COLLECTING)
            if ts.state != COLLECTING:
                ts.first_numbers_at = None
            if ts.state == STOPPED:
                ts.since = ts.stopped_since
        return dict(sorted(found.items()))

    def nothing_to_show(self) -> str:
        """Why there are neither numbers nor a service to show (for the one-line error)."""
        what = "no data for the chosen targets, hosts and ops"
        if not self.at_now:
            return what
        names = ", ".join(str(s.path) for s in self.stores)
        if not any(fresh(live, self.now) for live in self._lives()):
            seen = [live for live in self._lives() if live]
            if seen:
                last = max(live.get("updated", 0) for live in seen)
                return (f"{what}: no minute record in {names}, and its service stopped at "
                        f"{format_clock(last, self.now)} before writing one")
            return (f"{what}: no minute record in {names}, and no service is running "
                    f"(no live state beside it)")
        return what


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
    ended minute at the start of the next (probe/service.py, ``second=0``), so the first
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
    """The mark of a copy published to a shared directory (probe/publish.py), or None."""
    try:
        mark = store.state("published")
    except (sqlite3.DatabaseError, ValueError):
        return None
    return mark if isinstance(mark, dict) else None


def _seconds(value: object) -> float | None:
    """A number of seconds from a mark written by another version, or None."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0
    return float(value) if ok else None  # type: ignore[arg-type]


def _earliest(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else min(a, b)


def _age(newest: float | None, now: float) -> float | None:
    return None if newest is None else round(max(0.0, now - newest), 3)


def open_reader(ctx: click.Context, dbs: Sequence[str], targets: Sequence[str],
                hosts: Sequence[str], ops: Sequence[str], at: str | None,
                one_moment: bool = False, windows: Sequence[float] | None = None,
                statistic: str | None = None) -> Reader:
    """``one_moment``: the command's first ``book()`` is asked only for the expected values at the
    moment looked at (``slowdown``, ``check``), of ``statistic`` (its ``--stat``, or the
    configured first), so a cluster view reads only those baselines (the ones in force then,
    of the statistic the expected value is of) while it opens each file; the book reads the
    others if asked after all. ``windows``: the windows the command shows at that moment
    (``()``: the configured ones), read by a cluster view in the same visits
    (``Reader.prepared``)."""
    config = ctx.obj["config"]()
    given = ctx.obj.get("read", {})
    dbs = dbs or given.get("dbs", ())
    targets = targets or given.get("targets", ())
    hosts = hosts or given.get("hosts", ())
    ops = ops or given.get("ops", ())
    at = at if at is not None else given.get("at")
    now = time.time()
    moment = parse_time_option(at, now, "--at")
    patterns = list(dbs) or [str(config.database)]
    try:
        paths = expand_paths(patterns)
    except StoreError as exc:
        raise click.ClickException(str(exc)) from None
    stores, store_series, skipped = [], [], []
    early: list[tuple[dict, list, dict]] | None = [] if len(paths) > 1 else None
    visit, visited = None, []
    if windows is not None and len(paths) > 1:  # (numpy: imported for clusters only)
        from slowdown.analysis.store import cluster_windows

        asked = (Selection(hosts=tuple(hosts)), minute_of(moment),
                 [int(w) for w in (windows or config.windows)])
        visit = partial(cluster_windows.Visit, *asked)
    wanted = None
    if one_moment:
        wanted = ((statistic or config.statistics[0]) if config.baseline.expected == "same"
                  else "median",)
    for path, (store, series, read, error) in zip(paths, open_all(
            paths, early is not None, moment if one_moment else None, visit=visit,
            visited=visited, statistics=wanted)):
        if store is None:
            if len(paths) == 1:  # the one file named: one line, and stop
                raise click.ClickException(str(error)) from None
            skipped.append((str(path), str(error)))  # a cluster goes on with the others
            continue
        if early is not None and read is None:
            early = None  # each file's read again when asked for
        elif early is not None:
            early.append(read)
        stores.append(store)
        store_series.append(series)
    if not stores:
        raise click.ClickException(f"none of the {len(paths)} databases could be read: "
                                   + "; ".join(why for _, why in skipped[:3])
                                   + ("; ..." if len(skipped) > 3 else ""))
    series = sorted({s for each in store_series for s in each})
    reader = Reader(config, stores, tuple(targets), tuple(hosts), tuple(ops), moment,
                    at is None, series, store_series, skipped=skipped, early=early,
                    early_statistics=wanted,
                    prepared=cluster_windows.Prepared.of(*asked, visited) if visit else None)
    mistake = unknown_names((reader.hosts, reader.targets, reader.ops), series, reader._lives,
                            [t.name for t in config.targets],
                            str(stores[0].path) if len(paths) == 1 else
                            f"the {len(stores)} databases read")
    if mistake:
        raise click.ClickException(mistake)
    return reader


def load_config_or_exit(path: Path | None) -> Config:
    try:
        return load(path)
    except ConfigError as exc:
        for single in exc.errors:
            click.echo(str(single), err=True)
        raise click.exceptions.Exit(EXIT_USAGE) from None
