"""``slowdown check``: the monitoring-plugin mode (exit 0 OK, 1 WARNING, 2 CRITICAL,
3 UNKNOWN, with perfdata), for Nagios, Icinga and their kin."""

from __future__ import annotations

import sys

import click

from slowdown.analysis.cli import read_setup as cli
from slowdown.analysis.cli.options import read_options
from slowdown.analysis.cli.output import (
    collecting_text,
    failing_now_note,
    fmt_ratio,
    landing_notes,
    last_errors,
    space_notes,
    state_notes,
)
from slowdown.analysis.stats.slowdown import target_slowdowns
from slowdown.analysis.store import Selection
from slowdown.analysis.store.records import minute_of
from slowdown.analysis.units import format_age, format_clock, format_duration
from slowdown.analysis.view.service_states import NOT_YET, PREPARING, RUNNING, STOPPED

OK, WARNING, CRITICAL, UNKNOWN = 0, 1, 2, 3
STATE_NAMES = ("OK", "WARNING", "CRITICAL", "UNKNOWN")

# Error rates (failed ops over attempts in the window) that turn check WARNING and CRITICAL
# when neither an option nor an error_rate alert rule of the window sets them. The probe
# makes about 60 attempts of each op a minute, 600 in the default 10-minute window: one
# transient error is 0.2 %, and a filesystem that fails one op in twenty for ten minutes (5 %,
# 30 failures) is failing users whatever its latency says; one in four (25 %) fails most
# multi-file jobs outright. Above a level, never at it, as the alert rules have it.
ERRORS_WARNING = 0.05
ERRORS_CRITICAL = 0.25
STALE = 180.0  # seconds: a newest record older than this (and its minute) is UNKNOWN


def _thresholds(config, kind: str, window: float, statistic: str | None = None
                ) -> tuple[float | None, float | None]:
    """Warning and critical levels from the configuration's alert rules of ``kind``
    (``slowdown`` of the statistic, or ``error_rate``) over the same window."""
    rules = [r for r in config.alerts if r.kind == kind and r.window == window
             and (statistic is None or r.statistic == statistic)]
    warn = min((r.above for r in rules if r.above is not None), default=None)
    crit = min((r.critical for r in rules if r.critical is not None), default=None)
    return warn, crit


def parse_rate(text: str | None, flag: str) -> float | None:
    """An error rate given as a percentage (``5%``) or a fraction (``0.05``)."""
    if text is None:
        return None
    raw = text.strip()
    try:
        value = float(raw[:-1]) / 100.0 if raw.endswith("%") else float(raw)
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a rate (5% or 0.05)", param_hint=flag) \
            from None
    if not 0.0 <= value <= 1.0:
        raise click.BadParameter(f"{text!r} is outside 0..100 %", param_hint=flag)
    return value


def _collecting(reader, collecting: dict) -> tuple[list[int], list[str]]:
    """Levels and words of the targets whose service has written no minute yet: UNKNOWN
    while they collect, CRITICAL when every op fails now (an evicted client, a mount gone in
    the first minute: no window holds it yet, the live state does)."""
    levels, parts = [], []
    for target, ts in collecting.items():
        probing = [s for s in reader.services() if target in s.targets]
        gone = failing_now_note(probing, target, reader.now)
        levels.append(CRITICAL if gone else UNKNOWN)
        parts.append(f"{target} {collecting_text(ts, reader.now)}" + (f", {gone}" if gone else ""))
    return levels, parts


def _level(value: float, warn: float, crit: float) -> int:
    return CRITICAL if value > crit else WARNING if value > warn else OK


def _percent(rate: float) -> str:
    """93.3%, 0.167%, 100%: enough digits to see one failure in a 10-minute window."""
    return f"{rate * 100:.3g}%"


