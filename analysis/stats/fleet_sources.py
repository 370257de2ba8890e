"""Where the other nodes' slowdowns come from, for the verdict: a Prometheus that scrapes the
nodes (its HTTP API) or the databases the nodes publish to a shared directory.

Both answer per target with a :class:`verdict.Reading`, and neither raises on a fault of the
fleet: a Prometheus that does not answer in ``timeout`` seconds, answers an error or
something that is not its API, a glob that names no file, a directory that cannot be read
(with its errno), files that cannot be read, copies not read within ``timeout`` seconds (a
hung mount), all come back as a reading with its reason (or the files named as unreadable),
so the verdict is "unknown" and says why, or "filesystem" where the copies lie on the very
filesystem this node sees fail (``verdict.decide``). Requests use the standard library with
a timeout; the copies are read in a child process with a deadline; no shell.
"""

from __future__ import annotations

import contextlib
import json
import math
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from slowdown.analysis.stats.baseline import BaselineBook
from slowdown.analysis.stats.fleet_copies import copies_beside, gather, read_copies
from slowdown.analysis.stats.slowdown import target_slowdowns
from slowdown.analysis.stats.verdict import (
    DEFAULT_MIN_PEERS,
    DEFAULT_SHARE,
    DEFAULT_SLOW,
    DEFAULT_STALE,
    Peer,
    Reading,
    Thresholds,
    Verdict,
    decide,
    node_context,
    trouble_of,
)
from slowdown.analysis.store import Store
from slowdown.analysis.store.bounded import Unanswered, call_bounded
from slowdown.analysis.units import format_duration

DEFAULT_TIMEOUT = 2.0  # seconds the fleet's source may take: `slowdown` answers within 3 s
RECENT = "1h"  # how far back Prometheus is asked for the hosts it knows (stale ones included)


# -- Prometheus ----------------------------------------------------------------------------

def prometheus_query(url: str, query: str, at: float, timeout: float) -> list[dict]:
    """The result vector of an instant query at ``at``; ValueError with a one-line reason on
    any failure (unreachable, HTTP error, not the Prometheus API, an error status)."""
    endpoint = url.rstrip("/") + "/api/v1/query?" + urllib.parse.urlencode(
        {"query": query, "time": f"{at:.3f}"})
    try:
        with urllib.request.urlopen(endpoint, timeout=timeout) as response:
            body = response.read(16 << 20)
    except urllib.error.HTTPError as exc:
        detail = ""
        with contextlib.suppress(ValueError, AttributeError, OSError):
            detail = json.loads(exc.read(65536)).get("error", "")
        raise ValueError(f"Prometheus at {url} answered HTTP {exc.code}"
                         + (f": {detail}" if detail else "")) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ValueError(f"Prometheus at {url} unreachable: {reason}") from None
    try:
        doc = json.loads(body)
        if doc.get("status") != "success":
            raise ValueError(doc.get("error") or "status not success")
        data = doc["data"]
        if data.get("resultType") != "vector":
            raise ValueError(f"result type {data.get('resultType')!r}, not a vector")
        return list(data["result"])
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"Prometheus at {url}: not an answer of its query API ({exc})") from None


