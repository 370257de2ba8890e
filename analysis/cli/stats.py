"""``slowdown stats``: the per-op table over a window (count, errors, mean, std, min,
quartiles, max), and with ``--provision`` the nodes an aggregate needs."""

from __future__ import annotations

import math

import click

from slowdown.analysis.cli import read_setup as cli
from slowdown.analysis.cli.options import read_options
from slowdown.analysis.cli.output import clean, dump_json, table
from slowdown.analysis.cli.provision import parse_provision_options, provision_options
from slowdown.analysis.stats.window import quantile
from slowdown.analysis.store import Selection, aggregate
from slowdown.analysis.store.records import MINUTE
from slowdown.analysis.units import format_clock, format_latency

STATS_COLUMNS = ("count", "errors", "mean", "std", "min", "25%", "50%", "75%", "max")


@click.command("stats")
@read_options
@click.option("--since", default="1h", show_default=True, help="Start: a duration ago or a time.")
@click.option("--until", default=None, help="End (default: now).")
@click.option("--json", "as_json", is_flag=True, help="JSON instead of a table.")
@provision_options
@click.pass_context
def stats(ctx, dbs, targets, hosts, ops, at, since, until, as_json, provision, confidence,
          trials, seed):
    """Per-op table over a window: count, mean, std, min, 25%, 50%, 75%, max; with
    --provision, the nodes needed for an aggregate (see docs/REPORT.md)."""
    from slowdown.analysis.report import provision as prov

    reader = cli.open_reader(ctx, dbs, targets, hosts, ops, at)
    start = cli.parse_time_option(since, reader.now, "--since")
    end = cli.parse_time_option(until, reader.now, "--until")
    if start >= end:
        raise click.BadParameter("must be before --until", param_hint="--since")
    # Whole minutes that begin in [--since, --until): the current minute is in with what it
    # holds so far, and a window never cuts a minute record (hour records: by overlap).
    start, end = (-(-int(t) // MINUTE) * MINUTE for t in (start, end))
    cli.check_kept(reader, start, end, "--since")
    goal, level = parse_provision_options(provision, confidence)
    rows, doc = [], []
    for target, target_ops in reader.target_ops().items():
        for op in target_ops:
            agg = aggregate(reader.stores, Selection(reader.hosts, (target,), (op,),
                                                     int(start), int(end)))
            h = agg.histogram
            values = {
                "count": round(agg.samples), "errors": round(agg.errors), "mean": h.mean,
                "std": h.std, "min": h.min if h.count else math.nan,
                "25%": quantile(agg, 0.25), "50%": quantile(agg, 0.5),
                "75%": quantile(agg, 0.75), "max": h.max if h.count else math.nan,
            }
            doc.append({"target": target, "op": op, "skipped": round(agg.skipped),
                        "stuck": agg.stuck, **{k: clean(v) for k, v in values.items()}})
            rows.append([target, op, values["count"], values["errors"],
                         *(format_latency(values[k]) for k in STATS_COLUMNS[2:])])
    span = f"{format_clock(start, 0.0)} .. {format_clock(end, 0.0)}"  # dates, local zone
    planned = None
    if goal is not None:
        figures = prov.per_node_figures(reader.stores, Selection(
            reader.hosts, reader.targets, reader.ops, int(start), int(end)))
        keys = [(d["target"], d["op"]) for d in doc]
        planned = prov.provision_ops(figures, goal, level, trials, seed, keys)
    if as_json:
        extra = {"provision": prov.provision_json(planned, goal, level, trials, seed)} \
            if planned is not None else {}
        dump_json({"from": start, "to": end, "ops": doc, **extra})
        return
    table(rows, ["target", "op", *STATS_COLUMNS], right=range(2, 11), title=span)
    if planned is not None:
        click.echo()
        cells, headers = prov.provision_table(planned, level)
        table(cells, headers, right=range(2, 8), title=f"nodes for {goal.text} "
              f"({trials} trials, seed {seed}; per node: one host's minutes, ops/s)")
