"""The read subcommands: check, stats, history and watch (registered on ``slowdown``)."""

from __future__ import annotations

import datetime as dt
import math
import os
import sys
import time

import click

from slowdown.analysis.cli import scope as cli
from slowdown.analysis.cli.output import clean, dump_json, fmt_ratio, table
from slowdown.analysis.cli.scope import read_options
from slowdown.analysis.report.provision import provision_options
from slowdown.analysis.stats.slowdown import target_slowdowns
from slowdown.analysis.store import Selection, Store, aggregate
from slowdown.analysis.store.records import minute_of
from slowdown.analysis.units import format_duration, format_latency

OK, WARNING, CRITICAL, UNKNOWN = 0, 1, 2, 3
STATE_NAMES = ("OK", "WARNING", "CRITICAL", "UNKNOWN")


# -- slowdown check ----------------------------------------------------------------------------

def _thresholds(config, statistic: str, window: float) -> tuple[float | None, float | None]:
    """Warning and critical levels from the configuration's slowdown alert rules."""
    rules = [r for r in config.alerts if r.kind == "slowdown"
             and r.statistic == statistic and r.window == window]
    warn = min((r.above for r in rules if r.above is not None), default=None)
    crit = min((r.critical for r in rules if r.critical is not None), default=None)
    return warn, crit


@click.command("check")
@read_options
@click.option("--window", default="10m", show_default=True, help="Window of the slowdown.")
@click.option("--stat", "statistic", default=None, help="Statistic (default: configured first).")
@click.option("-w", "--warning", type=float, default=None,
              help="WARNING above this slowdown (default: from alert rules, else 3).")
@click.option("-c", "--critical", type=float, default=None,
              help="CRITICAL above this slowdown (default: from alert rules, else 10).")
@click.option("--stale", default="3m", show_default=True,
              help="UNKNOWN when the newest record is older than this.")
@click.pass_context
def check(ctx, dbs, targets, hosts, ops, at, window, statistic, warning, critical, stale):
    """Monitoring-plugin mode: exit 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN, with perfdata."""
    try:
        reader = cli.open_reader(ctx, dbs, targets, hosts, ops, at)
        span = cli.parse_duration_option(window, "--window")
        stale_after = cli.parse_duration_option(stale, "--stale")
        stat = cli.parse_statistic_option(statistic) if statistic else reader.config.statistics[0]
    except click.ClickException as exc:
        click.echo(f"SLOWDOWN UNKNOWN - {exc.format_message()}")
        sys.exit(UNKNOWN)
    warn_cfg, crit_cfg = _thresholds(reader.config, stat, span)
    warn = warning if warning is not None else (warn_cfg if warn_cfg is not None else 3.0)
    crit = critical if critical is not None else (crit_cfg if crit_cfg is not None else 10.0)
    target_ops = reader.target_ops()
    if not target_ops:
        click.echo("SLOWDOWN UNKNOWN - no data for the chosen targets")
        sys.exit(UNKNOWN)
    results = target_slowdowns(reader.stores, reader.book(), list(target_ops), target_ops,
                               [span], stat, reader.now, hosts=reader.hosts,
                               live_stuck=reader.live_stuck())
    newest = max((s.latest_start(Selection(hosts=reader.hosts, targets=reader.targets))
                  or 0) for s in reader.stores)
    states, parts, perf = [], [], []
    if reader.now - (newest + 60) > stale_after:
        age = format_duration(max(0, round(reader.now - newest - 60)))
        click.echo(f"SLOWDOWN UNKNOWN - no new records for {age} (is the service running?)")
        sys.exit(UNKNOWN)
    for target, (ts,) in results.items():
        value = ts.value
        if value is None:
            state = UNKNOWN
            parts.append(f"{target} no data")
        else:
            state = CRITICAL if value > crit else WARNING if value > warn else OK
            worst = ts.worst
            parts.append(f"{target} {fmt_ratio(value)} ({worst.op})")
            perf.append(f"'{target}'={value:.3f};{warn:g};{crit:g};0")
        states.append(state)
    # The worst state wins: CRITICAL, then WARNING, then UNKNOWN (a target without data).
    worst_state = next((s for s in (CRITICAL, WARNING, UNKNOWN) if s in states), OK)
    label = f"{stat} over {format_duration(span)}"
    click.echo(f"SLOWDOWN {STATE_NAMES[worst_state]} - {label}: {', '.join(parts)}"
               + (f" | {' '.join(perf)}" if perf else ""))
    sys.exit(worst_state)


