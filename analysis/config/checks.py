"""The check of a whole parsed document: :func:`validate` turns it into a :class:`Config`.

Every key is checked and every mistake reported, each with file, line and key, before
anything is returned: a document gives a complete Config or a ConfigError / ConfigErrors,
never part of one. Unknown keys are mistakes too (with the closest known key suggested).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from slowdown.analysis.config.alert_checks import _AlertChecks
from slowdown.analysis.config.defaults import default_database, unsafe_target_path
from slowdown.analysis.config.errors import KeyPath
from slowdown.analysis.config.locator import _Locator
from slowdown.analysis.config.model import (
    DATA_FILES,
    DEFAULT_ABANDON_AFTER,
    DEFAULT_DATA_FILE,
    DEFAULT_DATA_SIZE,
    DEFAULT_INTERVAL,
    DEFAULT_RETENTION,
    DEFAULT_STATISTICS,
    DEFAULT_WINDOWS,
    DEFAULT_WRITE_SIZE,
    MIB,
    BaselineConfig,
    Config,
    FleetConfig,
    KeepConfig,
    MetricsConfig,
    MotdConfig,
    PublishConfig,
    Target,
)
from slowdown.analysis.config.reader import _MISSING, _REQUIRED
from slowdown.analysis.config.values import (
    _as_bool,
    _as_data_size,
    _as_duration,
    _as_int,
    _as_name,
    _as_number,
    _as_size,
    _as_statistic,
    _as_str,
    _as_zone,
    _choice,
    _http_url,
    _Invalid,
    _kept,
    _parse_listen,
    _positive_duration,
    _window,
)
from slowdown.analysis.histogram.mapping import DEFAULT_SCALE
from slowdown.analysis.units import format_duration

_TOP_KEYS = (
    "host",
    "interval",
    "database",
    "windows",
    "statistics",
    "retention",
    "histogram_scale",
    "abandon_after",
    "allow_network_database",
    "baseline",
    "keep",
    "target",
    "metrics",
    "publish",
    "alert",
    "fleet",
    "motd",
)
_BASELINE_KEYS = ("period", "expected", "provisional_after", "zone")
_KEEP_KEYS = ("node", "alert_log", "sent_alerts", "hours")
_TARGET_KEYS = ("name", "path", "data_file", "data_size", "write_size", "pool_files",
                "pool_dirs", "object_size", "sync")
_METRICS_KEYS = ("listen", "textfile", "textfile_every", "max_servers")
_PUBLISH_KEYS = ("dir", "every")
_FLEET_KEYS = ("prometheus", "databases", "window", "statistic", "slow", "share", "min_peers",
               "stale", "timeout")
_MOTD_KEYS = ("enabled", "deadline")
MOTD_LONGEST = 10.0  # seconds: a login notice must never make a login wait longer


class _Checker(_AlertChecks):
    """Walks the parsed document: the top-level keys, [baseline], [[target]] and [metrics]
    here, [[alert]] in :class:`_AlertChecks`; every mistake is kept with its key and line."""

    targets_required = True  # the service needs one; a command that only reads does not

    def config(self, data: Mapping[str, Any]) -> Config | None:
        self.unknown_keys(data, _TOP_KEYS, ())
        host = self.get(data, "host", (), _as_name, None)
        if host is None:
            host = os.uname().nodename
        elif host in (".", ".."):
            self.error(("host",), f"not usable as a directory name: {host!r}")
        self.host = host
        interval = self.get(data, "interval", (), _positive_duration, DEFAULT_INTERVAL)
        if interval is not _MISSING and interval > 60:
            self.error(("interval",), f"must be at most 1m; got {format_duration(interval)}")
        database = self.get(
            data, "database", (), lambda v: self.path_value(v, relative_ok=True), None)
        if database is None:  # looked for only when the file names none (it stats a directory)
            database = default_database(self.environ, host if isinstance(host, str) else None)
        allow_network_database = self.get(data, "allow_network_database", (), _as_bool, False)
        windows = self.list_of(data, "windows", _window, DEFAULT_WINDOWS)
        statistics = self.list_of(data, "statistics", _as_statistic, DEFAULT_STATISTICS)
        retention = self.get(data, "retention", (), _as_duration, DEFAULT_RETENTION)
        if retention is not _MISSING and retention < 3600:
            self.error(("retention",), f"must be at least 1h; got {format_duration(retention)}")
        scale = self.get(data, "histogram_scale", (), lambda v: _as_int(v, 0, 8), DEFAULT_SCALE)
        abandon_after = self.get(data, "abandon_after", (), _positive_duration,
                                 DEFAULT_ABANDON_AFTER)
        baseline = self.baseline(data)
        keep = self.keep(data, retention)
        targets = self.targets(data)
        metrics = self.metrics(data)
        publish = self.publish(data)
        if publish is not None and isinstance(database, Path) and isinstance(host, str) \
                and os.path.normpath(publish.dir / f"{host}.db") == os.path.normpath(database):
            self.error(("publish", "dir"), f"the copy {publish.dir / f'{host}.db'} would be "
                       "the database itself; publish to another directory")
        alerts = self.alerts(data, self.target_names)
        fleet = self.fleet(data, windows, statistics, targets)
        motd = self.motd(data)
        if self.errors:
            return None
        return Config(
            source=self.source,
            host=host,
            interval=interval,
            database=database,
            windows=tuple(windows),
            statistics=tuple(statistics),
            baseline=baseline,
            targets=tuple(targets),
            metrics=metrics,
            alerts=tuple(alerts),
            retention=retention,
            scale=scale,
            abandon_after=abandon_after,
            allow_network_database=allow_network_database,
            keep=keep,
            publish=publish,
            fleet=fleet,
            motd=motd,
        )

    def baseline(self, data: Mapping[str, Any]) -> BaselineConfig:
        table = self.table(data, "baseline", ())
        if table is None:
            return BaselineConfig()
        path: KeyPath = ("baseline",)
        self.unknown_keys(table, _BASELINE_KEYS, path)
        default = BaselineConfig()
        period = self.get(table, "period", path, _choice(("month",)), default.period)
        expected = self.get(table, "expected", path, _choice(("same", "median", "weekly")),
                            default.expected)
        provisional = self.get(
            table, "provisional_after", path, _as_duration, default.provisional_after
        )
        zone = self.get(table, "zone", path, _as_zone, default.zone)
        return BaselineConfig(period=period, expected=expected, provisional_after=provisional,
                              zone=zone)

    def keep(self, data: Mapping[str, Any], retention: object) -> KeepConfig:
        """[keep]: how long each growing table keeps its rows; node context as long as the
        minute records unless said, hourly records for good unless said (then longer than
        the minute records, which become hours)."""
        minutes = retention if isinstance(retention, float) else DEFAULT_RETENTION
        default = KeepConfig(node=minutes)
        table = self.table(data, "keep", ())
        if table is None:
            return default
        path: KeyPath = ("keep",)
        self.unknown_keys(table, _KEEP_KEYS, path)
        values = {}
        for key in ("node", "alert_log", "sent_alerts", "hours"):
            value = self.get(table, key, path, _kept, getattr(default, key))
            if isinstance(value, float) and value < 3600:
                self.error((*path, key), f"must be at least 1h; got {format_duration(value)}")
            values[key] = value
        hours = values["hours"]
        if isinstance(hours, float) and hours <= minutes:
            self.error((*path, "hours"), f"must be longer than retention "
                       f"({format_duration(minutes)}), after which minutes become hours; got "
                       f"{format_duration(hours)}")
        return KeepConfig(**{k: v for k, v in values.items() if v is not _MISSING})

    def targets(self, data: Mapping[str, Any]) -> list[Target]:
        entries = self.array_of_tables(data, "target")
        if data.get("target") in (None, []):
            if self.targets_required:
                self.error((), "no [[target]] defined; add at least one [[target]] with name "
                           "and path")
            return []
        targets: list[Target] = []
        names: dict[str, int] = {}
        paths: dict[Path, int] = {}
        for index, table in entries:
            path: KeyPath = ("target", index)
            before = len(self.errors)
            self.unknown_keys(table, _TARGET_KEYS, path)
            name, new = self.unique_name(table, path, names, "target")
            if new:  # known even when the entry has other errors: alerts naming it are fine
                self.target_names.append(name)
            directory = self.get(
                table, "path", path, lambda v: self.path_value(v, relative_ok=False), _REQUIRED
            )
            refusal = None if directory is _MISSING else unsafe_target_path(directory,
                                                                            self.environ)
            if refusal is not None:
                self.error((*path, "path"), refusal)
            elif directory is not _MISSING:
                normal = Path(os.path.normpath(directory))
                if normal in paths:
                    self.error(
                        (*path, "path"),
                        f"same directory as target[{paths[normal]}]; their workspaces would clash",
                    )
                else:
                    paths[normal] = index
            data_file = self.get(table, "data_file", path, _choice(DATA_FILES),
                                 DEFAULT_DATA_FILE)
            if data_file == "shared" and self.host == "shared":
                self.error((*path, "data_file"), "the host name 'shared' is the directory of the "
                           "shared data file (.slowdown/shared); set host to another name")
            data_size = self.get(table, "data_size", path, _as_data_size, DEFAULT_DATA_SIZE)
            # A small shared file (a test, a try-out) gets a write file no larger than itself.
            default_write = DEFAULT_WRITE_SIZE if data_size is _MISSING or not data_size.bytes \
                else max(MIB, min(DEFAULT_WRITE_SIZE, data_size.bytes))
            write_size = self.get(table, "write_size", path, _as_size, default_write)
            if write_size is not _MISSING and write_size < MIB:
                self.error((*path, "write_size"), f"must be at least 1MiB; got {write_size}")
            elif data_file == "own" and "write_size" in table:
                self.error((*path, "write_size"), 'applies to data_file = "shared" only; with '
                           '"own" the probe writes into its data.bin (data_size)')
            pool_files = self.get(table, "pool_files", path, lambda v: _as_int(v, 1), 100_000)
            pool_dirs = self.get(table, "pool_dirs", path, lambda v: _as_int(v, 1), 10)
            if pool_files is not _MISSING and pool_dirs is not _MISSING and pool_files % pool_dirs:
                self.error(
                    (*path, "pool_files"),
                    f"must be a multiple of pool_dirs ({pool_dirs}): each directory holds "
                    "pool_files / pool_dirs objects, as MD-Workbench places them",
                )
            object_size = self.get(table, "object_size", path, _as_size, 3901)
            if object_size is not _MISSING and object_size < 1:
                self.error((*path, "object_size"), "must be at least 1 byte")
            sync = self.get(table, "sync", path, _as_bool, False)
            if len(self.errors) == before:
                targets.append(
                    Target(name, directory, data_size, pool_files, pool_dirs, object_size,
                           data_file=data_file, write_size=write_size // MIB * MIB,
                           sync=sync)
                )
        return targets

    def metrics(self, data: Mapping[str, Any]) -> MetricsConfig | None:
        table = self.table(data, "metrics", ())
        if table is None:
            return None
        path: KeyPath = ("metrics",)
        self.unknown_keys(table, _METRICS_KEYS, path)
        listen = self.get(table, "listen", path, _parse_listen, ("127.0.0.1", 9877))
        textfile = self.get(table, "textfile", path,
                            lambda v: self.path_value(v, relative_ok=False), None)
        if textfile is not None and textfile is not _MISSING and textfile.suffix != ".prom":
            self.error((*path, "textfile"), "node_exporter's textfile collector reads only "
                       "*.prom files; name one in its --collector.textfile.directory, e.g. "
                       "\"/var/lib/prometheus/node-exporter/slowdown.prom\"; got "
                       f"{str(textfile)!r}")
            textfile = _MISSING
        every = self.get(table, "textfile_every", path, _positive_duration, 15.0)
        if every is not _MISSING and not 1 <= every <= 300:
            self.error((*path, "textfile_every"),
                       f"must be 1s to 5m; got {format_duration(every)}")
        if "textfile_every" in table and "textfile" not in table:
            self.error((*path, "textfile_every"), "applies only with textfile")
        max_servers = self.get(table, "max_servers", path, lambda v: _as_int(v, 1, 10_000),
                               MetricsConfig.max_servers)
        if any(v is _MISSING for v in (listen, textfile, every, max_servers)):
            return None
        # A textfile alone opens no port: the endpoint is served when listen is written, or
        # when there is no textfile (the table's meaning before textfiles).
        return MetricsConfig(listen_host=listen[0], listen_port=listen[1],
                             serve="listen" in table or textfile is None, textfile=textfile,
                             textfile_every=every, max_servers=max_servers)

    def publish(self, data: Mapping[str, Any]) -> PublishConfig | None:
        """[publish]: copies of the database for cluster views (probe/exporters/publish.py)."""
        table = self.table(data, "publish", ())
        if table is None:
            return None
        path: KeyPath = ("publish",)
        self.unknown_keys(table, _PUBLISH_KEYS, path)
        directory = self.get(table, "dir", path, lambda v: self.path_value(v, relative_ok=False),
                             _REQUIRED)
        every = self.get(table, "every", path, _positive_duration, 300.0)
        if every is not _MISSING and every < 60:
            self.error((*path, "every"), "must be at least 1m (each publish copies the whole "
                       f"database); got {format_duration(every)}")
        if any(v is _MISSING for v in (directory, every)):
            return None
        return PublishConfig(dir=directory, every=every)

    def motd(self, data: Mapping[str, Any]) -> MotdConfig:
        """[motd]: the login notice, off unless ``enabled``; ``deadline`` bounds it."""
        table = self.table(data, "motd", ())
        if table is None:
            return MotdConfig()
        path: KeyPath = ("motd",)
        self.unknown_keys(table, _MOTD_KEYS, path)
        enabled = self.get(table, "enabled", path, _as_bool, False)
        deadline = self.get(table, "deadline", path, _positive_duration, MotdConfig.deadline)
        if deadline is not _MISSING and deadline > MOTD_LONGEST:
            self.error((*path, "deadline"), "must be at most 10s (a login waits for it); "
                       f"got {format_duration(deadline)}")
        if _MISSING in (enabled, deadline):
            return MotdConfig()
        return MotdConfig(enabled=enabled, deadline=deadline)

    def fleet(self, data: Mapping[str, Any], windows: Any, statistics: Any,
              targets: Sequence[Target] = ()) -> FleetConfig | None:
        """[fleet]: one source of the other nodes' slowdowns (a Prometheus URL or globs of
        published databases) and the verdict's thresholds; the compared slowdown defaults
        to the shortest window and the first statistic (what Prometheus is given). It keeps
        the targets' paths, to tell copies that lie on a probed filesystem."""
        table = self.table(data, "fleet", ())
        if table is None:
            return None
        path: KeyPath = ("fleet",)
        self.unknown_keys(table, _FLEET_KEYS, path)
        prometheus = self.get(table, "prometheus", path, _http_url, None)
        databases = self.get(table, "databases", path, _globs, ())
        if prometheus is None and databases == ():
            self.error(path, "needs a source: prometheus (a URL) or databases (globs)")
        elif prometheus not in (None, _MISSING) and databases not in ((), _MISSING):
            self.error((*path, "databases"), "give one source: prometheus or databases")
        shortest = min(windows) if windows and windows is not _MISSING else DEFAULT_WINDOWS[0]
        first = statistics[0] if statistics and statistics is not _MISSING else "median"
        window = self.get(table, "window", path, _window, shortest)
        statistic = self.get(table, "statistic", path, _as_statistic, first)
        default = FleetConfig()
        slow = self.get(table, "slow", path, _above_zero, default.slow)
        share = self.get(table, "share", path, _share, default.share)
        min_peers = self.get(table, "min_peers", path, lambda v: _as_int(v, 1), default.min_peers)
        stale = self.get(table, "stale", path, _positive_duration, default.stale)
        timeout = self.get(table, "timeout", path, _positive_duration, 2.0)
        values = (prometheus, databases, window, statistic, slow, share, min_peers, stale,
                  timeout)
        if any(v is _MISSING for v in values):
            return None
        return FleetConfig(prometheus=prometheus, databases=databases, window=window,
                           statistic=statistic, slow=slow, share=share, min_peers=min_peers,
                           stale=stale, timeout=timeout,
                           probed=tuple((t.name, str(t.path)) for t in targets))


