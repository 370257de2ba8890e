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
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import click

from slowdown.analysis.config import (
    Config,
    ConfigError,
    default_config_paths,
    find_config_path,
    load_config,
)
from slowdown.analysis.config import default_config as _default_config
from slowdown.analysis.units import format_duration, format_size, parse_duration
from slowdown.probe.dropin import systemd_dropin
from slowdown.probe.workspace_cli import cleanup_command, prepare_command

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


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--config",
    "config_path",
    type=click.Path(path_type=Path),
    default=None,
    help="Configuration file (default: $SLOWDOWN_CONFIG, ~/.config/slowdown/slowdown.toml, "
    "/etc/slowdown/slowdown.toml, else built-in defaults).",
)
@click.version_option(_version(), "--version", prog_name="slowdown-probe")
@click.pass_context
def main(ctx: click.Context, config_path: Path | None) -> None:
    """Measure user-perceived filesystem latency: prepare workspaces, run the probes."""
    ctx.obj = ProbeContext(config_path=config_path)


@main.command("check-config")
@click.argument("file", required=False, type=click.Path(path_type=Path))
@pass_probe_context
def check_config(probe: ProbeContext, file: Path | None) -> None:
    """Validate the configuration and show what it means; exit 2 listing every mistake.

    FILE, when given, is checked instead of the file --config or the search would find.
    """
    if file is not None:
        probe = ProbeContext(config_path=file, environ=probe.environ)
    config = probe.config()
    for line in describe_config(config, probe.environ):
        click.echo(line)


def describe_config(config: Config, environ: Mapping[str, str] = os.environ) -> list[str]:
    """A short human summary of a valid configuration."""
    if config.source is not None:
        source = str(config.source)
    else:
        searched = ", ".join(str(p) for p in default_config_paths(environ))
        source = f"built-in defaults (no file found; searched {searched})"
    windows = ", ".join(format_duration(w) for w in config.windows)
    lines = [
        f"configuration  {source}",
        f"host           {config.host}",
        f"database       {config.database}",
        f"interval       {format_duration(config.interval)}; windows {windows}; "
        f"statistics {', '.join(config.statistics)}",
        f"retention      {format_duration(config.retention)} of minute records, then hourly; "
        f"histogram scale {config.scale}",
        f"baseline       {config.baseline.period}, expected = {config.baseline.expected}, "
        f"provisional for {format_duration(config.baseline.provisional_after)}",
        "metrics        "
        + (f"http://{config.metrics.listen}/metrics" if config.metrics else "off"),
    ]
    for target in config.targets:
        data_bytes = target.data_size.resolve()
        data = format_size(data_bytes)
        if target.data_size.ram_factor is not None:
            data = f"{target.data_size} = {data} on this node"
        pool = target.pool_files * target.object_size
        lines += [
            f"target {target.name}",
            f"  workspace    {config.workspace(target)}/",
            f"  data.bin     {data}",
            f"  md pool      {target.pool_files} files of {target.object_size} B "
            f"in {target.pool_dirs} directories ({format_size(pool)})",
        ]
    names = ", ".join(rule.name for rule in config.alerts)
    lines.append(f"alerts         {len(config.alerts)}" + (f" ({names})" if names else ""))
    lines.append("configuration OK")
    return lines


@main.command("run")
@click.option("--duration", type=str, default=None,
              help="Stop after this long (e.g. 90s, 10m): for demos and tests.")
@click.option("--prepare", "prepare_first", is_flag=True,
              help="Prepare missing or unfinished workspaces before probing.")
@click.option("-v", "--verbose", is_flag=True, help="Log debug messages too.")
@pass_probe_context
def run(probe: ProbeContext, duration: str | None, prepare_first: bool, verbose: bool) -> None:
    """Run the probing service (in the foreground; systemd runs it as a notify service)."""
    from slowdown.probe import logs
    from slowdown.probe.service import run_service

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
    if prepare_first:
        from slowdown.probe.workspace import prepare
        from slowdown.probe.workspace_errors import WorkspaceError

        for target in config.targets:
            try:
                prepare(target, config.host, progress=sys.stderr.isatty())
            except (WorkspaceError, OSError) as exc:
                log.error("target %s: %s", target.name, exc)
                raise click.exceptions.Exit(1) from None
    sys.exit(run_service(config, duration=seconds))


main.add_command(systemd_dropin, "systemd-dropin")
main.add_command(prepare_command, "prepare")
main.add_command(cleanup_command, "cleanup")

if __name__ == "__main__":  # pragma: no cover
    main()
