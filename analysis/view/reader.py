"""A view over one database or a cluster's many: the files, filters and moment a reader
looks at, opened once, with the service behind each file and the names it does not know.

The command line only calls it (``cli/read_setup.py`` parses the options and says the errors);
anything else that reads a cluster view opens one here with ``open_view``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from slowdown.analysis.config import Config
from slowdown.analysis.stats.baseline import BaselineBook
from slowdown.analysis.store import Selection, Store, StoreError, expand_paths
from slowdown.analysis.store.landing import Landing
from slowdown.analysis.store.live import read_live
from slowdown.analysis.store.merged import Merged, merged
from slowdown.analysis.store.records import minute_of
from slowdown.analysis.store.starting import live_now, not_yet, read_start
from slowdown.analysis.units import format_clock
from slowdown.analysis.view.opened_files import open_all
from slowdown.analysis.view.service_states import (
    RUNNING,
    ServiceState,
    TargetState,
    fresh,
    service_states,
    target_states,
)
from slowdown.analysis.view.unknown_names import unknown_names
from slowdown.analysis.words import OPS

if TYPE_CHECKING:
    from slowdown.analysis.store import cluster_windows


class ViewError(Exception):
    """The view cannot be opened: the message says why, in one line."""


class NotLanding(ViewError):
    """The one database named cannot be read, and the service writing it says why: its
    records are not reaching it (deleted, replaced by a foreign file: store/landing.py).
    ``service`` is that service's state, for the reader to say."""

    def __init__(self, service: ServiceState) -> None:
        super().__init__(str(service.database))
        self.service = service


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
    # Databases not there yet whose start state says a prepare or a service start is under
    # way (only for the commands that say so: ``open_reader``'s ``waiting``): (path, the
    # live state made of it).
    waiting: list[tuple[Path, dict]] = field(default_factory=list)
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

    def book(self) -> BaselineBook:
        """The baselines of the files. The first one made of what was read while opening
        (with ``one_moment``, the baselines in force at ``now`` only); later ones read again
        (a verdict's, watch's)."""
        loaded, self.early = self.early, None
        return BaselineBook(self.stores, self.config.baseline.expected,
                            [(rows, blobs) for _, rows, blobs in loaded] if loaded else None,
                            self.early_statistics, zone=self.config.baseline.weekly())

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
            self.lives = [live_now(s.path, read_live(s.path), self.now) if self.at_now
                          else None for s in self.stores]
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
        moment: a live state tells only of now); a database not there yet, whose start state
        says why, included."""
        if self._services is not None:
            return self._services
        self._services = []
        if not self.at_now:
            return self._services
        if len(self.store_series) != len(self.stores):
            self.store_series = [store.series() for store in self.stores]
        entries = [(s.path, s, series, live) for s, series, live
                   in zip(self.stores, self.store_series, self._lives())]
        entries += [(path, None, [], live) for path, live in self.waiting]
        self._services = service_states(entries, self._wanted, self.now)
        return self._services

    def target_states(self) -> dict[str, TargetState]:
        """Each target's state over the databases (``states.target_states``)."""
        return target_states(self.services())

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


