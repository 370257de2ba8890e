"""The verdict: is a slowdown this node sees the filesystem's (most other nodes see it too) or
this node's own?

The decision is made from numbers only, and says so when it cannot be made: "unknown" with
its reason (no fleet data, too few fresh peers, a source that did not answer), never a
guess. The words, for one target:

- ``filesystem``: this node is slow and at least ``share`` of the fresh peers are slow too;
  or the fleet's copies, which lie on the target's filesystem, cannot be read for that
  filesystem's fault (an errno such as ENOTCONN or EIO, or a read that hung) while this
  node's own ops there fail, are stuck or are slow: the outage itself, not a lack of data;
- ``node``: this node is slow and fewer of them are (its CPU, memory, network or filesystem
  client: the node's owner);
- ``ok``: this node is not slow (the peers' numbers are still given);
- ``unknown``: no number of this node, no answer from the fleet, or fewer than
  ``min_peers`` fresh peers with a number.

"Slow" is a slowdown at or above ``slow``. A peer sees this node's slowdown too when it is
slow, or at least two thirds as slow as this node (``PEER_SHARE``): at the edge of the
threshold the fleet's numbers straddle it (this node 3.15, both peers 2.89, under one load on
the testbed), and a cliff there would blame the node for a load that all of them feel; a node
far slower than the rest (30 and more, its peers at 2.4) is still its own. A peer is stale
when its newest number is older than ``stale`` seconds; a peer without a number (no data or
no expected value in the window) is skipped. Neither counts: a stale peer must not make a
verdict, in either direction.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from slowdown.analysis.store import Selection, Store
from slowdown.analysis.store.records import minute_of

if TYPE_CHECKING:
    from slowdown.analysis.stats.slowdown import TargetSlowdown

FILESYSTEM, NODE, OK, UNKNOWN = "filesystem", "node", "ok", "unknown"
WORDS = (FILESYSTEM, NODE, OK, UNKNOWN)
CONTEXT_FIELDS = ("load1", "cpu", "memory")  # this node's context shown beside a verdict
CONTEXT_AGE = 300  # seconds: older node context is not shown as this node's now
# The defaults of [fleet]. "Slow" at 3: on the GlusterFS testbed, quiet minutes read up to
# 2.4 (a 1m median of the worst of six ops) and a loaded volume 4.5 and more
# (docs/VALIDATION.md, "The verdict").
DEFAULT_SLOW, DEFAULT_SHARE, DEFAULT_MIN_PEERS, DEFAULT_STALE = 3.0, 0.5, 2, 300.0
PEER_SHARE = 2 / 3  # a peer at least this share of this node's slowdown sees it too


def peer_threshold(own: float | None, slow: float) -> float:
    """The slowdown at which a peer counts as slow beside this node's ``own``: ``slow``, or
    two thirds of ``own`` when that is lower (see the module's docstring)."""
    if own is None or math.isnan(own) or own < slow:
        return slow
    return min(slow, own * PEER_SHARE)


class Thresholds(Protocol):
    """What a verdict is decided by (``config.FleetConfig`` has these)."""

    slow: float
    share: float
    min_peers: int
    stale: float


@dataclass(frozen=True)
class Peer:
    """One other node's slowdown of a target: ``value`` (None: no number) computed at ``at``
    (unix seconds; None: unknown, so stale)."""

    host: str
    value: float | None
    at: float | None


@dataclass(frozen=True)
class Reading:
    """What a fleet source said about one target: the peers, or why it could not say."""

    source: str  # "prometheus URL" or "databases GLOB"
    peers: tuple[Peer, ...] = ()
    error: str | None = None  # the source did not answer: the one-line reason
    unreadable: tuple[str, ...] = ()  # files left out (the databases source)
    # Of an error, when the copies' filesystem failed: its errno's name ("ENOTCONN") or
    # "timed out after 2 s"; None for a path that is wrong (no such file, no permission).
    cause: str | None = None


@dataclass
class Verdict:
    """The verdict on one target and the numbers behind it."""

    target: str
    word: str
    reason: str
    own: float | None  # this node's slowdown
    host: str
    window: float
    statistic: str
    slow_threshold: float
    share: float
    source: str | None = None
    peers: int = 0  # fresh peers with a number
    slow: int = 0  # of those, how many are slow
    stale: int = 0
    skipped: int = 0  # fresh peers without a number, and unreadable files
    stale_hosts: list[str] = field(default_factory=list)
    slow_hosts: list[str] = field(default_factory=list)
    context: dict[str, float] = field(default_factory=dict)  # this node's load1, cpu, memory
    source_error: str | None = None  # why the source did not answer, in full
    # The slow servers the per-server records name ("h2:/b3 12x, the others 1.1x"; None:
    # not read, or none named): server_naming.py
    servers: str | None = None

    @property
    def peer_threshold(self) -> float:
        """The slowdown at which a peer counts as slow beside this node's."""
        return peer_threshold(self.own, self.slow_threshold)

    def numbers(self) -> str:
        """``12 of 14 other nodes slow (>= 3), 1 stale; this node 5.3, load 0.40, cpu 12%``"""
        parts = []
        if self.source is not None and (self.peers or self.stale or self.skipped):
            fleet = f"{self.slow} of {self.peers} other nodes slow (>= {self.peer_threshold:.3g})"
            extra = [f"{n} {what}" for n, what in ((self.stale, "stale"),
                                                   (self.skipped, "without numbers")) if n]
            parts.append(fleet + (", " + ", ".join(extra) if extra else ""))
        here = f"this node {_ratio(self.own)}"
        ctx = self.context
        if "load1" in ctx:
            here += f", load {ctx['load1']:.2f}"
        if "cpu" in ctx:
            here += f", cpu {ctx['cpu']:.0f}%"
        if "memory" in ctx:
            here += f", memory {ctx['memory']:.0f}%"
        parts.append(here)
        return "; ".join(parts)

    def text(self) -> str:
        """The word, why, and the numbers: one line."""
        named = f"{self.servers}; " if self.servers else ""
        return f"{self.word}: {named}{self.reason}; {self.numbers()}"

    def json(self) -> dict[str, Any]:
        return {
            "verdict": self.word, "reason": self.reason, "host": self.host,
            "slowdown": None if self.own is None or math.isnan(self.own) else self.own,
            "window": self.window, "statistic": self.statistic,
            "slow_threshold": self.slow_threshold, "peer_threshold": self.peer_threshold,
            "share": self.share, "source": self.source,
            "peers": self.peers, "slow_peers": self.slow, "stale_peers": self.stale,
            "skipped_peers": self.skipped, "slow_hosts": self.slow_hosts,
            "stale_hosts": self.stale_hosts, "node": self.context,
            "source_error": self.source_error,
            **({"servers": self.servers} if self.servers else {}),
        }


def decide(target: str, own: float | None, reading: Reading | None, now: float,
           thresholds: Thresholds, *, host: str, window: float, statistic: str,
           context: Mapping[str, float] | None = None, trouble: str | None = None,
           beside: bool = False) -> Verdict:
    """The verdict on ``target`` for this node (``host``, slowdown ``own``) from the peers of
    ``reading`` (None: no fleet source configured). ``beside``: the fleet's copies lie on
    the target's filesystem; ``trouble``: how this node's ops there fail (``trouble_of``).
    Both together, with copies that cannot be read for the filesystem's fault, are the
    outage itself: "filesystem"."""
    v = Verdict(target, UNKNOWN, "", own, host, window, statistic, thresholds.slow,
                thresholds.share, context=dict(context or {}))
    bar = v.peer_threshold
    if reading is None:
        v.reason = "no [fleet] source configured"
        return v
    v.source = reading.source
    if reading.error is not None:
        v.source_error = reading.error
        if beside and trouble is not None and reading.cause is not None:
            v.word = FILESYSTEM
            v.reason = (f"the fleet's copies on {target}'s filesystem cannot be read "
                        f"({reading.cause}), and this node's ops there {trouble}")
        else:
            v.reason = reading.error
        return v
    v.skipped = len(reading.unreadable)
    for peer in reading.peers:
        if peer.host == host:
            continue
        if peer.at is None or now - peer.at > thresholds.stale:
            v.stale += 1
            v.stale_hosts.append(peer.host)
        elif peer.value is None or math.isnan(peer.value):
            v.skipped += 1
        else:
            v.peers += 1
            if peer.value >= bar:
                v.slow += 1
                v.slow_hosts.append(peer.host)
    if own is None or math.isnan(own):
        v.reason = f"no slowdown of {host} here"
        return v
    if own < thresholds.slow:
        v.word, v.reason = OK, "this node is not slow"
        return v
    if v.peers < thresholds.min_peers:
        v.reason = (f"{v.peers} fresh peer{'s' if v.peers != 1 else ''} with numbers, "
                    f"{thresholds.min_peers} needed")
        return v
    if v.slow >= thresholds.share * v.peers:
        v.word, v.reason = FILESYSTEM, "most other nodes are slow too"
    else:
        v.word, v.reason = NODE, "few other nodes are slow"
    return v


def trouble_of(ts: TargetSlowdown | None, slow: float) -> str | None:
    """How this node sees its own ops on a target fail in ``ts``'s window: "fail" (some
    failed), "are stuck" (one in flight raises the window), "are slow" (a slowdown of at
    least ``slow``); None when it sees no failure."""
    if ts is None:
        return None
    if any(o.errors for o in ts.ops):
        return "fail"
    if any(o.observed.raised for o in ts.ops):
        return "are stuck"
    value = ts.value
    if value is not None and not math.isnan(value) and value >= slow:
        return "are slow"
    return None


def node_context(stores: Sequence[Store], host: str, now: float) -> dict[str, float]:
    """This node's newest load1, cpu (%) and memory (%) of the last minutes before ``now``;
    empty when none was recorded (an older one is not this node's state now)."""
    end = minute_of(now) + 60
    rows = []
    for store in stores:
        try:
            rows += store.node(Selection(hosts=(host,), start=end - CONTEXT_AGE, end=end))
        except Exception:  # a reader of an old schema, a damaged table: no context, no crash
            continue
    if not rows:
        return {}
    newest = max(rows, key=lambda r: r.start)
    return {k: float(newest.values[k]) for k in CONTEXT_FIELDS
            if newest.values.get(k) is not None}


def _ratio(value: float | None) -> str:
    if value is None or math.isnan(value):
        return "-"
    return f"{value:.1f}" if value < 100 else f"{value:.0f}"


__all__ = ["FILESYSTEM", "NODE", "OK", "UNKNOWN", "WORDS", "Peer", "Reading", "Thresholds",
           "Verdict", "decide", "node_context", "trouble_of"]
