"""``slowdown trends``: per target and op over weeks, the days the level changed and stayed,
the stretches it left and came back, the daily and weekly cycles, and what to do about them
(text, or ``--json``: a list of findings). The statistics are ``stats/trends.py``'s."""

from __future__ import annotations

import dataclasses
import datetime as dt
import shlex

import click

from slowdown.analysis.cli import read_setup as cli
from slowdown.analysis.cli.options import read_options
from slowdown.analysis.store import Selection, StoreError

STEP = 3600  # the hourly statistic the trends are found in


@click.command("trends")
@read_options
@click.option("--since", default="60d", show_default=True, help="Start: a duration ago or a time.")
@click.option("--until", default=None, help="End (default: now, or --at).")
@click.option("--stat", "statistic", default="median", show_default=True,
              help="The hourly statistic whose level is followed (median, q95, ...).")
@click.option("--json", "as_json", is_flag=True, help="JSON: a list of findings.")
@click.pass_context
def trends(ctx, dbs, targets, hosts, ops, at, since, until, statistic, as_json):
    """Change points (the level shifted and stayed), episodes (it left and came back) and
    daily and weekly cycles of each target and op, found in the hourly statistic over
    --since (60 days); over several files (--db 'nodes/*.db'), of the merged fleet."""
    from slowdown.analysis.stats import series
    from slowdown.analysis.stats.trends import analyse

    statistic = cli.parse_statistic_option(statistic)
    if statistic in ("mean", "max"):
        raise click.BadParameter("a quantile, e.g. median or q95", param_hint="--stat")
    reader = cli.open_reader(ctx, dbs, targets, hosts, ops, at)
    start, end = cli.minute_range(reader, since, until)
    selection = Selection(reader.hosts, reader.targets, reader.ops, start, end)
    found, short = [], []
    try:
        pairs = sorted({(t, o) for t, o, *_ in series.selected_series(reader.stores,
                                                                       selection)})
        for pair in pairs:  # one (target, op) in memory at a time: 60 days of minutes
            cells = series.history(reader.stores, dataclasses.replace(selection, pairs=(pair,)),
                                   STEP, [statistic], moments=False)
            if not len(cells):
                continue
            result = analyse(cells.start, cells.quantiles[statistic])
            if result is None:
                short.append(" ".join(pair))
            else:
                found.append((*pair, result))
    except StoreError as exc:
        raise click.ClickException(str(exc)) from None
    if not found and not short:
        raise click.ClickException(f"{reader.nothing_to_show()} between {_day(start)} and "
                                   f"{_day(end)}")
    rebaseline = _rebaseline_args(ctx.obj.get("config_path"),
                                  dbs or ctx.obj.get("read", {}).get("dbs", ()),
                                  None if reader.at_now and until is None else end)
    findings = [f for target, op, result in found
                for f in findings_of(target, op, result, statistic, rebaseline)]
    for path, why in reader.skipped:  # a cluster view goes on without a file it cannot read
        click.echo(f"note: {path} left out: {why}", err=True)
    if as_json:
        from slowdown.analysis.cli.output import dump_json

        if short:
            click.echo(f"note: {_short(short)}", err=True)
        dump_json(findings)
        return
    click.echo(text(found, findings, statistic, short))