def open_view(config: Config, dbs: Sequence[str], targets: Sequence[str],
              hosts: Sequence[str], ops: Sequence[str], moment: float, now: float,
              at_now: bool, one_moment: bool = False, windows: Sequence[float] | None = None,
              statistic: str | None = None, waiting: bool = False) -> Reader:
    """``one_moment``: the command's first ``book()`` is asked only for the expected values at the
    moment looked at (``slowdown``, ``check``), of ``statistic`` (its ``--stat``, or the
    configured first), so a cluster view reads only those baselines (the ones in force then,
    of the statistic the expected value is of) while it opens each file; the book reads the
    others if asked after all. ``windows``: the windows the command shows at that moment
    (``()``: the configured ones), read by a cluster view in the same visits
    (``Reader.prepared``). ``waiting``: the command says "preparing" or "collecting" of a
    database not there yet while slowdown-probe prepares or starts (``Reader.waiting``);
    the others name what is under way in their error. ``moment``: the moment looked at;
    ``at_now``: it is ``now`` (no ``--at``). A file that cannot be read is ``ViewError``."""
    patterns = list(dbs) or [str(config.database)]
    paths, waited = _expanded(patterns, now, waiting and at_now)
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
            if len(paths) == 1 and at_now and _not_landing([str(path)], now):
                raise _not_landing([str(path)], now) from None  # its service says why
            told = not_yet(read_start(path), read_live(path), now) if at_now else None
            if told is not None and waiting:  # being made: say so, as of a service
                waited.append((path, told))
                continue
            if len(paths) == 1:  # the one file named: one line, and stop
                raise ViewError(_under_way(str(error), told, now)) from None
            skipped.append((str(path), str(error)))  # a cluster goes on with the others
            continue
        if early is not None and read is None:
            early = None  # each file's read again when asked for
        elif early is not None:
            early.append(read)
        stores.append(store)
        store_series.append(series)
    if not stores and not waited:
        raise ViewError(f"none of the {len(paths)} databases could be read: "
                        + "; ".join(why for _, why in skipped[:3])
                        + ("; ..." if len(skipped) > 3 else ""))
    series = sorted({s for each in store_series for s in each})
    reader = Reader(config, stores, tuple(targets), tuple(hosts), tuple(ops), moment,
                    at_now, series, store_series, skipped=skipped, early=early,
                    early_statistics=wanted,
                    prepared=cluster_windows.Prepared.of(*asked, visited) if visit else None,
                    waiting=waited)
    mistake = unknown_names((reader.hosts, reader.targets, reader.ops), series,
                            lambda: [*reader._lives(), *(live for _, live in waited)],
                            [t.name for t in config.targets],
                            str(stores[0].path if stores else waited[0][0]) if
                            len(stores) + len(waited) == 1 else
                            f"the {len(stores) + len(waited)} databases read")
    if mistake:
        raise ViewError(mistake)
    return reader


def _expanded(patterns: Sequence[str], now: float, waiting: bool
              ) -> tuple[list[Path], list[tuple[Path, dict]]]:
    """The files the patterns name, and (``waiting``) the databases named that are not there
    yet while slowdown-probe prepares or starts beside them; an error for a pattern that
    names nothing else, saying what is under way where something is."""
    paths: list[Path] = []
    waited: list[tuple[Path, dict]] = []
    for pattern in patterns:
        try:
            paths += [p for p in expand_paths([pattern]) if p not in paths]
        except StoreError as exc:
            path = Path(os.path.expanduser(pattern))
            lost = _not_landing([pattern], now) if len(patterns) == 1 else None
            if lost is not None:  # deleted under its running service: it says so
                raise lost from None
            told = not_yet(read_start(path), read_live(path), now)
            if told is None or not waiting:
                raise ViewError(_under_way(str(exc), told, now)) from None
            waited.append((path, told))
    return paths, waited


def _under_way(error: str, told: dict | None, now: float) -> str:
    """A database's error, and what slowdown-probe is doing beside it if anything."""
    if told is None:
        return error
    doing = "preparing the workspaces" if "preparing" in told else "starting the service"
    return (f"{error}: slowdown-probe (PID {told['pid']}) is {doing} since "
            f"{format_clock(told['started'], now)}; numbers come a minute after the service "
            "starts (slowdown, check and watch say when)")


def _not_landing(patterns: Sequence[str], now: float) -> NotLanding | None:
    """NotLanding when the one database named has a running service beside it whose records
    do not reach it, else None."""
    if len(patterns) != 1:
        return None
    live = read_live(Path(patterns[0]))
    landing = Landing.of(live.get("records")) if fresh(live, now) else None
    if landing is None or landing.ok:
        return None
    return NotLanding(ServiceState(Path(patterns[0]), live.get("host"), RUNNING, None, None,
                                   None, None, {}, landing=landing,
                                   pending=live.get("pending_minutes")))


__all__ = ["NotLanding", "Reader", "ViewError", "open_view"]
