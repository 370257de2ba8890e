"""``slowdown watch``: the live view, refreshed every second, with the probes stuck right now."""

from __future__ import annotations

import sys
import time

import click

from slowdown.analysis.cli import read_setup as cli
from slowdown.analysis.cli.options import read_options
from slowdown.analysis.cli.output import (
    collecting_text,
    failing_note,
    fmt_ratio,
    landing_notes,
    space_notes,
    state_notes,
)
from slowdown.analysis.stats.slowdown import target_slowdowns
from slowdown.analysis.units import format_clock, format_duration, format_latency
from slowdown.analysis.view.service_states import COLLECTING, NOT_YET, PREPARING, RUNNING, STOPPED

EPILOG = """\b
Each target shows its numbers, or "collecting since ..., first numbers at ..."
while its service has written no minute yet, or "preparing since ..." while
slowdown-probe makes the workspaces (watch keeps refreshing until the numbers
come); a stopped service is named, with the age of its newest numbers.

\b
Exit status:
  0  stopped after --count refreshes, or by Ctrl-C
  1  no such database (none being prepared or started either), a damaged
     one, or a --target, --host or --op that no file holds
  2  usage error: a bad option or value, a bad configuration file, --config
     naming two files
"""


@click.command("watch", epilog=EPILOG)
@read_options
@click.option("--stat", "statistic", default=None, help="Statistic (default: configured first).")
@click.option("--interval", default="1s", show_default=True, help="Refresh period.")
@click.option("--count", type=int, default=None, help="Stop after this many refreshes.")
@click.pass_context
def watch(ctx, dbs, targets, hosts, ops, at, statistic, interval, count):
    """Live view, refreshed every second: slowdowns and the probes in flight right now."""
    period = cli.parse_duration_option(interval, "--interval")
    shown = 0
    verdicts: dict = {}  # the last verdicts, read again every VERDICT_EVERY seconds
    live_view = None
    if sys.stdout.isatty():
        from rich.live import Live

        live_view = Live(auto_refresh=False)
        live_view.start()
    try:
        while count is None or shown < count:
            reader = cli.open_reader(ctx, dbs, targets, hosts, ops, at, waiting=True)
            text = _watch_frame(cli, reader, statistic, verdicts)
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


VERDICT_EVERY = 30.0  # seconds between two readings of the fleet (not one a second)


def _fleet_verdicts(reader, target_ops, cache: dict) -> dict:
    """The verdicts of the [fleet], read again when the last reading is VERDICT_EVERY old."""
    if reader.config.fleet is None:
        return {}
    if cache.get("at") is None or abs(reader.now - cache["at"]) >= VERDICT_EVERY:
        from slowdown.analysis.cli.uptime import verdicts_of

        cache["at"], cache["verdicts"] = reader.now, verdicts_of(reader, target_ops)
    return cache["verdicts"]


def _watch_frame(cli, reader, statistic, verdict_cache: dict | None = None) -> str:
    stat = cli.parse_statistic_option(statistic) if statistic else reader.config.statistics[0]
    target_ops = reader.target_ops()
    stuck = reader.live_stuck()
    states = reader.target_states()
    results = target_slowdowns(reader.stores, reader.book(), list(target_ops), target_ops,
                               reader.config.windows, stat, reader.now, hosts=reader.hosts,
                               live_stuck=stuck)
    names = sorted({*results, *(t for t, s in states.items() if s.state in NOT_YET)})
    verdicts = _fleet_verdicts(reader, target_ops, {} if verdict_cache is None
                               else verdict_cache)
    lines = [f"{format_clock(reader.now)}  slowdown ({stat})"]
    width = max((len(t) for t in names), default=6)
    cluster = len(reader.stores) > 1
    for target in names:
        state = states.get(target)
        if target in results:
            parts = "  ".join(f"{format_duration(ts.window)} {fmt_ratio(ts.value):>5}"
                              for ts in results[target])
            notes = state_notes(state, reader.now, cluster) if state is not None else []
            services = [s for s in reader.services() if target in s.targets]
            failing = failing_note(results[target], services, target, reader.now)
            notes += [*space_notes(services, target), *([failing] if failing else [])]
            word = f"  {verdicts[target].word}" if target in verdicts else ""
            lines.append(f"  {target:<{width}}  {parts}{word}"
                         + (f"  ({', '.join(notes)})" if notes else ""))
            if target in verdicts and verdicts[target].word in ("filesystem", "node"):
                lines.append(f"  {'':<{width}}  {verdicts[target].text()}")
        else:
            lines.append(f"  {target:<{width}}  {collecting_text(state, reader.now)}")
        for (t, op), age in sorted(stuck.items()):
            if t == target:
                lines.append(f"  {'':<{width}}  STUCK {op} for {format_latency(age)}")
    if not names:
        lines.append(f"  {reader.nothing_to_show()}")
    for service in reader.services():
        said = {RUNNING: "running", COLLECTING: "running, collecting its first minute",
                PREPARING: "not running yet: preparing the workspaces",
                STOPPED: "not running"}[service.state]
        if service.state == STOPPED and service.last_seen is not None:
            said += f" (last seen {format_clock(service.last_seen, reader.now)})"
        elif service.state == STOPPED and service.published is not None:
            said = f"read from a copy made at {format_clock(service.published, reader.now)}"
        lines.append(f"  service on {service.host or service.database}: {said}")
        span = max(reader.config.windows, default=3600)
        lines += [f"    {note}" for note in
                  landing_notes([service], reader.now - span, reader.now, reader.now)]
        if not service.live or service.state == STOPPED:
            continue
        for target, info in service.live.get("targets", {}).items():
            last = info.get("last", {})
            shown = ", ".join(f"{op} {format_latency(v.get('lat'))}" if "lat" in v
                              else f"{op} {v.get('err')}" for op, v in last.items())
            lines.append(f"    {target}: {shown}")
    return "\n".join(lines)