# -- slowdown stats ----------------------------------------------------------------------------

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
    goal, level = prov.parse_provision_options(provision, confidence)
    rows, doc = [], []
    for target, target_ops in reader.target_ops().items():
        for op in target_ops:
            agg = aggregate(reader.stores, Selection(reader.hosts, (target,), (op,),
                                                     int(start), int(end)))
            h = agg.histogram
            values = {
                "count": h.count, "errors": agg.errors, "mean": h.mean,
                "std": h.std, "min": h.min if h.count else math.nan,
                "25%": h.quantile(0.25), "50%": h.quantile(0.5), "75%": h.quantile(0.75),
                "max": h.max if h.count else math.nan,
            }
            doc.append({"target": target, "op": op, "skipped": agg.skipped,
                        "stuck": agg.stuck, **{k: clean(v) for k, v in values.items()}})
            rows.append([target, op, h.count, agg.errors,
                         *(format_latency(values[k]) for k in STATS_COLUMNS[2:])])
    span = (f"{dt.datetime.fromtimestamp(start):%Y-%m-%d %H:%M} .. "
            f"{dt.datetime.fromtimestamp(end):%Y-%m-%d %H:%M}")
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


# -- slowdown history --------------------------------------------------------------------------

@click.command("history")
@read_options
@click.option("--since", default="1d", show_default=True, help="Start: a duration ago or a time.")
@click.option("--until", default=None, help="End (default: now).")
@click.option("--every", default="1m", show_default=True, help="Step (whole minutes).")
@click.option("--stat", "statistics", multiple=True,
              help="Statistics to include (default: median q90 q95 q99).")
@click.option("--format", "fmt", type=click.Choice(["csv", "json"]), default="csv",
              show_default=True)
@click.option("--jobs", type=click.IntRange(1, None), default=None,
              help="Processes reading the series at once (CSV; default: one per free CPU, "
                   "up to 8, when there are over 100,000 records to read).")
