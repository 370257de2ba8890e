"""``slowdown-probe``: the measuring side's command line.

Commands hang off the :func:`main` group; a command that needs the configuration takes
the shared :class:`ProbeContext` with ``@pass_probe_context`` and calls ``.config()``, which
loads the file once and, on mistakes, prints every error and exits 2::

    @main.command()
    @pass_probe_context
    def prepare(probe: ProbeContext) -> None:
        config = probe.config()
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import click

from slowdown.analysis.config import (
    Config,
    ConfigError,
    ConfigErrors,
    default_config_paths,
    find_config_path,
    load_config,
)
from slowdown.analysis.config import default_config as _default_config
from slowdown.analysis.config.files import add_config_after, check_config_after, one_config
from slowdown.analysis.units import format_duration, format_size, parse_duration
from slowdown.probe.command.systemd_dropin import systemd_dropin
from slowdown.probe.command.workspace_commands import cleanup_command, prepare_command

EXIT_CONFIG_ERROR = 2


def _version() -> str:
    try:
        from importlib.metadata import PackageNotFoundError, version
    except ImportError:  # pragma: no cover
        return "unknown"
    try:
        return version("slowdown")
    except PackageNotFoundError:
        return "unknown (not installed)"


@dataclass
class ProbeContext:
    """What the group hands to its commands: the ``--config`` option and the loaded config."""

    config_path: Path | None = None
    environ: Mapping[str, str] = field(default_factory=lambda: os.environ)
    _config: Config | None = field(default=None, repr=False)

    def load(self) -> Config:
        """Find and load the configuration; raises ConfigError (every mistake in it)."""
        path = find_config_path(self.config_path, self.environ)
        if path is None:
            return _default_config(self.environ)
        return load_config(path, self.environ)

    def config(self) -> Config:
        """The configuration, loaded once; on errors prints them all and exits 2."""
        if self._config is None:
            try:
                self._config = self.load()
            except ConfigError as error:
                report_config_errors(error)
                raise click.exceptions.Exit(EXIT_CONFIG_ERROR) from None
        return self._config


pass_probe_context = click.make_pass_decorator(ProbeContext, ensure=True)


def report_config_errors(error: ConfigError) -> None:
    """Every error as ``path:line: key: message`` on stderr, one per line."""
    for single in error.errors:
        click.echo(str(single), err=True)


class ConfigGroup(click.Group):
    """The group; each command also takes ``--config`` after its name
    (``slowdown-probe run --config X`` means ``slowdown-probe --config X run``)."""

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        command = super().get_command(ctx, name)
        if command is not None:
            add_config_after(command, _config_after)
        return command


def _config_after(ctx: click.Context, _param: click.Parameter,
                  values: tuple[Path, ...]) -> None:
    """``--config`` after the command: the group's file, or a usage error naming both."""
    value = one_config(values)
    if value is None:
        return
    probe = ctx.ensure_object(ProbeContext)
    check_config_after(ctx, probe.config_path, value)
    probe.config_path, probe._config = value, None


@click.group(cls=ConfigGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--config",
    "config_paths",
    type=click.Path(path_type=Path),
    multiple=True,
    help="Configuration file (default: $SLOWDOWN_CONFIG, ~/.config/slowdown/slowdown.toml, "
    "/etc/slowdown/slowdown.toml, else built-in defaults).",
)
@click.version_option(_version(), "--version", prog_name="slowdown-probe")
@click.pass_context
def main(ctx: click.Context, config_paths: tuple[Path, ...]) -> None:
    """Measure user-perceived filesystem latency: prepare workspaces, run the probes."""
    ctx.obj = ProbeContext(config_path=one_config(config_paths))


@main.command("check-config")
@click.argument("file", required=False, type=click.Path(path_type=Path))
@click.option("--nodes", type=click.IntRange(min=1), default=1, show_default=True,
              help="Show each target's footprint (bytes, inodes) for this many nodes.")
@pass_probe_context
def check_config(probe: ProbeContext, file: Path | None, nodes: int) -> None:
    """Validate the configuration and show what it means; exit 2 listing every mistake.

    FILE, when given, is checked instead of the file --config or the search would find.
    """
    from slowdown.analysis.config.caveats import caveats
    from slowdown.probe.workspaces.target_places import target_places

    if file is not None:
        probe = ProbeContext(config_path=file, environ=probe.environ)
    config = probe.config()
    places = target_places(config)
    for warning in [*caveats(config), *places.warnings]:
        click.echo(warning, err=True)
    lines = describe_config(config, probe.environ, nodes=nodes, unanswered=places.unanswered)
    if places.errors:  # prepare would fail there: the summary (footprints) all the same
        lines[-1] = (f"configuration has {len(places.errors)} "
                     f"error{'s' if len(places.errors) > 1 else ''} (on standard error)")
    for line in lines:
        click.echo(line)
    if places.errors:
        report_config_errors(ConfigErrors(places.errors))
        raise click.exceptions.Exit(EXIT_CONFIG_ERROR)


