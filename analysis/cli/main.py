"""``slowdown``: the read side's command line.

``slowdown`` alone prints one line per target, like ``uptime``; the subcommands show a live
view, answer a monitoring system, tabulate, export and re-baseline. Every read command
takes ``--db`` (files or globs: several hosts merge into one cluster view), ``--target``,
``--host`` and ``--op`` (globs), and ``--at`` to look at a past moment.
"""

from __future__ import annotations

import datetime as dt
import functools
import os
import sqlite3
import sys
import time
from pathlib import Path

import click

from slowdown.analysis.cli.output import (
    clean,
    collecting_text,
    dump_json,
    fmt_ratio,
    state_notes,
    table,
)
from slowdown.analysis.cli.scope import (
    COLLECTING,
    PERCENT_RULE,
    Reader,
    TargetState,
    load_config_or_exit,
    open_reader,
    parse_fraction_option,
    parse_statistic_option,
    parse_time_option,
    read_options,
)
from slowdown.analysis.stats.baseline import rebaseline
from slowdown.analysis.stats.slowdown import TargetSlowdown, accurate_window, target_slowdowns
from slowdown.analysis.store import Store, StoreError, expand_paths
from slowdown.analysis.store.records import minute_of
from slowdown.analysis.units import format_clock, format_duration, format_latency

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
        ["--config", "config_after"], type=click.Path(path_type=Path), default=None,
        expose_value=False, is_eager=True, callback=_config_after, metavar="FILE",
        help="Configuration file (the same as --config before the command)."))


def _config_after(ctx: click.Context, _param: click.Parameter, value: Path | None) -> None:
    if value is None:
        return
    obj = ctx.ensure_object(dict)
    before = obj.get("config_path")
    if before is not None and os.path.abspath(before) != os.path.abspath(value):
        raise click.UsageError(f"--config names two files: {before} before the command and "
                               f"{value} after it; give one", ctx=ctx)
    obj["config_path"] = value
    obj["config"] = functools.lru_cache(maxsize=1)(lambda: load_config_or_exit(value))


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
  stopped     no fresh live state: the newest numbers, "service stopped;
              numbers from ..., 7m ago"
With --at no state is shown: a live state tells only of now.

