"""``slowdown``: the read side's command line.

``slowdown`` alone prints one line per target, like ``uptime``; the subcommands show a live
view, answer a monitoring system, tabulate, export and re-baseline. Every read command
takes ``--db`` (files or globs: several hosts merge into one cluster view), ``--target``,
``--host`` and ``--op`` (globs), and ``--at`` to look at a past moment.
"""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

import click

from slowdown.analysis.cli.options import PERCENT_RULE, read_options
from slowdown.analysis.config.files import one_config

# No command calls a BLAS routine, yet numpy's bundled OpenBLAS starts a thread per core when
# it is imported: CPU for nothing, and on a small node in the way of import-fio's parsers.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

# -- the group and the uptime-like default ----------------------------------------------------

# Subcommands imported only when named (or listed by --help): the uptime-like default must not
# pay for numpy and the modules of commands it does not run.
SUBCOMMANDS = {
    "check": "check:check",
    "stats": "stats:stats",
    "history": "history:history",
    "watch": "watch:watch",
    "alerts": "alerts:alerts",
    "import-fio": "import_fio:import_fio",
    "report": "report:report",
}


# Subcommands that read no configuration, so take no --config of their own.
WITHOUT_CONFIG = {"import-fio"}


def accept_config_after(command: click.Command) -> None:
    """Give a subcommand a ``--config`` of its own (``slowdown check --config X`` means
    ``slowdown --config X check``); the same file named on both sides is fine, two files are
    a usage error."""
    if any(isinstance(p, click.Option) and "--config" in p.opts for p in command.params):
        return
    command.params.append(click.Option(
        ["--config", "config_after"], type=click.Path(path_type=Path), multiple=True,
        expose_value=False, is_eager=True, callback=_config_after, metavar="FILE",
        help="Configuration file (the same as --config before the command)."))


def _config_after(ctx: click.Context, _param: click.Parameter,
                  values: tuple[Path, ...]) -> None:
    value = one_config(values)
    if value is None:
        return
    obj = ctx.ensure_object(dict)
    before = obj.get("config_path")
    if before is not None and os.path.abspath(before) != os.path.abspath(value):
        raise click.UsageError(f"--config names two files: {before} before the command and "
                               f"{value} after it; give one", ctx=ctx)
    obj["config_path"] = value
    obj["config"] = _config_loader(value)


def _config_loader(path: Path | None):
    """The configuration, read once and only when a command asks for it."""

    def load() -> object:
        from slowdown.analysis.cli.scope import load_config_or_exit

        return load_config_or_exit(path)

    return functools.lru_cache(maxsize=1)(load)


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    """``slowdown, version X``: the form of ``slowdown-probe --version`` (click's)."""
    if not value or ctx.resilient_parsing:
        return
    try:
        from importlib.metadata import PackageNotFoundError, version
    except ImportError:  # pragma: no cover
        found = "unknown"
    else:
        try:
            found = version("slowdown")
        except PackageNotFoundError:
            found = "unknown (not installed)"
    click.echo(f"slowdown, version {found}")
    ctx.exit()


EPILOG = """\b
Service states (of each database's service, from the live state beside it):
  running     numbers as they come
  collecting  the service runs but has written no minute yet: "collecting
              since ..., first numbers at ..." (the first minute boundary
              after its first tick)
  preparing   slowdown-probe prepare (or run --prepare) makes the
              workspaces: "preparing since ...", the database not there yet
  stopped     no fresh live state, its stopped mark, or its process gone:
              the newest numbers, "service stopped; numbers from ..., 7m ago"
With --at no state is shown: a live state tells only of now.

\b
Exit status:
  0  numbers or a service state shown (running, collecting, preparing,
     stopped)
  1  nothing to show: no such database, no numbers and no service running,
     a damaged database, a --target, --host or --op that no file holds
  2  usage error: a bad option or value, a bad configuration file, --config
     naming two files
slowdown check: 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN (see its --help).
"""