EPILOG = """\b
Exit status (the monitoring-plugin convention):
  0  OK        every target's slowdown at or below --warning, and every
               op's error rate at or below --errors-warning
  1  WARNING   a slowdown above --warning, or an op's error rate (failed ops
               over attempts in the window) above --errors-warning
  2  CRITICAL  a slowdown above --critical, or an error rate above
               --errors-critical, or a target's filesystem at least --full
               full (bytes or inodes), or records that are not reaching the
               database (deleted, replaced, full, read-only: "records are
               not reaching PATH since ..."), or did not while it was
               deleted or replaced within the window, or every op of a
               target failing now ("failing: every op since ..."), also
               while its service collects its first minute
  3  UNKNOWN   no numbers to judge: the service is collecting its first
               minute ("collecting since ..., first numbers at ...") or
               preparing the workspaces, it is known to have stopped (its
               last live state says so, or its process is gone: "service
               stopped; numbers from ..., 7m ago"), the newest record is
               older than --stale, no data, no such or a damaged database,
               a name no file holds, a bad option or configuration
               (a warning level above the critical one, -w above -c or
               --errors-warning above --errors-critical, is one)
The first line of output is "SLOWDOWN <STATE> - <text> | <perfdata>": per target
its slowdown ('work'=1.020;3;10;0) and its worst op's error rate in percent
('work errors'=93.3%;5;25;0;100); the text names an op that failed and its rate.
"""


class PluginCommand(click.Command):
    """Usage errors answer UNKNOWN (3), as monitoring plugins must: click's usual 2 would
    read as CRITICAL."""

    def make_context(self, info_name, args, parent=None, **extra):
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except click.UsageError as exc:
            click.echo(f"SLOWDOWN UNKNOWN - {exc.format_message()}")
            raise click.exceptions.Exit(UNKNOWN) from None


@click.command("check", cls=PluginCommand, epilog=EPILOG)
@read_options
@click.option("--window", default="10m", show_default=True, help="Window of the slowdown.")
@click.option("--stat", "statistic", default=None, help="Statistic (default: configured first).")
@click.option("-w", "--warning", type=float, default=None,
              help="WARNING above this slowdown (default: from alert rules, else 3).")
@click.option("-c", "--critical", type=float, default=None,
              help="CRITICAL above this slowdown (default: from alert rules, else 10).")
@click.option("--errors-warning", "errors_warning", default=None, metavar="RATE",
              help="WARNING above this error rate of an op, as 5% or 0.05 (default: from "
                   "error_rate alert rules of the window, else 5%).")
@click.option("--errors-critical", "errors_critical", default=None, metavar="RATE",
              help="CRITICAL above this error rate of an op (default: from error_rate "
                   "alert rules of the window, else 25%).")
@click.option("--full", "full", default="99%", show_default=True, metavar="RATE",
              help="CRITICAL when a target's filesystem is this full, in bytes or inodes, "
                   "as its service last saw it (once a minute).")
@click.option("--stale", default=None, metavar="DURATION",
              help="UNKNOWN when the newest record is older than this (default: 3m, plus "
                   "how often copies are made when reading published copies).")
