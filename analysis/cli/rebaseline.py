"""``slowdown rebaseline``: a new baseline in force from now, for each file named; the
baselines themselves are made in ``stats/baseline.py``."""

from __future__ import annotations

import datetime as dt
import sqlite3
import time
from pathlib import Path

import click

from slowdown.analysis.cli.read_setup import parse_time_option
from slowdown.analysis.stats.baseline import rebaseline
from slowdown.analysis.stats.weekly_upkeep import WEEK
from slowdown.analysis.store import Store, StoreError, expand_paths
from slowdown.analysis.store.period_histograms import data_lengths
from slowdown.analysis.units import format_duration


@click.command("rebaseline")
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
                                  provisional_after=config.baseline.provisional_after,
                                  weekly=config.baseline.weekly())
                lengths = data_lengths(store, made)
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
                      f"data) until {after} of data makes another" if provisional else "")
                   + ("; the flat value until a week of data makes a weekly one (each hour "
                      "of the week needs its own)" if config.baseline.expected == "weekly"
                      and min(lengths) < WEEK else ""))
    if failed:
        raise click.ClickException(f"{len(failed)} of {len(paths)} databases not rebaselined "
                                   f"(named above); the others were")
