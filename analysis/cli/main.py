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

from slowdown.analysis.cli.output import clean, dump_json, fmt_ratio, table
from slowdown.analysis.cli.scope import (
    Reader,
    load_config_or_exit,
    open_reader,
    parse_fraction_option,
    parse_statistic_option,
    parse_time_option,
    read_options,
)
from slowdown.analysis.stats.baseline import rebaseline
from slowdown.analysis.stats.slowdown import TargetSlowdown, accurate_window, target_slowdowns
from slowdown.analysis.store import Store, StoreError
from slowdown.analysis.units import format_duration, format_latency

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
        return super().get_command(ctx, name)

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


@click.group(cls=LazyGroup, invoke_without_command=True,
             context_settings={"help_option_names": ["-h", "--help"]})
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
                   "+-PCT, e.g. 10%.")
@click.pass_context
def main(ctx: click.Context, config_path: Path | None, dbs, targets, hosts, ops, at,
         statistic: str | None, verbose: bool, as_json: bool, accuracy: str | None) -> None:
    """How slow is each filesystem now, compared with usual (1 = normal, 10 = ten times slower)."""
    ctx.ensure_object(dict)
    ctx.obj["config"] = functools.lru_cache(maxsize=1)(lambda: load_config_or_exit(config_path))
    # `slowdown --db X stats` means the same as `slowdown stats --db X`.
    ctx.obj["read"] = {"dbs": dbs, "targets": targets, "hosts": hosts, "ops": ops, "at": at}
    if ctx.invoked_subcommand is not None:
        return
    reader = open_reader(ctx, dbs, targets, hosts, ops, at)
    stat = parse_statistic_option(statistic) if statistic else reader.config.statistics[0]
    target_ops = reader.target_ops()
    if not target_ops:
        raise click.ClickException("no data for the chosen targets, hosts and ops")
    book = reader.book()
    if accuracy is not None:
        wanted = parse_fraction_option(accuracy, "--accuracy")
        results = {}
        for target, tops in target_ops.items():
            found = accurate_window(reader.stores, book, target, tops, stat, reader.now, wanted,
                                    hosts=reader.hosts)
            results[target] = [found] if found else []
        show_uptime(reader, results, stat, verbose, as_json, accuracy=wanted)
        return
    results = target_slowdowns(reader.stores, book, list(target_ops), target_ops,
                               reader.config.windows, stat, reader.now, hosts=reader.hosts,
                               live_stuck=reader.live_stuck(), confidence=0.95 if verbose else None)
    show_uptime(reader, results, stat, verbose, as_json)


def show_uptime(reader: Reader, results: dict[str, list[TargetSlowdown]], stat: str,
                verbose: bool, as_json: bool, accuracy: float | None = None) -> None:
    clock = dt.datetime.fromtimestamp(reader.now).strftime("%H:%M:%S")
    if as_json:
        dump_json({
            "time": reader.now,
            "statistic": stat,
            **({"accuracy": accuracy} if accuracy is not None else {}),
            "targets": [{
                "target": target,
                "windows": [_window_json(ts) for ts in windows],
                **({"found": bool(windows)} if accuracy is not None else {}),
            } for target, windows in results.items()],
        })
        return
    width = max(len(t) for t in results)
    for target, windows in results.items():
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
        note = f"  ({', '.join(flags)})" if flags else ""
        label = f"window {format_duration(windows[0].window)} for +-{accuracy:.0%}  " \
            if accuracy is not None else ""
        click.echo(f"{clock}  {target:<{width}}  {label}slowdown {stat}  {parts}{tail}{note}")
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
@click.option("--db", "db", default=None, metavar="FILE", help="Database (default: configured).")
@click.option("--target", "targets", multiple=True, help="Only these targets.")
@click.option("--from", "data_from", default=None, metavar="TIME",
              help="Start of the data the baseline comes from (default: 1 day ago).")
@click.option("--to", "data_to", default=None, metavar="TIME",
              help="End of that data (default: now).")
@click.pass_context
def rebaseline_command(ctx: click.Context, reason: str, db: str | None, targets, data_from,
                       data_to) -> None:
    """Start a new baseline now (after a system change), from recent data."""
    config = ctx.obj["config"]()
    now = time.time()
    start = parse_time_option(data_from, now, "--from") if data_from else None
    end = parse_time_option(data_to, now, "--to") if data_to else None
    try:
        with Store(db or config.database) as store:
            made = rebaseline(store, now, reason, start, end, targets,
                              statistics=config.statistics)
    except (StoreError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None
    pairs = sorted({(b.target, b.op) for b in made})
    click.echo(f"new baseline for {len(pairs)} target/op pairs, in force from "
               f"{dt.datetime.fromtimestamp(made[0].valid_from, dt.timezone.utc):%Y-%m-%d %H:%M}"
               f" UTC, from data {format_duration(made[0].data_to - made[0].data_from)} long")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