\b
Exit status:
  0  numbers or a service state shown (running, collecting, stopped)
  1  nothing to show: no such database, no numbers and no service running,
     a damaged database
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
        except (StoreError, sqlite3.DatabaseError) as exc:
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
@click.option("--config", "config_path", type=click.Path(path_type=Path), default=None,
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
def main(ctx: click.Context, config_path: Path | None, dbs, targets, hosts, ops, at,
         statistic: str | None, verbose: bool, as_json: bool, accuracy: str | None) -> None:
    """How slow is each filesystem now, compared with usual (1 = normal, 10 = ten times slower)."""
    ctx.ensure_object(dict)
    ctx.obj["config_path"] = config_path
    ctx.obj["config"] = functools.lru_cache(maxsize=1)(lambda: load_config_or_exit(config_path))
    # `slowdown --db X stats` means the same as `slowdown stats --db X`.
    ctx.obj["read"] = {"dbs": dbs, "targets": targets, "hosts": hosts, "ops": ops, "at": at}
    if ctx.invoked_subcommand is not None:
        return
    reader = open_reader(ctx, dbs, targets, hosts, ops, at)
    stat = parse_statistic_option(statistic) if statistic else reader.config.statistics[0]
    wanted = parse_fraction_option(accuracy, "--accuracy") if accuracy is not None else None
    target_ops = reader.target_ops()
    states = reader.target_states()
    collecting = [t for t, ts in states.items() if ts.state == COLLECTING and t not in target_ops]
    if not target_ops and not collecting:
        raise click.ClickException(reader.nothing_to_show())
    reader.check_kept(reader.now - max(reader.config.windows), reader.now, "--at")
    book = reader.book()
    if wanted is not None:
        results = {}
        for target, tops in target_ops.items():
            found = accurate_window(reader.stores, book, target, tops, stat, reader.now, wanted,
                                    hosts=reader.hosts)
            results[target] = [found] if found else []
        show_uptime(reader, results, stat, verbose, as_json, accuracy=wanted, states=states)
        return
    results = target_slowdowns(reader.stores, book, list(target_ops), target_ops,
                               reader.config.windows, stat, reader.now, hosts=reader.hosts,
                               live_stuck=reader.live_stuck(), confidence=0.95 if verbose else None)
    show_uptime(reader, results, stat, verbose, as_json, states=states)


def show_uptime(reader: Reader, results: dict[str, list[TargetSlowdown]], stat: str,
                verbose: bool, as_json: bool, accuracy: float | None = None,
                states: dict[str, TargetState] | None = None) -> None:
    """One line per target: its numbers (with what is known of the service behind them), or
    that its service is collecting the first minute."""
    states = states or {}
    names = sorted({*results, *(t for t, ts in states.items() if ts.state == COLLECTING)})
    cluster = reader.cluster
    span = max((ts.window for windows in results.values() for ts in windows),
               default=max(reader.config.windows, default=3600))
    end = minute_of(reader.now)
    merged = reader.merged(end - span, end)
    if as_json:
        doc = {
            "time": reader.now,
            "statistic": stat,
            **({"accuracy": accuracy} if accuracy is not None else {}),
            "targets": [{
                "target": target,
                "windows": [_window_json(ts) for ts in results.get(target, [])],
                **({"found": bool(results.get(target))} if accuracy is not None else {}),
                **({"service": states[target].json(reader.now)} if target in states else {}),
            } for target in names],
        }
        if reader.at_now:
            doc["services"] = [s.json(reader.now) for s in reader.services()]
        doc["merged"] = merged.json()
        dump_json(doc)
        return
    clock = format_clock(reader.now)
    stuck_targets = {t for t, _ in reader.live_stuck()}
    width = max(len(t) for t in names)
    for target in names:
        windows = results.get(target)
        state = states.get(target)
        if windows is None and state is not None:  # collecting: no numbers yet
            flag = "  (stuck)" if target in stuck_targets else ""
            click.echo(f"{clock}  {target:<{width}}  {collecting_text(state, reader.now)}{flag}")
            continue
        if not windows:
            click.echo(f"{clock}  {target:<{width}}  no window reaches +-{accuracy:.0%} "
                       f"(longest tried: 24h)")
            continue
        parts = "  ".join(f"{format_duration(ts.window)} {fmt_ratio(ts.value)}" for ts in windows)
        worst = max((ts.worst for ts in windows if ts.worst), key=lambda o: o.value, default=None)
        tail = f"  worst {worst.op}" if worst else ""
        flags = []
        if any(ts.provisional for ts in windows):
            flags.append("provisional baseline")
        if any(o.observed.raised for ts in windows for o in ts.ops):
            flags.append("stuck")
        if state is not None:
            flags += state_notes(state, reader.now, cluster)
        note = f"  ({', '.join(flags)})" if flags else ""
        label = f"window {format_duration(windows[0].window)} for +-{accuracy:.0%}  " \
            if accuracy is not None else ""
        click.echo(f"{clock}  {target:<{width}}  {label}slowdown {stat}  {parts}{tail}{note}")
    if cluster:
        click.echo(f"{clock}  {merged.text(f'the last {format_duration(span)}')}")
    if verbose:
        rows = []
        for target, windows in results.items():
            for ts in windows:
                for o in ts.ops:
                    ob = o.observed
                    ci = (f"{format_latency(ob.low)}..{format_latency(ob.high)}"
                          if ob.low is not None else "-")
                    exp = o.expected
                    rows.append([target, o.op, format_duration(ts.window), format_latency(ob.value)
                                 + (" stuck" if ob.raised else ""), ci, ob.count,
                                 format_latency(exp.value) if exp else "-",
                                 ("provisional" if exp and exp.provisional else
                                  ("baseline" if exp else "-")),
                                 fmt_ratio(o.value)])
        if rows:
            click.echo()
            table(rows, ["target", "op", "window", stat, "95% ci", "n", "expected", "from",
                         "slowdown"], right=(3, 5, 6, 8))


def _window_json(ts: TargetSlowdown) -> dict:
    worst = ts.worst
    return {
        "window": ts.window,
        "slowdown": clean(ts.value),
        "worst_op": worst.op if worst else None,
        "provisional": ts.provisional,
        "ops": [{
            "op": o.op,
            "observed": clean(o.observed.value),
            "count": o.observed.count,
            "low": clean(o.observed.low),
            "high": clean(o.observed.high),
            "stuck": o.observed.stuck,
            "raised_to_stuck": o.observed.raised,
            "expected": clean(o.expected.value) if o.expected else None,
            "expected_statistic": o.expected.statistic if o.expected else None,
            "provisional": o.expected.provisional if o.expected else None,
            "slowdown": clean(o.value),
        } for o in ts.ops],
    }


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
    cannot be rebaselined is named and the others are done."""
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
            with Store(path) as store:
                made = rebaseline(store, now, reason, start, end, targets,
                                  statistics=config.statistics)
        except (StoreError, ValueError) as exc:
            if len(paths) == 1:
                raise click.ClickException(str(exc)) from None
            message = str(exc) if str(exc).startswith(str(path)) else f"{path}: {exc}"
            click.echo(f"Error: {message}", err=True)
            failed.append(path)
            continue
        pairs = sorted({(b.target, b.op) for b in made})
        where = f"{path}: " if len(paths) > 1 else ""
        since = dt.datetime.fromtimestamp(made[0].valid_from, dt.timezone.utc)
        click.echo(f"{where}new baseline for {len(pairs)} target/op pairs, in force from "
                   f"{since:%Y-%m-%d %H:%M} UTC, from data "
                   f"{format_duration(made[0].data_to - made[0].data_from)} long")
    if failed:
        raise click.ClickException(f"{len(failed)} of {len(paths)} databases not rebaselined "
                                   f"(named above); the others were")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
