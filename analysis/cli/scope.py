"""What every read command shares: the databases, filters and moment it looks at."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path

import click

from slowdown.analysis.config import Config, ConfigError, load
from slowdown.analysis.stats.baseline import BaselineBook
from slowdown.analysis.stats.window import quantile_of
from slowdown.analysis.store import Store, StoreError, expand_paths
from slowdown.analysis.units import parse_duration, parse_time
from slowdown.analysis.words import OPS

EXIT_USAGE = 2
LIVE_FRESH = 5.0  # seconds: a live state older than this belongs to a stopped service


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
    text = value.strip()
    try:
        number = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise click.BadParameter(f"expected a fraction like 10% or 0.1; got {value!r}",
                                 param_hint=flag) from None
    if not 0 < number < 1:
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
        return BaselineBook(self.stores, self.config.baseline.expected)

    def _live_flights(self) -> list[tuple[str, str, str, float]]:
        """(host, target, op, age) of ops in flight longer than the interval, from the live
        state of each service still running (only when looking at now)."""
        if not self.at_now:
            return []
        flights = []
        for store in self.stores:
            state = read_live(store.path)
            if not state or self.now - state.get("updated", 0) > LIVE_FRESH:
                continue
            interval = state.get("interval", 1.0)
            for target, info in state.get("targets", {}).items():
                for flight in info.get("in_flight", []):
                    age = flight["age"] + (self.now - state["updated"])
                    if age > interval:
                        flights.append((state.get("host", ""), target, flight["op"], age))
        return flights

    def live_stuck(self) -> dict[tuple[str, str], float]:
        """Longest age of an op in flight right now, per (target, op), over the hosts."""
        stuck: dict[tuple[str, str], float] = {}
        for host, target, op, age in self._live_flights():
            if self.hosts and not any(fnmatchcase(host, p) for p in self.hosts):
                continue
            stuck[(target, op)] = max(stuck.get((target, op), 0.0), age)
        return stuck


def read_live(database: Path, tries: int = 5) -> dict | None:
    """The live state the service publishes beside ``database``, or None. The service
    overwrites it in place once a second: a read that meets a write half done reads again."""
    path = database.with_name(database.name + ".live.json")
    for attempt in range(tries):
        try:
            return json.loads(path.read_bytes())
        except OSError:
            return None
        except ValueError:
            if attempt + 1 < tries:
                time.sleep(0.01)
    return None


def read_options(func: Callable) -> Callable:
    """--db, --target, --host, --op, --at: on every read command."""
    options = [
        click.option("--db", "dbs", multiple=True, metavar="FILE",
                     help="Database file or glob; repeat to merge hosts (default: the "
                          "configuration's database)."),
        click.option("--target", "targets", multiple=True, metavar="GLOB",
                     help="Only these targets (repeatable)."),
        click.option("--host", "hosts", multiple=True, metavar="GLOB",
                     help="Only these hosts (repeatable)."),
        click.option("--op", "ops", multiple=True, metavar="GLOB",
                     help="Only these ops, e.g. 'md-*' (repeatable)."),
        click.option("--at", "at", default=None, metavar="TIME",
                     help="Look at a past moment: ISO time, @epoch or a duration ago."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def open_reader(ctx: click.Context, dbs: Sequence[str], targets: Sequence[str],
                hosts: Sequence[str], ops: Sequence[str], at: str | None) -> Reader:
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
        stores = [Store(p, readonly=True) for p in expand_paths(patterns)]
    except StoreError as exc:
        raise click.ClickException(str(exc)) from None
    series = sorted({s for store in stores for s in store.series()})
    return Reader(config, stores, tuple(targets), tuple(hosts), tuple(ops), moment, at is None,
                  series)


def load_config_or_exit(path: Path | None) -> Config:
    try:
        return load(path)
    except ConfigError as exc:
        for single in exc.errors:
            click.echo(str(single), err=True)
        raise click.exceptions.Exit(EXIT_USAGE) from None