def findings_of(target: str, op: str, result, statistic: str, rebaseline) -> list[dict]:
    """The JSON objects of one series' trends: changes, episodes, cycles."""
    from slowdown.analysis.stats.trends import WEEKDAYS

    out: list[dict] = []
    for i, c in enumerate(result.changes):
        latest = i == len(result.changes) - 1
        item = {"target": target, "op": op, "kind": "change", "at": c.at, "until": c.until,
                "factor": round(c.factor, 4), "before": c.before, "after": c.after,
                "sure": round(c.sure, 3), "statistic": statistic, "latest": latest,
                "days": round((c.until - c.at) / 86400, 1)}
        if latest:
            item["do"], item["command"] = _advice(target, op, c, rebaseline)
        out.append(item)
    for e in result.episodes:
        out.append({"target": target, "op": op, "kind": "episode", "at": e.at,
                    "until": e.until, "factor": round(e.factor, 4), "level": e.level,
                    "inside": e.inside, "sure": round(e.sure, 3), "statistic": statistic,
                    "days": round((e.until - e.at) / 86400, 1)})
    for c in result.cycles:
        names = (lambda h: f"{h:02d}:00") if c.kind == "daily" else WEEKDAYS.__getitem__
        out.append({"target": target, "op": op, "kind": c.kind, "at": None,
                    "factor": round(c.factor, 4), "peak": c.peak, "trough": c.trough,
                    "peak_name": names(c.peak), "trough_name": names(c.trough),
                    "explained": round(c.explained, 3), "p": c.p,
                    "repeat": round(c.repeat, 3), "statistic": statistic})
    return out


def _rebaseline_args(config, dbs, to: int | None) -> tuple[list[str], list[str]]:
    """The options of the suggested ``slowdown rebaseline``: before the command (the
    configuration read here), and after it (the files read here; the end looked at)."""
    args = [a for db in dbs for a in ("--db", db)]
    return (["--config", str(config)] if config else [],
            args + (["--to", _iso(to)] if to is not None else []))


def _advice(target: str, op: str, c, rebaseline) -> tuple[str, list[str]]:
    """What to do about the level in force now, and the command that does it."""
    days = (c.until - c.at) / 86400
    verb = "rose" if c.factor > 1 else "fell"
    said = f"level {verb} {_factor(c.factor)} on {_day(c.at)}"
    before, after = rebaseline
    command = ["slowdown", *before, "rebaseline", "--from", _iso(c.at), "--target", target,
               *after, "--reason", f"{op} {said} (slowdown trends)"]
    return (f"{op}'s {said} and has stayed for {days:.0f} days: rebaseline from that day "
            f"(`{shlex.join(command)}`) if this is the new normal"), command


def text(found, findings: list[dict], statistic: str, short: list[str]) -> str:
    from slowdown.analysis.units import format_latency

    lines = []
    for target, op, result in found:
        lines.append(f"{target} {op}: {result.hours} hours of the hourly {statistic}, "
                     f"{_day(result.first)} .. {_day(result.last)}")
        mine = [f for f in findings if f["target"] == target and f["op"] == op]
        for f in mine:
            if f["kind"] == "change":
                verb = "rose" if f["factor"] > 1 else "fell"
                lines.append(f"  change   {_clock(f['at'])}  {verb} {_factor(f['factor'])} "
                             f"({format_latency(f['before'])} -> {format_latency(f['after'])}),"
                             f" held {f['days']:g} days; sure {f['sure']:.0%}")
            elif f["kind"] == "episode":
                verb = "faster" if f["factor"] < 1 else "slower"
                lines.append(f"  episode  {_clock(f['at'])} .. {_clock(f['until'])}  "
                             f"{_factor(1 / f['factor'] if f['factor'] < 1 else f['factor'])} "
                             f"{verb} ({format_latency(f['level'])} -> "
                             f"{format_latency(f['inside'])}), then back"
                             + (" (caching?)" if f["factor"] < 1 else ""))
            else:
                zone = " UTC" if f["kind"] == "daily" else ""
                lines.append(f"  {f['kind']:<8} peak {f['peak_name']}{zone}, trough "
                             f"{f['trough_name']}{zone}: {_factor(f['factor'])} peak over "
                             f"trough, explains {f['explained']:.0%} of the variation")
        if not mine:
            lines.append("  steady: no change, no cycle")
        lines += [f"  what to do: {f['do']}" for f in mine if "do" in f]
    if short:
        lines.append(_short(short))
    return "\n".join(lines)


def _short(names: list[str]) -> str:
    return f"too few hours (under 3 days) for: {', '.join(names)}"


def _factor(value: float) -> str:
    return f"{value:.2f}x"


def _iso(t: int) -> str:
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%dT%H:%MZ")


def _day(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%d")


def _clock(t: int) -> str:
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


__all__ = ["trends"]
