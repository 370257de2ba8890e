"""What every read command does first, as the command line says it: its options' values
parsed, the view they name opened (``view/reader.py``), its errors said in one line."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import click

from slowdown.analysis.config import Config, ConfigError, load
from slowdown.analysis.stats.window import quantile_of
from slowdown.analysis.store import StoreError
from slowdown.analysis.store.records import minute_of
from slowdown.analysis.units import format_clock, parse_duration, parse_time
from slowdown.analysis.view import reader as view
from slowdown.analysis.view.reader import Reader

EXIT_USAGE = 2


# -- parsing of option values -----------------------------------------------------------------

def parse_duration_option(value: str, flag: str) -> float:
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint=flag) from None


def parse_time_option(value: str | None, now: float, flag: str) -> float:
    if value is None:
        return now
    try:
        return parse_time(value, now)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint=flag) from None


def parse_statistic_option(value: str, flag: str = "--stat") -> str:
    try:
        quantile_of(value)
    except ValueError:
        raise click.BadParameter(
            f"{value!r} is not a statistic (median, mean, max, q90, q95, q99, qNN)",
            param_hint=flag) from None
    return value


def parse_fraction_option(value: str, flag: str) -> float:
    """A share strictly between 0 and 100 %, as a fraction: ``10%`` and ``10`` are percent,
    a bare number below 1 (``0.1``) is a fraction (the form accepted before ``10`` was)."""
    text = value.strip()
    try:
        if text.endswith("%"):
            number = float(text[:-1]) / 100
        else:
            number = float(text)
            if number >= 1:
                number /= 100
    except ValueError:
        raise click.BadParameter(f"expected a percentage like 10, 10% or 0.1; got {value!r}",
                                 param_hint=flag) from None
    if not 0 < number < 1:  # also no nan, no inf
        raise click.BadParameter(f"must be between 0 and 100%; got {value!r}", param_hint=flag)
    return number


# -- the view a read command works on --------------------------------------------------------

def open_reader(ctx: click.Context, dbs: Sequence[str], targets: Sequence[str],
                hosts: Sequence[str], ops: Sequence[str], at: str | None,
                one_moment: bool = False, windows: Sequence[float] | None = None,
                statistic: str | None = None, waiting: bool = False) -> Reader:
    """The view the options name (``view.open_view``: what ``one_moment``, ``windows``,
    ``statistic`` and ``waiting`` ask), the group's options standing in for those not given
    here; a view that cannot be opened is one line (``NotLanding`` where the service of the
    one file named says why)."""
    config = ctx.obj["config"]()
    given = ctx.obj.get("read", {})
    dbs = dbs or given.get("dbs", ())
    targets = targets or given.get("targets", ())
    hosts = hosts or given.get("hosts", ())
    ops = ops or given.get("ops", ())
    at = at if at is not None else given.get("at")
    now = time.time()
    moment = parse_time_option(at, now, "--at")
    try:
        return view.open_view(config, dbs, targets, hosts, ops, moment, now, at is None,
                              one_moment=one_moment, windows=windows, statistic=statistic,
                              waiting=waiting)
    except view.NotLanding as exc:
        from slowdown.analysis.cli.output import landing_notes

        raise NotLanding("; ".join(landing_notes([exc.service], now, now, now))) from None
    except view.ViewError as exc:
        raise click.ClickException(str(exc)) from None


class NotLanding(click.ClickException):
    """The one database named cannot be read, and the service writing it says why: its
    records are not reaching it (deleted, replaced by a foreign file: store/landing.py)."""


def check_kept(reader: Reader, start: float, end: float, flag: str) -> None:
    """Stop with one line where ``[start, end)`` lies wholly before the records the
    files keep ([keep] hours removed them); say so on stderr where it begins before."""
    from slowdown.analysis.store.retention import kept_from

    known = [kept for kept, _, _ in reader.early] if reader.early is not None else None
    try:
        cutoff = kept_from(reader.stores, known).get("hours")
    except StoreError as exc:
        raise click.ClickException(str(exc)) from None
    if cutoff is None or start >= cutoff:
        return
    files = ", ".join(str(s.path) for s in reader.stores)
    said = f"records before {format_clock(cutoff, reader.now)} are removed ([keep] hours)"
    if end <= cutoff:
        raise click.ClickException(
            f"{files}: {said}; {flag} asks for {format_clock(start, reader.now)} .. "
            f"{format_clock(end, reader.now)}")
    click.echo(f"note: {files}: {said}; {flag} begins before", err=True)


def minute_range(reader: Reader, since: str | None, until: str | None) -> tuple[int, int]:
    """``--since``/``--until`` as the whole minutes ``[start, end)`` a command reads over
    time: at least one minute, and not wholly before what the files keep (``check_kept``)."""
    start = minute_of(parse_time_option(since, reader.now, "--since"))
    end = minute_of(parse_time_option(until, reader.now, "--until"))
    if start >= end:
        raise click.BadParameter("must be at least a minute before --until", param_hint="--since")
    check_kept(reader, start, end, "--since")
    return start, end


def load_config_or_exit(path: Path | None) -> Config:
    """The configuration for a command that reads: a file naming no target (as the package
    installs it) is fine, since the database says what was probed."""
    try:
        return load(path, targets_required=False)
    except ConfigError as exc:
        for single in exc.errors:
            click.echo(str(single), err=True)
        raise click.exceptions.Exit(EXIT_USAGE) from None


__all__ = ["EXIT_USAGE", "NotLanding", "check_kept", "load_config_or_exit", "minute_range",
           "open_reader", "parse_duration_option", "parse_fraction_option",
           "parse_statistic_option", "parse_time_option"]