class LazyGroup(click.Group):
    """A click group whose subcommands in ``SUBCOMMANDS`` are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *SUBCOMMANDS})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in SUBCOMMANDS and name not in self.commands:
            import importlib

            module, attribute = SUBCOMMANDS[name].split(":")
            command = getattr(importlib.import_module(f"{__package__}.{module}"), attribute)
            self.add_command(command, name)
        command = super().get_command(ctx, name)
        if command is not None and name not in WITHOUT_CONFIG:
            accept_config_after(command)
        return command

    def invoke(self, ctx: click.Context):
        """A database found damaged while reading is one line naming the file, not a traceback
        (``check`` answers UNKNOWN, as a monitoring plugin must)."""
        try:
            return super().invoke(ctx)
        except Exception as exc:
            # Imported here: import-fio, which reads no database, starts without them.
            import sqlite3

            from slowdown.analysis.store import StoreError

            if not isinstance(exc, (StoreError, sqlite3.DatabaseError)):
                raise
            message = str(exc)
            if not isinstance(exc, StoreError):  # read outside the store: name what was given
                given = (ctx.obj or {}).get("read", {}).get("dbs") or ()
                message = f"{', '.join(given) or 'database'}: {exc}"
            if ctx.invoked_subcommand == "check":
                click.echo(f"SLOWDOWN UNKNOWN - {message}")
                sys.exit(3)
            raise click.ClickException(message) from None


@click.group(cls=LazyGroup, invoke_without_command=True, epilog=EPILOG,
             context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True,
              callback=_print_version, help="Show the version and exit.")
@click.option("--config", "config_paths", type=click.Path(path_type=Path), multiple=True,
              help="Configuration file (default: $SLOWDOWN_CONFIG, "
                   "~/.config/slowdown/slowdown.toml, /etc/slowdown/slowdown.toml).")
@read_options
@click.option("--stat", "statistic", default=None, metavar="STAT",
              help="Statistic behind the slowdown: median, q95, ... (default: the "
                   "configuration's first).")
@click.option("-v", "--verbose", is_flag=True,
              help="Per-op table with the numbers behind each ratio.")
@click.option("--json", "as_json", is_flag=True, help="JSON instead of text.")
@click.option("--accuracy", default=None, metavar="PCT",
              help="Pick per target the shortest window whose confidence interval is within "
                   f"+-PCT: {PERCENT_RULE}.")
@click.pass_context
def main(ctx: click.Context, config_paths: tuple[Path, ...], dbs, targets, hosts, ops, at,
         statistic: str | None, verbose: bool, as_json: bool, accuracy: str | None) -> None:
    """How slow is each filesystem now, compared with usual (1 = normal, 10 = ten times slower)."""
    try:
        config_path = one_config(config_paths)
    except click.UsageError as exc:
        if ctx.invoked_subcommand == "check":  # a monitoring plugin's usage error: UNKNOWN
            click.echo(f"SLOWDOWN UNKNOWN - {exc.format_message()}")
            sys.exit(3)
        raise
    ctx.ensure_object(dict)
    ctx.obj["config_path"] = config_path
    ctx.obj["config"] = _config_loader(config_path)
    # `slowdown --db X stats` means the same as `slowdown stats --db X`.
    ctx.obj["read"] = {"dbs": dbs, "targets": targets, "hosts": hosts, "ops": ops, "at": at}
    if ctx.invoked_subcommand is not None:
        return
    from slowdown.analysis.cli.uptime import uptime

    uptime(ctx, dbs, targets, hosts, ops, at, statistic, verbose, as_json, accuracy)


# -- slowdown rebaseline ----------------------------------------------------------------------

@main.command("rebaseline")
@click.option("--reason", required=True, help="Why (recorded with the baseline).")
@click.option("--db", "dbs", multiple=True, metavar="FILE",
              help="Database file or glob; repeat for several hosts, each rebaselined from its "
                   "own data (default: configured).")
@click.option("--target", "targets", multiple=True, help="Only these targets.")
@click.option("--from", "data_from", default=None, metavar="TIME",
              help="Start of the data the baseline comes from (default: 1 day ago).")
@click.option("--to", "data_to", default=None, metavar="TIME",
              help="End of that data (default: now).")
@click.pass_context
def rebaseline_command(ctx: click.Context, reason: str, dbs: tuple[str, ...], targets, data_from,
                       data_to) -> None:
    """Start a new baseline now (after a system change), from recent data. Over several
    files each gets its own, from its own data, in force from the same moment; a file that
    cannot be rebaselined is named and the others are done. From less than [baseline]
    provisional_after (1d) of records it is provisional, and the service makes another once
    that much data exists."""
    import datetime as dt
    import sqlite3
    import time

    from slowdown.analysis.cli.scope import parse_time_option
    from slowdown.analysis.stats.baseline import rebaseline
    from slowdown.analysis.store import Store, StoreError, expand_paths
    from slowdown.analysis.units import format_duration

    config = ctx.obj["config"]()
    now = time.time()
    start = parse_time_option(data_from, now, "--from") if data_from else None
    end = parse_time_option(data_to, now, "--to") if data_to else None
    try:
        paths = expand_paths(dbs) if dbs else [Path(config.database)]
    except StoreError as exc:
        raise click.ClickException(str(exc)) from None
    failed = []
    for path in paths:
        try:
            with Store(path, create=False) as store:  # only into a slowdown database
                made = rebaseline(store, now, reason, start, end, targets,
                                  statistics=config.statistics,
                                  provisional_after=config.baseline.provisional_after)
                lengths = _data_lengths(store, made)
        except (StoreError, ValueError, sqlite3.DatabaseError) as exc:
            message = str(exc) if str(exc).startswith(str(path)) else f"{path}: {exc}"
            if len(paths) == 1:
                raise click.ClickException(message) from None
            click.echo(f"Error: {message}", err=True)
            failed.append(path)
            continue
        pairs = sorted({(b.target, b.op) for b in made})
        where = f"{path}: " if len(paths) > 1 else ""
        since = dt.datetime.fromtimestamp(made[0].valid_from, dt.timezone.utc)
        shortest, longest = (format_duration(n) for n in (min(lengths), max(lengths)))
        provisional = sum(1 for pair in pairs if any(b.provisional for b in made
                                                     if (b.target, b.op) == pair))
        after = format_duration(config.baseline.provisional_after)
        click.echo(f"{where}new baseline for {len(pairs)} target/op pairs, in force from "
                   f"{since:%Y-%m-%d %H:%M} UTC, from data "
                   f"{shortest if shortest == longest else f'{shortest} to {longest}'} long"
                   + (f"; provisional for {provisional} of them (from less than {after} of "
                      f"data) until {after} of data makes another" if provisional else ""))
    if failed:
        raise click.ClickException(f"{len(failed)} of {len(paths)} databases not rebaselined "
                                   f"(named above); the others were")


def _data_lengths(store, made) -> list[int]:
    """How long the data of each new baseline's pair really is (not the period asked for:
    three minutes of records in a day's period are three minutes of data)."""
    from slowdown.analysis.stats.baseline import data_extent

    found = {(b.target, b.op): data_extent(store, b.target, b.op, b.data_from, b.data_to)
             for b in made}
    return [end - start for start, end in (f for f in found.values() if f is not None)]


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
