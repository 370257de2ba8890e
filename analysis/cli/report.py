"""``slowdown report``: the HTML report (and ``--png`` images) of a range of the data."""

from __future__ import annotations

import os
from pathlib import Path

import click

from slowdown.analysis.atomic_write import NotWritten, replace_all
from slowdown.analysis.cli import read_setup as cli
from slowdown.analysis.cli.options import read_options
from slowdown.analysis.cli.provision import parse_provision_options, provision_options
from slowdown.analysis.store.records import MINUTE


def _writable_dir(path: Path, flag: str) -> None:
    if not path.is_dir():
        raise click.BadParameter(f"{path} is not a directory", param_hint=flag)
    if not os.access(path, os.W_OK):
        raise click.BadParameter(f"{path} is not writable", param_hint=flag)


def write_all(files: list[tuple[Path, bytes, str]]) -> None:
    """Write every ``(path, data, flag)`` whole or none (``atomic_write.replace_all``); a
    file that cannot be written is named with its flag."""
    try:
        replace_all([(path, data) for path, data, _ in files])
    except NotWritten as exc:
        path, _, flag = files[exc.index]
        raise click.ClickException(f"{flag}: cannot write {path}: "
                                   f"{exc.error.strerror or exc.error}") from None


@click.command("report")
@read_options
@click.option("--since", default="7d", show_default=True, help="Start: a duration ago or a time.")
@click.option("--until", default=None, help="End (default: now).")
@click.option("-o", "--output", required=True, metavar="FILE",
              help="The HTML file to write (replaced whole, or left as it was on an error).")
@click.option("--stat", "statistics", multiple=True, metavar="STAT",
              help="Statistics of the slowdown timeline (default: the configuration's).")
@click.option("--window", "windows", multiple=True, metavar="DURATION",
              help="Windows of the slowdown timeline (default: the configuration's).")
@click.option("--png", "png_dir", default=None, metavar="DIR",
              help="Also write every figure as a PNG image into DIR (needs matplotlib).")
@click.option("--long/--no-long", "long_figures", default=None,
              help="The long-period figures (timelines of 4-hour statistics, boxes per op and "
                   "host, slowdown over the range, the week's rhythm, change points); default: "
                   "on for ranges of 14 days or more.")
@click.option("--long-step", default="4h", show_default=True, metavar="DURATION",
              help="The step of the long-period figures' statistics.")
@click.option("--title", default="slowdown report", show_default=True, help="Page title.")
@provision_options
@click.pass_context
def report(ctx, dbs, targets, hosts, ops, at, since, until, output, statistics, windows,
           png_dir, long_figures, long_step, title, provision, confidence, trials, seed):
    """One self-contained HTML file per range: slowdown timeline with node context and
    events, latency percentiles, heat maps and "X or better" curves per op."""
    reader = cli.open_reader(ctx, dbs, targets, hosts, ops, at)
    start, end = cli.minute_range(reader, since, until)
    stats = [cli.parse_statistic_option(s) for s in statistics] or list(reader.config.statistics)
    spans = []
    for text in windows:
        span = cli.parse_duration_option(text, "--window")
        if span < MINUTE or span % MINUTE:
            raise click.BadParameter(f"must be whole minutes; got {text!r}", param_hint="--window")
        spans.append(span)
    spans = spans or list(reader.config.windows)
    from slowdown.analysis.report.longview import is_on

    step = cli.parse_duration_option(long_step, "--long-step")
    if step < MINUTE or step % MINUTE:
        raise click.BadParameter(f"must be whole minutes; got {long_step!r}",
                                 param_hint="--long-step")
    step = int(step) if is_on(end - start, long_figures) else None
    goal, level = parse_provision_options(provision, confidence)
    out = Path(output).expanduser()
    if out.is_dir():
        raise click.BadParameter(f"{out} is a directory", param_hint="-o/--output")
    _writable_dir(out.parent if str(out.parent) else Path("."), "-o/--output")
    png_path = None
    if png_dir is not None:
        from slowdown.analysis.report import png

        try:
            png.check()
        except png.PngUnavailable as exc:
            raise click.BadParameter(str(exc), param_hint="--png") from None
        png_path = Path(png_dir).expanduser()
        try:
            png_path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise click.BadParameter(f"cannot make {png_path}: {exc.strerror or exc}",
                                     param_hint="--png") from None
        _writable_dir(png_path, "--png")

    from slowdown.analysis.report.data import Provisioning, collect
    from slowdown.analysis.report.page import render

    planned = Provisioning(goal, level, trials, seed) if goal is not None else None
    doc = collect(reader, start, end, stats, spans, planned, step)
    doc["verdicts"] = _verdict_lines(reader, end)
    files = [(out, render(doc, title).encode(), "-o/--output")]
    if png_path is not None:
        from slowdown.analysis.report import png

        files += [(png_path / name, data, "--png") for name, data in png.figures(doc)]
    write_all(files)
    figures = sum(1 + 3 * sum(1 for f in t["op_figures"] if f.get("percentiles"))
                  + (4 + len(t["long"]["ops"]) if t.get("long", {}).get("ops") else 0)
                  + len(t.get("servers", {}).get("maps", ()))
                  for t in doc["targets"])
    click.echo(f"report: {len(doc['targets'])} target(s), {figures} figures, "
               f"{files[0][0].stat().st_size / 1e6:.1f} MB -> {out}"
               + (f"; {len(files) - 1} PNG images in {png_path}" if png_path else ""), err=True)
    if doc.get("merged_text"):
        click.echo(f"report: {doc['merged_text']}", err=True)


def _verdict_lines(reader, end: int) -> list[str]:
    """``Verdict on work at 14:00 UTC (node001): filesystem: ...`` per target, at the end
    of the report's range; none without a [fleet]."""
    if reader.config.fleet is None:
        return []
    from slowdown.analysis.cli.uptime import verdict_host
    from slowdown.analysis.stats.fleet_sources import fleet_verdicts
    from slowdown.analysis.units import format_clock

    target_ops = reader.target_ops()
    if not target_ops:
        return []
    host = verdict_host(reader)
    found = fleet_verdicts(reader.config.fleet, reader.stores, reader.book(), target_ops,
                           float(end), host)
    return [f"Verdict on {t} at {format_clock(end, reader.now)} ({host}): {v.text()}"
            for t, v in sorted(found.items())]


__all__ = ["report"]
