"""``slowdown check``: the monitoring-plugin mode (exit 0 OK, 1 WARNING, 2 CRITICAL,
3 UNKNOWN, with perfdata), for Nagios, Icinga and their kin."""

from __future__ import annotations

import sys

import click

from slowdown.analysis.cli import scope as cli
from slowdown.analysis.cli.output import fmt_ratio
from slowdown.analysis.cli.scope import read_options
from slowdown.analysis.stats.slowdown import target_slowdowns
from slowdown.analysis.store import Selection
from slowdown.analysis.units import format_duration

OK, WARNING, CRITICAL, UNKNOWN = 0, 1, 2, 3
STATE_NAMES = ("OK", "WARNING", "CRITICAL", "UNKNOWN")


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
