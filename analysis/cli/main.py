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
from slowdown.analysis.config.files import add_config_after, check_config_after, one_config

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
    "rebaseline": "rebaseline:rebaseline_command",
    "trends": "trends:trends",
    "motd": "motd_command:motd",
    "servers": "servers:servers",
}


# Subcommands that read no configuration, so take no --config of their own.
WITHOUT_CONFIG = {"import-fio"}


def accept_config_after(command: click.Command) -> None:
    """Give a subcommand a ``--config`` of its own (``slowdown check --config X`` means
    ``slowdown --config X check``); the same file named on both sides is fine, two files are
    a usage error."""
    add_config_after(command, _config_after)


def _config_after(ctx: click.Context, _param: click.Parameter,
                  values: tuple[Path, ...]) -> None:
    value = one_config(values)
    if value is None:
        return
    obj = ctx.ensure_object(dict)
    check_config_after(ctx, obj.get("config_path"), value)
    obj["config_path"] = value
    obj["config"] = _config_loader(value)


def _config_loader(path: Path | None):
    """The configuration, read once and only when a command asks for it."""

    def load() -> object:
        from slowdown.analysis.cli.read_setup import load_config_or_exit

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


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