def _value(sample: dict) -> float | None:
    try:
        value = float(sample["value"][1])
    except (KeyError, IndexError, TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def prometheus_readings(url: str, targets: Sequence[str], window: float, statistic: str,
                        at: float, timeout: float) -> dict[str, Reading]:
    """Each target's peers from the exported gauges: ``slowdown_ratio`` of the window and
    statistic (as Prometheus holds it at ``at``), and ``slowdown_ratio_timestamp_seconds``,
    when each host last computed it (the newest of the last hour, so a host that stopped
    is seen, as stale)."""
    source = f"prometheus {url}"
    labels = f'window="{format_duration(window)}",statistic="{statistic}"'
    try:
        ratios = prometheus_query(url, f"slowdown_ratio{{{labels}}}", at, timeout)
        stamps = prometheus_query(
            url, f"max by (host) (last_over_time(slowdown_ratio_timestamp_seconds[{RECENT}]))",
            at, timeout)
    except ValueError as exc:
        return {t: Reading(source, error=str(exc)) for t in targets}
    computed: dict[str, float] = {}
    for sample in stamps:
        host = sample.get("metric", {}).get("host")
        value = _value(sample)
        if host and value is not None:
            computed[host] = max(value, computed.get(host, value))
    values: dict[tuple[str, str], float] = {}
    for sample in ratios:
        metric = sample.get("metric", {})
        host, target, value = metric.get("host"), metric.get("target"), _value(sample)
        if host and target and value is not None:  # two jobs scraping one host: its worst
            values[(host, target)] = max(value, values.get((host, target), value))
    hosts = sorted(set(computed) | {h for h, _ in values})
    return {t: Reading(source, tuple(Peer(h, values.get((h, t)), computed.get(h))
                                     for h in hosts)) for t in targets}


# -- published databases -------------------------------------------------------------------

def database_readings(patterns: Sequence[str], targets: Sequence[str],
                      ops: Mapping[str, Sequence[str]], window: float, statistic: str,
                      at: float, expected: str = "same", host: str | None = None,
                      timeout: float = DEFAULT_TIMEOUT, zone: tuple | None = None
                      ) -> dict[str, Reading]:
    """Each target's peers from node databases (copies published to a shared directory):
    every host of every file, its slowdown over the window ending with its newest minute at
    or before ``at``; ``at`` of a peer is the end of that minute. ``host`` (this node, whose
    own file the glob may name) is not read. The files are read in a child process within
    ``timeout`` seconds (``store.bounded``): a hung mount gives "timed out after 2 s"."""
    source = "databases " + " ".join(patterns)
    try:
        found = call_bounded(source, lambda note: read_copies(
            patterns, targets, ops, window, statistic, at, expected, host, note, zone), timeout)
    except Unanswered as exc:
        cause = f"timed out after {timeout:g} s" if exc.timed_out else None
        return {t: Reading(source, error=f"{' '.join(patterns)}: {exc}", cause=cause)
                for t in targets}
    if found.left:  # open here already (this process's own database): read here
        gather(found, found.left, targets, ops, window, statistic, at, expected, host,
               lambda text: None, zone)
    return found.readings(source)


# -- the verdicts ---------------------------------------------------------------------------

class FleetSettings(Thresholds, Protocol):
    """A ``[fleet]`` table (``config.FleetConfig``): its source and what is compared."""

    prometheus: str | None
    databases: tuple[str, ...]
    window: float
    statistic: str
    timeout: float
    probed: tuple[tuple[str, str], ...]  # this node's targets: (name, path)


def readings(fleet: FleetSettings, targets: Sequence[str], ops: Mapping[str, Sequence[str]],
             at: float, expected: str = "same", host: str | None = None,
             zone: tuple | None = None) -> dict[str, Reading]:
    """What the configured source says of each target's peers at ``at``."""
    if fleet.prometheus:
        return prometheus_readings(fleet.prometheus, targets, fleet.window, fleet.statistic,
                                   at, fleet.timeout)
    return database_readings(fleet.databases, targets, ops, fleet.window, fleet.statistic, at,
                             expected, host, fleet.timeout, zone)


def fleet_verdicts(fleet: FleetSettings | None, stores: Sequence[Store], book: BaselineBook,
                   ops: Mapping[str, Sequence[str]], now: float, host: str,
                   live_stuck: Mapping[tuple[str, str], float] | None = None
                   ) -> dict[str, Verdict]:
    """The verdict on each target of ``ops`` for ``host``, whose numbers ``stores`` hold
    (its slowdown taken as everywhere else, raised to the age of its ops stuck now); "unknown" on
    every target without a ``[fleet]`` (then over ``window`` and ``statistic``)."""
    settings = fleet if fleet is not None else UNCONFIGURED
    targets = list(ops)
    own = target_slowdowns(stores, book, targets, ops, [settings.window], settings.statistic,
                           now, hosts=(host,), live_stuck=live_stuck)
    said = readings(fleet, targets, ops, now, book.mode, host, book.zone) \
        if fleet is not None else {}
    context = node_context(stores, host, now)
    failed = any(r.cause is not None for r in said.values())  # only then: where they lie
    beside = copies_beside(settings.databases, settings.probed) if failed else {}
    return {t: decide(t, own[t][0].value, said.get(t), now, settings, host=host,
                      window=settings.window, statistic=settings.statistic, context=context,
                      trouble=trouble_of(own[t][0], settings.slow), beside=t in beside)
            for t in targets}


@dataclass(frozen=True)
class _Unconfigured:
    """The numbers a verdict shows without a [fleet] (its word is "unknown" anyway)."""

    prometheus: str | None = None
    databases: tuple[str, ...] = ()
    window: float = 60.0
    statistic: str = "median"
    slow: float = DEFAULT_SLOW
    share: float = DEFAULT_SHARE
    min_peers: int = DEFAULT_MIN_PEERS
    stale: float = DEFAULT_STALE
    timeout: float = DEFAULT_TIMEOUT
    probed: tuple[tuple[str, str], ...] = ()


UNCONFIGURED = _Unconfigured()


__all__ = ["FleetSettings", "database_readings", "fleet_verdicts", "prometheus_query",
           "prometheus_readings", "readings"]