@click.pass_context
def history(ctx, dbs, targets, hosts, ops, at, since, until, every, statistics, fmt, jobs):
    """Percentiles and slowdown over time, one row per step, target and op (CSV or JSON)."""
    reader = cli.open_reader(ctx, dbs, targets, hosts, ops, at)
    start = minute_of(cli.parse_time_option(since, reader.now, "--since"))
    end = minute_of(cli.parse_time_option(until, reader.now, "--until"))
    if start >= end:
        raise click.BadParameter("must be at least a minute before --until", param_hint="--since")
    step = cli.parse_duration_option(every, "--every")
    if step < 60 or step % 60:
        raise click.BadParameter("must be whole minutes", param_hint="--every")
    stats_ = list(dict.fromkeys(cli.parse_statistic_option(s) for s in statistics)) or \
        ["median", "q90", "q95", "q99"]  # a statistic named twice is one column
    headline = reader.config.statistics[0] if reader.config.statistics[0] in stats_ else \
        stats_[0]
    names = ["time", "target", "op", "count", "errors", "skipped", "stuck", *stats_,
             f"slowdown_{headline}"]
    selection = Selection(reader.hosts, reader.targets, reader.ops, start, end)
    history_rows = _HistoryTable(reader, selection, int(step), stats_, headline)
    if fmt == "json":
        cells, data = history_rows.compute(reader.stores, selection)
        _write_history_json(sys.stdout, {"step": step, "from": start, "to": end}, names,
                            cells, data)
        return
    from slowdown.analysis.cli import csvtext
    from slowdown.analysis.cli import parallel as forked

    pairs, records = _pairs(reader.stores, selection)
    parts = max(1, min(len(pairs), jobs or min(forked.cpus(), forked.MAX_PROCESSES,
                                                records // 100_000)))
    chunks = [pairs[len(pairs) * i // parts:len(pairs) * (i + 1) // parts] for i in range(parts)]
    sys.stdout.buffer.write(csvtext.header(names))
    try:
        forked.write_in_order([tuple(c) for c in chunks], history_rows.csv, sys.stdout.buffer)
    except forked.PartFailed as exc:
        raise click.ClickException(str(exc)) from None


class _HistoryTable:
    """The rows of ``slowdown history`` for some of the series: computed in this process, or
    in a forked one from databases it opens itself."""

    def __init__(self, reader, selection: Selection, step: int, stats_: list[str],
                 headline: str) -> None:
        self.reader, self.selection, self.step = reader, selection, step
        self.stats, self.headline = stats_, headline
        self.pid = os.getpid()

    def compute(self, stores, selection: Selection):
        """The cells, and the columns after time, target and op."""
        from slowdown.analysis.report.data import expected_values
        from slowdown.analysis.stats import series
        from slowdown.analysis.stats.baseline import BaselineBook

        quantile_stats = [s for s in self.stats if s not in ("mean", "max")]
        cells = series.history(stores, selection, self.step, quantile_stats,
                               moments="mean" in self.stats or "max" in self.stats)
        columns = {s: series.raised(cells.quantiles[s], cells.stuck) for s in quantile_stats}
        if "mean" in self.stats:
            columns["mean"] = series.raised(series.mean_of(cells), cells.stuck)
        if "max" in self.stats:
            columns["max"] = series.raised(cells.max, cells.stuck)
        book = BaselineBook(stores, self.reader.config.baseline.expected)
        first, last = (int(cells.start.min()), int(cells.start.max())) if len(cells) else (0, 0)
        ratio = columns[self.headline] / expected_values(book, cells, self.headline, first, last)
        return cells, [cells.start, cells.target, cells.op, cells.count, cells.errors,
                       cells.skipped, cells.stuck, *(columns[s] for s in self.stats), ratio]

    def csv(self, pairs: tuple[tuple[str, str], ...]) -> list[bytes]:
        """The CSV lines of the series ``pairs``, in pieces."""
        import dataclasses

        from slowdown.analysis.cli import csvtext

        stores = self.reader.stores if os.getpid() == self.pid else \
            [Store(s.path, readonly=True) for s in self.reader.stores]
        cells, data = self.compute(stores, dataclasses.replace(self.selection, pairs=pairs))
        target, op = ([name[i] for name in cells.names] for i in (0, 1))
        columns = [csvtext.Times(cells.start), csvtext.Names(target, cells.series),
                   csvtext.Names(op, cells.series), *map(csvtext.Integers, data[3:6]),
                   *map(csvtext.Floats, data[6:])]
        return csvtext.text(columns, len(cells))


def _pairs(stores, selection: Selection) -> tuple[list[tuple[str, str]], int]:
    """The (target, op) names the selection takes from the stores, sorted, and at most how
    many records it reads (series times minutes)."""
    from slowdown.analysis.stats.series import selected_series

    found = selected_series(stores, selection)
    minutes = max(0, (selection.end - selection.start) // 60)
    return sorted({(target, op) for target, op, *_ in found}), len(found) * minutes


def _write_history_json(out, head: dict, names: list[str], cells, data: list,
                        block: int = 65536) -> None:
    """The document ``dump_json`` would write for ``{**head, "rows": [...]}``, byte for
    byte, a block of rows at a time: 30 days of minutes are half a million rows, too many
    to build as dicts (seconds, and gigabytes) before the first byte goes out."""
    import json

    start = json.dumps(head, indent=2)
    out.write(start[:-2] + ',\n  "rows": [')  # the head without its closing "\n}"
    row = "    {{\n" + ",\n".join(
        "      " + json.dumps(k).replace("{", "{{").replace("}", "}}") + ": {}"
        for k in names) + "\n    }}"
    target, op = ([json.dumps(name[i]) for name in cells.names] for i in (0, 1))
    times: dict[int, str] = {}
    for first in range(0, len(cells), block):
        part = slice(first, first + block)
        code = cells.series[part].tolist()
        columns = [[times.get(t) or times.setdefault(t, f'"{_iso(t)}"')
                    for t in data[0][part].tolist()],
                   [target[c] for c in code], [op[c] for c in code],
                   *([str(v) for v in c[part].tolist()] for c in data[3:6]),
                   *(_json_floats(c[part]) for c in data[6:])]
        out.write(("," if first else "") + "\n" + ",\n".join(
            row.format(*values) for values in zip(*columns)))
    out.write("\n  ]\n}\n" if len(cells) else "]\n}\n")


def _json_floats(values) -> list[str]:
    """Floats as ``json.dumps`` writes them, NaN as null (as ``dump_json``)."""
    import numpy as np

    out = list(map(float.__repr__, values.tolist()))
    for i in np.flatnonzero(~np.isfinite(values)).tolist():
        v = float(values[i])
        out[i] = "null" if math.isnan(v) else "Infinity" if v > 0 else "-Infinity"
    return out


def _iso(t: int) -> str:
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# -- slowdown watch ----------------------------------------------------------------------------

@click.command("watch")
@read_options
@click.option("--stat", "statistic", default=None, help="Statistic (default: configured first).")
@click.option("--interval", default="1s", show_default=True, help="Refresh period.")
@click.option("--count", type=int, default=None, help="Stop after this many refreshes.")
@click.pass_context
def watch(ctx, dbs, targets, hosts, ops, at, statistic, interval, count):
    """Live view, refreshed every second: slowdowns and the probes in flight right now."""
    period = cli.parse_duration_option(interval, "--interval")
    shown = 0
    live_view = None
    if sys.stdout.isatty():
        from rich.live import Live

        live_view = Live(auto_refresh=False)
        live_view.start()
    try:
        while count is None or shown < count:
            reader = cli.open_reader(ctx, dbs, targets, hosts, ops, at)
            text = _watch_frame(cli, reader, statistic)
            for s in reader.stores:
                s.close()
            if live_view is not None:
                live_view.update(text, refresh=True)
            else:
                click.echo(text + "\n")
            shown += 1
            if count is None or shown < count:
                time.sleep(period)
    except KeyboardInterrupt:
        pass
    finally:
        if live_view is not None:
            live_view.stop()


def _watch_frame(cli, reader, statistic) -> str:
    stat = cli.parse_statistic_option(statistic) if statistic else reader.config.statistics[0]
    target_ops = reader.target_ops()
    stuck = reader.live_stuck()
    results = target_slowdowns(reader.stores, reader.book(), list(target_ops), target_ops,
                               reader.config.windows, stat, reader.now, hosts=reader.hosts,
                               live_stuck=stuck)
    lines = [f"{dt.datetime.fromtimestamp(reader.now):%H:%M:%S}  slowdown ({stat})"]
    width = max((len(t) for t in results), default=6)
    for target, windows in results.items():
        parts = "  ".join(f"{format_duration(ts.window)} {fmt_ratio(ts.value):>5}"
                          for ts in windows)
        lines.append(f"  {target:<{width}}  {parts}")
        for (t, op), age in sorted(stuck.items()):
            if t == target:
                lines.append(f"  {'':<{width}}  STUCK {op} for {format_latency(age)}")
    for store in reader.stores:
        state = cli.read_live(store.path)
        if not state:
            continue
        fresh = reader.now - state.get("updated", 0) <= cli.LIVE_FRESH
        lines.append(f"  service on {state.get('host')}: "
                     + ("running" if fresh else "not running (live state is stale)"))
        for target, info in state.get("targets", {}).items():
            last = info.get("last", {})
            shown = ", ".join(f"{op} {format_latency(v.get('lat'))}" if "lat" in v
                              else f"{op} {v.get('err')}" for op, v in last.items())
            lines.append(f"    {target}: {shown}")
    return "\n".join(lines)


__all__ = ["CRITICAL", "OK", "UNKNOWN", "WARNING", "check", "history", "stats", "watch"]