def _globs(value: object) -> tuple[str, ...]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items:
        raise _Invalid("expected a glob or a non-empty array of globs")
    out = []
    for item in items:
        text = _as_str(item)
        if not os.path.isabs(os.path.expanduser(text)):
            raise _Invalid(f"expected an absolute path or glob; got {text!r}")
        out.append(os.path.expanduser(text))
    return tuple(out)


def _above_zero(value: object) -> float:
    number = _as_number(value)
    if number <= 0:
        raise _Invalid(f"must be > 0; got {value}")
    return float(number)


def _share(value: object) -> float:
    number = _as_number(value)
    if not 0 < number <= 1:
        raise _Invalid(f"must be a fraction, more than 0 and at most 1; got {value}")
    return float(number)


def validate(
    data: Mapping[str, Any],
    *,
    path: Path | None = None,
    text: str | None = None,
    environ: Mapping[str, str] = os.environ,
    targets_required: bool = True,
) -> Config:
    """The Config for a parsed document, or ConfigError / ConfigErrors listing every mistake.

    ``text`` is the source the document came from, for line numbers; ``path`` names the
    file in errors and is the directory relative paths are taken from. ``targets_required``
    False accepts a file that names no target (the package's as-installed file): reading a
    database needs none.
    """
    checker = _Checker(path, _Locator(text) if text is not None else None, environ)
    checker.targets_required = targets_required
    config = checker.config(data)
    checker.raise_if_errors()
    assert config is not None
    return config