@click.pass_context
def check(ctx, dbs, targets, hosts, ops, at, window, statistic, warning, critical,
          errors_warning, errors_critical, full, stale):
    """Monitoring-plugin mode: exit 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN, with perfdata."""
    try:
        span = cli.parse_duration_option(window, "--window")
        config = ctx.obj["config"]()
        stat = cli.parse_statistic_option(statistic) if statistic else config.statistics[0]
        warn, crit, errors_warn, errors_crit = _all_levels(
            config, span, stat, (warning, critical),
            (parse_rate(errors_warning, "--errors-warning"),
             parse_rate(errors_critical, "--errors-critical")))
        full_level = parse_rate(full, "--full")
        reader = cli.open_reader(ctx, dbs, targets, hosts, ops, at, one_moment=True,
                                 windows=[span], statistic=statistic, waiting=True)
        stale_after = (cli.parse_duration_option(stale, "--stale") if stale is not None
                       else STALE + copies_every(reader))
    except cli.NotLanding as exc:  # the file cannot be read, and its service says why
        click.echo(f"SLOWDOWN CRITICAL - {exc.format_message()}")
        sys.exit(CRITICAL)
    except click.ClickException as exc:
        click.echo(f"SLOWDOWN UNKNOWN - {exc.format_message()}")
        sys.exit(UNKNOWN)
    except click.exceptions.Exit:  # the configuration's mistakes, listed on standard error
        click.echo("SLOWDOWN UNKNOWN - the configuration has errors (listed on standard error)")
        sys.exit(UNKNOWN)
    target_ops = reader.target_ops()
    states = reader.target_states()
    collecting = {t: ts for t, ts in states.items()
                  if ts.state in NOT_YET and t not in target_ops}
    if not target_ops:
        if not collecting:
            click.echo(f"SLOWDOWN UNKNOWN - {reader.nothing_to_show()}")
            sys.exit(UNKNOWN)
        levels, parts = _collecting(reader, collecting)
        level = CRITICAL if CRITICAL in levels else UNKNOWN
        click.echo(f"SLOWDOWN {STATE_NAMES[level]} - " + "; ".join(parts))
        sys.exit(level)
    results = target_slowdowns(reader.stores, reader.book(), list(target_ops), target_ops,
                               [span], stat, reader.now, hosts=reader.hosts,
                               live_stuck=reader.live_stuck(), prepared=reader.prepared)
    newest = max((s.latest_start(Selection(hosts=reader.hosts, targets=reader.targets))
                  or 0) for s in reader.stores)
    states_of_numbers = {t: states[t] for t in target_ops if t in states}
    levels, parts, perf = [], [], []
    # Records that do not reach the file, or did not while it was deleted or replaced
    # within the window: CRITICAL, whatever the numbers (store/landing.py).
    lost = landing_notes(reader.services(), reader.now - span, reader.now, reader.now)
    halted = {t: ts for t, ts in states_of_numbers.items()  # no service behind the numbers
              if ts.known_stopped or ts.state == PREPARING}
    if reader.now - (newest + 60) > stale_after or (halted and len(halted) == len(results)):
        text = "; ".join(lost) or _stale(reader, newest, states_of_numbers)
        click.echo(f"SLOWDOWN {'CRITICAL' if lost else 'UNKNOWN'} - {text}")
        sys.exit(CRITICAL if lost else UNKNOWN)
    if lost:
        levels.append(CRITICAL)
    for target, (ts,) in results.items():
        if target in halted:  # the others judged, this one not: its service stopped
            levels.append(UNKNOWN)
            parts.append(f"{target} " + "; ".join(state_notes(halted[target], reader.now,
                                                              len(reader.stores) > 1)))
            continue
        value = ts.value
        failing = _worst_errors(ts)
        probing = [s for s in reader.services() if target in s.targets]
        gone = failing_now_note(probing, target, reader.now)  # before a window shows it
        if value is None and (failing is None or not failing.error_rate) and not gone:
            levels.append(UNKNOWN)
            parts.append(f"{target} no data")
            continue
        text = []
        if value is not None:
            levels.append(_level(value, warn, crit))
            text.append(f"{fmt_ratio(value)} ({ts.worst.op})")
            perf.append(f"'{target}'={value:.3f};{warn:g};{crit:g};0")
        if failing is not None:
            rate, op = failing.error_rate, failing.op
            levels.append(_level(rate, errors_warn, errors_crit))
            if rate > 0:
                met = last_errors(reader.services(), target, op)
                text.append(f"{_percent(rate)} of {op} failed ({round(failing.errors)} of "
                            f"{round(failing.errors + failing.samples)}"
                            f"{': ' + ', '.join(met) if met else ''})")
            perf.append(f"'{target} errors'={rate * 100:.1f}%;{errors_warn * 100:g};"
                        f"{errors_crit * 100:g};0;100")
        if gone:
            levels.append(CRITICAL)
            text.append(gone)
        full = space_notes(probing, target, full_level)
        if full:  # every user's write fails there: the probe's overwrites may not show it
            levels.append(CRITICAL)
            text += full
        parts.append(f"{target} {', '.join(text)}")
    more_levels, more_parts = _collecting(reader, collecting)
    levels += more_levels
    parts += more_parts
    # The worst state wins: CRITICAL, then WARNING, then UNKNOWN (a target without data).
    worst_state = next((s for s in (CRITICAL, WARNING, UNKNOWN) if s in levels), OK)
    label = f"{stat} over {format_duration(span)}"
    notes = lost + sorted({note for t, ts in states_of_numbers.items() if t not in halted
                           for note in state_notes(ts, reader.now, len(reader.stores) > 1)})
    if reader.cluster:
        end = minute_of(reader.now)
        notes.append(reader.merged(end - span, end).text(f"the last {format_duration(span)}"))
    click.echo(f"SLOWDOWN {STATE_NAMES[worst_state]} - {label}: {', '.join(parts)}"
               + "".join(f"; {note}" for note in notes)
               + (f" | {' '.join(perf)}" if perf else ""))
    sys.exit(worst_state)