def describe_config(config: Config, environ: Mapping[str, str] = os.environ, *,
                    nodes: int = 1, unanswered: Sequence[str] = ()) -> list[str]:
    """A short human summary of a valid configuration, with the targets' footprint on
    `nodes` nodes (``unanswered``: paths found hung a moment ago, not waited for again)."""
    from slowdown.analysis.config.fleet_checks import copies_warnings
    from slowdown.probe.workspaces.footprint import describe_footprint, footprint

    if config.source is not None:
        source = str(config.source)
    else:
        searched = ", ".join(str(p) for p in default_config_paths(environ))
        source = f"built-in defaults (no file found; searched {searched})"
    windows = ", ".join(format_duration(w) for w in config.windows)
    lines = [
        f"configuration  {source}",
        f"host           {config.host}",
        f"database       {config.database}{_database_note(config, environ)}",
        f"interval       {format_duration(config.interval)}; windows {windows}; "
        f"statistics {', '.join(config.statistics)}",
        f"retention      {format_duration(config.retention)} of minute records, then hourly; "
        f"histogram scale {config.scale}",
        f"baseline       {config.baseline.period}, expected = {config.baseline.expected}, "
        f"provisional for {format_duration(config.baseline.provisional_after)}",
        f"metrics        {_describe_metrics(config)}",
        "publish        " + (f"{config.publish.dir}/{config.host}.db every "
                             f"{format_duration(config.publish.every)}" if config.publish
                             else "off"),
        f"fleet          {_describe_fleet(config)}",
    ]
    total_bytes = total_inodes = 0
    for target in config.targets:
        data_bytes = target.data_size.resolve()
        data = format_size(data_bytes)
        if target.data_size.ram_factor is not None:
            data = f"{target.data_size} = {data} on this node"
        if target.data_file == "shared":
            data = (f"{target.shared_dir}/data.bin, {data}, read by every node (data_file = "
                    f'"shared")\n  write file   write.bin in the workspace, '
                    f"{format_size(target.write_size)}")
        else:
            data = f'data.bin in the workspace, {data} (data_file = "own")'
        pool = target.pool_files * target.object_size
        lines += [
            f"target {target.name}",
            f"  workspace    {config.workspace(target)}/",
            f"  data file    {data}",
            "  data-write   1 MiB" + (", then fdatasync (sync = true)" if target.sync else
                                      " (sync = false: no fdatasync in the timed write)"),
            f"  md pool      {target.pool_files} files of {target.object_size} B "
            f"in {target.pool_dirs} directories ({format_size(pool)})",
            *describe_footprint(target, nodes),
        ]
        cost = footprint(target, nodes)
        total_bytes += cost.total_bytes
        total_inodes += cost.total_inodes
    if len(config.targets) > 1:
        lines.append(f"footprint      all targets, {nodes:,} node{'s' if nodes > 1 else ''}: "
                     f"{format_size(total_bytes)} and {total_inodes:,} inodes")
    names = ", ".join(rule.name for rule in config.alerts)
    lines.append(f"alerts         {len(config.alerts)}" + (f" ({names})" if names else ""))
    lines += [f"warning: {line}" for line in copies_warnings(config, unanswered)]
    lines.append("configuration OK")
    return lines


def _describe_metrics(config: Config) -> str:
    metrics = config.metrics
    if metrics is None:
        return "off"
    ways = [f"http://{metrics.listen}/metrics"] if metrics.serve else ["no HTTP endpoint"]
    if metrics.textfile is not None:
        ways.append(f"textfile {metrics.textfile} every "
                    f"{format_duration(metrics.textfile_every)}")
    return "; ".join(ways)


def _describe_fleet(config: Config) -> str:
    """Where the verdict's peers are read and what decides it, or why there is none."""
    fleet = config.fleet
    if fleet is None:
        return "off (no verdict on a slowdown: this node or the filesystem)"
    source = (f"Prometheus {fleet.prometheus} (timeout {format_duration(fleet.timeout)})"
              if fleet.prometheus else f"databases {', '.join(fleet.databases)}")
    return (f"{source}\n               the {fleet.statistic} over "
            f"{format_duration(fleet.window)}; slow at {fleet.slow:g} or more; "
            f'"filesystem" when {fleet.share:.0%} or more of the fresh peers are slow; '
            f'"unknown" under {fleet.min_peers} fresh peers (fresh: numbers newer than '
            f"{format_duration(fleet.stale)})")


