"""What a configuration is: frozen dataclasses, the defaults they take, the alert words.

A :class:`Config` made by ``checks`` holds only valid values (sizes in bytes, durations in
seconds, paths absolute), so its users check nothing again. Nothing here reads a file or
the environment; ``DataSize`` refuses a size it cannot stand for, even when built by hand.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from types import MappingProxyType
from typing import Any

from slowdown.analysis.stats.verdict import (
    DEFAULT_MIN_PEERS,
    DEFAULT_SHARE,
    DEFAULT_SLOW,
    DEFAULT_STALE,
)
from slowdown.analysis.units import format_size, parse_size

ALERT_KINDS = ("slowdown", "error_rate", "stuck")
ACTION_TYPES = ("command", "webhook", "email")

MIB = 1 << 20
_RAM_FACTOR = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*[xX]\s*RAM\s*", re.IGNORECASE)


@dataclass(frozen=True)
class DataSize:
    """The size of the data file: a fixed number of bytes or a multiple of the node's RAM.

    A multiple of RAM keeps the file larger than the page cache on every node a shared
    configuration is used on; only the fadvise fallback (no O_DIRECT) needs that.
    """

    bytes: int | None = None
    ram_factor: float | None = None

    def __post_init__(self) -> None:
        if (self.bytes is None) == (self.ram_factor is None):
            raise ValueError("DataSize needs exactly one of bytes and ram_factor")
        if self.bytes is not None and (
            isinstance(self.bytes, bool) or not isinstance(self.bytes, int) or self.bytes <= 0
        ):
            raise ValueError(f"DataSize.bytes must be a positive integer, got {self.bytes!r}")
        if self.ram_factor is not None and not (
            isinstance(self.ram_factor, (int, float))
            and not isinstance(self.ram_factor, bool)
            and math.isfinite(self.ram_factor)
            and self.ram_factor > 0
        ):
            raise ValueError(f"DataSize.ram_factor must be positive, got {self.ram_factor!r}")

    @classmethod
    def parse(cls, value: str | int) -> DataSize:
        """``"4xRAM"``, ``"0.5xRAM"``, ``"256GiB"`` or a number of bytes."""
        if isinstance(value, str):
            match = _RAM_FACTOR.fullmatch(value)
            if match is not None:
                factor = float(match.group(1))
                if factor <= 0:
                    raise ValueError(f"a multiple of RAM must be positive; got {value!r}")
                return cls(ram_factor=factor)
        try:
            size = parse_size(value)
        except ValueError:
            raise ValueError(
                f"expected a size like 256GiB or a multiple of RAM like 4xRAM; got {value!r}"
            ) from None
        if size < MIB:
            raise ValueError(f"must be at least 1MiB; got {value!r}")
        return cls(bytes=size)

    def resolve(self, ram_bytes: int | None = None) -> int:
        """Bytes for this node, rounded down to whole MiB blocks, at least 1 MiB."""
        if self.bytes is not None:
            raw = self.bytes
        else:
            if ram_bytes is None:
                import psutil

                ram_bytes = psutil.virtual_memory().total
            raw = int(self.ram_factor * ram_bytes)  # type: ignore[operator]
        return max(MIB, raw // MIB * MIB)

    def __str__(self) -> str:
        if self.bytes is not None:
            return format_size(self.bytes)
        return f"{self.ram_factor:g}xRAM"


@dataclass(frozen=True)
class Target:
    """A named directory on one filesystem to probe."""

    name: str
    path: Path
    data_size: DataSize
    pool_files: int = 100_000
    pool_dirs: int = 10
    object_size: int = 3901
    # The built-in default's target lies in slowdown's own data directory, which a fresh
    # account does not have yet: prepare creates its parents. A configured target's parent
    # must exist (a typo must not create a tree on a shared filesystem).
    create_parents: bool = False
    # Where the data probe reads: "shared", one file per target read by every node
    # (``<path>/.slowdown/shared/data.bin``, data_size), each node writing its own
    # ``write.bin`` (write_size) in its workspace; or "own", a data.bin of data_size in each
    # node's workspace, read and written there (the layout before shared files). A file's
    # [[target]] defaults to "shared" (checks.py); a Target built in code, and the built-in
    # default's single-node target, to "own".
    data_file: str = "own"
    write_size: int = 256 * MIB
    # fdatasync inside each timed data-write, as `ioping -W` times it: the write then
    # measures reaching stable storage, not only the server's (or the device's) cache.
    sync: bool = False

    def workspace(self, host: str) -> Path:
        """``<path>/.slowdown/<host>/``: where prepare creates data.bin (or write.bin), md/ and
        MANIFEST."""
        return self.path / ".slowdown" / host

    @property
    def shared_dir(self) -> Path:
        """``<path>/.slowdown/shared/``: the data file every node reads (data_file "shared")."""
        return self.path / ".slowdown" / "shared"


@dataclass(frozen=True)
class BaselineConfig:
    period: str = "month"
    expected: str = "same"  # "same", "median" or "weekly" (the same, by hour of the week)
    provisional_after: float = 86400.0
    zone: str = "local"  # whose calendar months: "local" (the node's), "UTC" or an IANA name

    def tzinfo(self) -> dt.tzinfo | None:
        """The zone of the months (None: the process's local zone)."""
        return zone_info(self.zone)

    def weekly_zone(self) -> str | None:
        """The zone's name whose hours of the week the baselines keep (None: flat)."""
        return self.zone if self.expected == "weekly" else None

    def weekly(self) -> tuple[str, dt.tzinfo | None] | None:
        """The zone's name and zone of the weekly histograms (None: flat)."""
        return (self.zone, self.tzinfo()) if self.expected == "weekly" else None


def zone_info(name: str) -> dt.tzinfo | None:
    """``"local"`` -> None, ``"UTC"`` -> UTC, else the IANA zone (ValueError if unknown)."""
    if name == "local":
        return None
    if name.upper() == "UTC":
        return dt.timezone.utc
    from zoneinfo import ZoneInfo

    try:
        return ZoneInfo(name)
    except (ValueError, OSError, LookupError):  # ZoneInfoNotFoundError is a KeyError
        raise ValueError(f"unknown time zone {name!r}; use \"local\", \"UTC\" or a name "
                         f"like \"Europe/Berlin\"") from None


@dataclass(frozen=True)
class KeepConfig:
    """How long the tables that grow keep their rows (seconds; None: for good). Minute
    records are kept ``Config.retention`` and then merged into hours (``hours``)."""

    node: float = 90 * 86400.0  # node context per minute (default: as ``retention``)
    alert_log: float = 365 * 86400.0  # the record of every notification sent
    sent_alerts: float = 30 * 86400.0  # outbox messages delivered or given up
    hours: float | None = None  # hourly records


@dataclass(frozen=True)
class MetricsConfig:
    """The HTTP endpoint (``serve``: on unless only a textfile is configured) and the file
    for node_exporter's textfile collector (``textfile``, rewritten every ``textfile_every``
    seconds). ``max_servers``: the servers of a target that get series of their own in the
    per-server counters; the rest add up in ``server="other"``
    (probe/exporters/server_metrics.py)."""

    listen_host: str = "127.0.0.1"
    listen_port: int = 9877
    serve: bool = True
    textfile: Path | None = None
    textfile_every: float = 15.0
    max_servers: int = 100

    @property
    def listen(self) -> str:
        """``host:port`` as written in the file (IPv6 addresses in brackets)."""
        host = f"[{self.listen_host}]" if ":" in self.listen_host else self.listen_host
        return f"{host}:{self.listen_port}"


@dataclass(frozen=True)
class PublishConfig:
    """Where the service publishes a copy of its database (``<dir>/<host>.db``) and how
    often (seconds)."""

    dir: Path
    every: float = 300.0


@dataclass(frozen=True)
class FleetConfig:
    """Where the other nodes' slowdowns are read for the verdict ("is it this node or the
    filesystem?"), and what decides it. One source: a Prometheus that scrapes the nodes, or
    the globs of the databases they publish."""

    prometheus: str | None = None  # base URL of its HTTP API
    databases: tuple[str, ...] = ()  # globs of published node databases
    window: float = 60.0  # the slowdown compared: over this window ...
    statistic: str = "median"  # ... of this statistic
    slow: float = DEFAULT_SLOW  # a slowdown at or above this is slow
    share: float = DEFAULT_SHARE  # "filesystem": at least this share of fresh peers slow
    min_peers: int = DEFAULT_MIN_PEERS  # fewer fresh peers with numbers: "unknown"
    stale: float = DEFAULT_STALE  # a peer whose newest number is older is not counted
    timeout: float = 2.0  # seconds a Prometheus query, or reading the databases, may take
    # This node's targets (name, path): copies beside one of them that cannot be read while
    # its ops fail are the outage itself (stats/verdict.py). Filled from [[target]].
    probed: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class MotdConfig:
    """The login notice (``slowdown motd``, run by ``/etc/profile.d/slowdown.sh``): off
    unless a site turns it on, and bounded, so that a login never waits on it."""

    enabled: bool = False
    deadline: float = 0.1  # seconds from its start: then it gives up, silently


@dataclass(frozen=True)
class ActionConfig:
    """What an alert does: ``type`` and its validated options, every option present.

    command: ``argv`` (tuple of str, run without a shell), ``timeout`` (s).
    webhook: ``url``, ``token_file`` (Path or None), ``token_env`` (str or None), ``timeout``.
    email: ``to`` (tuple of str), ``from``, ``smtp_host``, ``smtp_port``, ``starttls``,
    ``credentials_file`` (Path or None), ``timeout``.
    """

    type: str
    options: Mapping[str, Any] = field(hash=False)

    def __post_init__(self) -> None:
        if not isinstance(self.options, MappingProxyType):
            object.__setattr__(self, "options", MappingProxyType(dict(self.options)))


@dataclass(frozen=True)
class AlertRule:
    name: str
    targets: tuple[str, ...]
    ops: tuple[str, ...]
    statistic: str
    window: float
    above: float | None
    critical: float | None
    for_: float
    clear_for: float
    repeat: float | None
    kind: str
    actions: tuple[ActionConfig, ...]
    # Act only on these verdicts of the target ("node", "filesystem", "unknown"; empty: on
    # any): a node-side rule for the node's owner, while the fleet's ticket goes elsewhere.
    verdicts: tuple[str, ...] = ()

    def matches(self, target: str, op: str) -> bool:
        """True when the rule's target and op globs both cover this (target, op)."""
        return any(fnmatchcase(target, p) for p in self.targets) and any(
            fnmatchcase(op, p) for p in self.ops
        )


@dataclass(frozen=True)
class Config:
    source: Path | None
    host: str
    interval: float
    database: Path
    windows: tuple[float, ...]
    statistics: tuple[str, ...]
    baseline: BaselineConfig
    targets: tuple[Target, ...]
    metrics: MetricsConfig | None
    alerts: tuple[AlertRule, ...]
    retention: float
    scale: int
    abandon_after: float = 30.0  # seconds a worker may be stuck before another takes over
    # The service refuses a database on a network or cluster filesystem (SQLite's WAL needs a
    # local one) unless this says that only this node ever writes it.
    allow_network_database: bool = False
    keep: KeepConfig = KeepConfig()
    publish: PublishConfig | None = None  # copies for cluster views: off unless configured
    fleet: FleetConfig | None = None  # [fleet]: where the verdict's peers are read
    motd: MotdConfig = MotdConfig()  # [motd]: the login notice, off by default

    def target(self, name: str) -> Target:
        """The target of that name; KeyError when there is none."""
        for target in self.targets:
            if target.name == name:
                return target
        raise KeyError(name)

    def workspace(self, target: Target) -> Path:
        """The target's workspace for this configuration's host."""
        return target.workspace(self.host)


# The histogram scale's default is the histogram's own (histogram/mapping.py, DEFAULT_SCALE).
DEFAULT_INTERVAL = 1.0
DEFAULT_WINDOWS = (60.0, 600.0, 3600.0)
DEFAULT_STATISTICS = ("median", "q95")
DEFAULT_RETENTION = 90 * 86400.0
DEFAULT_ABANDON_AFTER = 30.0
# The data file is sized to touch many servers and escape their caches, not by a node's RAM
# (O_DIRECT keeps the client's page cache out of the way); "4xRAM" remains a value to give.
DEFAULT_DATA_SIZE = DataSize(bytes=64 << 30)
DEFAULT_WRITE_SIZE = 256 * MIB
DATA_FILES = ("shared", "own")
DEFAULT_DATA_FILE = "shared"  # of a [[target]] in a file; a Target built in code is "own"