def copies_every(reader) -> float:
    """How much older than a live database a published copy may be, by design: the longest
    ``every`` among the copies read (0 when none is a copy or none says)."""
    return max((s.published_every or 0.0 for s in reader.services()
                if s.published is not None), default=0.0)


def _levels(given: tuple, configured: tuple, defaults: tuple) -> tuple[float, float]:
    """Warning and critical levels: the options', else the alert rules', else the defaults."""
    return tuple(g if g is not None else c if c is not None else d  # type: ignore[return-value]
                 for g, c, d in zip(given, configured, defaults))


def _all_levels(config, span: float, stat: str, slowdown: tuple, errors: tuple
                ) -> tuple[float, float, float, float]:
    """The slowdown's and the error rate's warning and critical levels (the options', else
    the alert rules', else the defaults); a usage error when a warning level is above its
    critical one."""
    slowdown_levels = (slowdown, _thresholds(config, "slowdown", span, stat), (3.0, 10.0))
    error_levels = (errors, _thresholds(config, "error_rate", span),
                    (ERRORS_WARNING, ERRORS_CRITICAL))
    disordered = (_disordered(*slowdown_levels, ("-w/--warning", "-c/--critical"), "{:g}")
                  or _disordered(*error_levels, ("--errors-warning", "--errors-critical"),
                                 "{:.3g}%", 100))
    if disordered:
        raise click.UsageError(disordered)
    return (*_levels(*slowdown_levels), *_levels(*error_levels))  # type: ignore[return-value]


def _disordered(given: tuple, configured: tuple, defaults: tuple, flags: tuple[str, str],
                form: str, scale: float = 1.0) -> str | None:
    """Why a warning level above the critical one is refused (None when in order): such a
    pair never says WARNING before CRITICAL, so it is a usage error naming both levels and
    where each came from."""
    warn, crit = _levels(given, configured, defaults)
    if warn <= crit:
        return None
    whence = [("" if g is not None else " (from the alert rules)" if c is not None
               else " (the default)") for g, c in zip(given, configured)]
    return (f"{flags[0]} {form.format(warn * scale)}{whence[0]} is above {flags[1]} "
            f"{form.format(crit * scale)}{whence[1]}: the warning level must not be above "
            "the critical one")


def _worst_errors(ts):
    """The op of a target with the highest error rate in the window (the first of equals),
    None when no op was attempted."""
    rated = [o for o in ts.ops if o.error_rate is not None]
    return max(rated, key=lambda o: o.error_rate) if rated else None


def _stale(reader, newest: float, states: dict) -> str:
    """Why the newest record is old: the service stopped (and when its numbers end), or it
    runs and writes nothing (its database?), or nothing is known of it."""
    age = format_duration(max(0, round(reader.now - newest - 60)))
    preparing = [ts for ts in states.values() if ts.state == PREPARING]
    if preparing and len(preparing) == len(states):
        return (f"{collecting_text(preparing[0], reader.now)}; numbers from "
                f"{format_clock(newest, reader.now)}, {format_age(reader.now - newest)} ago")
    stopped = [ts for ts in states.values() if ts.state == STOPPED]
    if stopped and len(stopped) == len(states):
        hosts = sorted({h for ts in stopped for h, s in ts.hosts.items() if s == STOPPED})
        where = f" on {', '.join(hosts)}" if len(reader.stores) > 1 else ""
        return (f"service stopped{where}; numbers from {format_clock(newest, reader.now)}, "
                f"{format_age(reader.now - newest)} ago")
    if states and all(ts.state == RUNNING for ts in states.values()):
        return f"no new records for {age} (the service runs: can it write its database?)"
    return f"no new records for {age} (is the service running?)"
