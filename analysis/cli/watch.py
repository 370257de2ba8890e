"""``slowdown watch``: the live view, refreshed every second, with the probes stuck right now."""

from __future__ import annotations

import datetime as dt
import sys
import time

import click

from slowdown.analysis.cli import scope as cli
from slowdown.analysis.cli.output import fmt_ratio
from slowdown.analysis.cli.scope import read_options
from slowdown.analysis.stats.slowdown import target_slowdowns
from slowdown.analysis.units import format_duration, format_latency


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