def _database_note(config: Config, environ: Mapping[str, str]) -> str:
    """Why the database is where it is, when it is the default moved off a shared home, and
    what the service will say of its filesystem."""
    from slowdown.analysis.config.defaults import default_database_place
    from slowdown.analysis.store.filesystem import filesystem_of

    notes = []
    place = default_database_place(environ, config.host)
    if config.database == place.path and place.moved_from is not None:
        notes.append(place.note())
    filesystem = filesystem_of(config.database)
    if filesystem is not None and filesystem.shared:
        notes.append(f"on {filesystem.describe()}: "
                     + ("allowed by allow_network_database = true" if
                        config.allow_network_database else
                        "the service refuses it unless allow_network_database = true"))
    return "".join(f"\n               {note}" for note in notes)


@main.command("run")
@click.option("--duration", type=str, default=None,
              help="Stop after this long (e.g. 90s, 10m): for demos and tests.")
@click.option("--prepare", "prepare_first", is_flag=True,
              help="Prepare missing or unfinished workspaces before probing.")
@click.option("-v", "--verbose", is_flag=True, help="Log debug messages too.")
@pass_probe_context
def run(probe: ProbeContext, duration: str | None, prepare_first: bool, verbose: bool) -> None:
    """Run the probing service (in the foreground; systemd runs it as a notify service)."""
    from slowdown.probe.daemon.service import run_service
    from slowdown.probe.runtime import logs

    seconds = None
    if duration is not None:
        try:
            seconds = parse_duration(duration)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--duration") from None
    logs.setup(verbose)  # first: under systemd even a configuration error is a journal error
    log = logging.getLogger("slowdown.probe")
    try:
        config = probe.load()
    except ConfigError as error:
        for single in error.errors:
            log.error("%s", single)
        raise click.exceptions.Exit(EXIT_CONFIG_ERROR) from None
    from slowdown.analysis.config.caveats import caveats

    for warning in caveats(config):
        log.warning("%s", warning.removeprefix("warning: "))  # the log says its level
    from slowdown.probe.runtime.start_state import StartState

    with StartState(config, probe.environ) as told:  # readers: "preparing", "collecting"
        if prepare_first:
            _prepare_all(config, told, log)
        told.tell("starting")
        code = run_service(config, duration=seconds)
    sys.exit(code)


def _prepare_all(config: Config, told, log: logging.Logger) -> None:
    """``run --prepare``: each target's workspace, before the service starts."""
    from slowdown.probe.layout.errors import WorkspaceError
    from slowdown.probe.workspaces.prepare import prepare

    for target in config.targets:
        told.tell("preparing", target.name)
        try:
            report = prepare(target, config.host, progress=sys.stderr.isatty())
        except (WorkspaceError, OSError) as exc:
            log.error("target %s: %s", target.name, exc)
            raise click.exceptions.Exit(1) from None
        for note in report.notes:
            log.warning("target %s: %s", target.name, note)
        if report.shared is not None and report.shared.busy:  # probes start once ready
            log.warning("target %s: %s", target.name, report.shared.describe())


@main.command("publish")
@click.option("--to", "directory", type=click.Path(path_type=Path), default=None,
              help="The shared directory (default: [publish] dir of the configuration).")
@click.option("--every", "every", default=None, metavar="DURATION",
              help="How often this runs (cron), written into the copy so that readers know "
                   "how old it may get (default: [publish] every, if any).")
@pass_probe_context
def publish_command(probe: ProbeContext, directory: Path | None, every: str | None) -> None:
    """Publish a copy of the database to the shared directory once, as the service does
    every [publish] every: for sites that run it from cron instead. Exit 1 when it failed
    (the previous copy stays whole)."""
    from slowdown.probe.exporters.publish import PublishError, publish

    config = probe.config()
    try:
        interval = parse_duration(every) if every is not None else (
            config.publish.every if config.publish is not None else None)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--every") from None
    if directory is None:
        if config.publish is None:
            raise click.UsageError("no [publish] dir in the configuration; give --to DIR")
        directory = config.publish.dir
    try:
        done = publish(config.database, Path(os.path.abspath(directory)), config.host,
                       every=interval)
    except PublishError as exc:
        click.echo(f"slowdown-probe publish: {exc}", err=True)
        raise click.exceptions.Exit(1) from None
    click.echo(f"published {done.path} ({format_size(done.bytes)}, {done.seconds:.2f} s)")


main.add_command(systemd_dropin, "systemd-dropin")
main.add_command(prepare_command, "prepare")
main.add_command(cleanup_command, "cleanup")

if __name__ == "__main__":  # pragma: no cover
    main()
