"""``slowdown`` alone: one line per target, like ``uptime``.

Apart from ``main`` (the group), so that a subcommand such as ``import-fio`` starts without
importing the configuration, the store, the statistics and numpy it does not use.
"""

from __future__ import annotations

import click

from slowdown.analysis.cli.output import (
    clean,
    collecting_text,
    dump_json,
    failing_note,
    fmt_ratio,
    landing_notes,
    last_errors,
    space_notes,
    state_notes,
    table,
)
from slowdown.analysis.cli.read_setup import (
    check_kept,
    open_reader,
    parse_fraction_option,
    parse_statistic_option,
)
from slowdown.analysis.stats.slowdown import TargetSlowdown, accurate_window, target_slowdowns
from slowdown.analysis.stats.verdict import FILESYSTEM, Verdict
from slowdown.analysis.store.records import minute_of
from slowdown.analysis.units import format_clock, format_duration, format_latency
from slowdown.analysis.view.reader import Reader
from slowdown.analysis.view.service_states import NOT_YET, TargetState


def uptime(ctx: click.Context, dbs, targets, hosts, ops, at, statistic: str | None,
           verbose: bool, as_json: bool, accuracy: str | None) -> None:
    """The slowdown of each target over the configured windows (``--accuracy``: over the
    shortest window precise enough)."""
    reader = open_reader(ctx, dbs, targets, hosts, ops, at, one_moment=True,
                         windows=() if accuracy is None else None, statistic=statistic,
                         waiting=True)
    stat = parse_statistic_option(statistic) if statistic else reader.config.statistics[0]
    wanted = parse_fraction_option(accuracy, "--accuracy") if accuracy is not None else None
    target_ops = reader.target_ops()
    states = reader.target_states()
    collecting = [t for t, ts in states.items() if ts.state in NOT_YET and t not in target_ops]
    if not target_ops and not collecting:
        raise click.ClickException(reader.nothing_to_show())
    check_kept(reader, reader.now - max(reader.config.windows), reader.now, "--at")
    book = reader.book()
    shown = reader.config.fleet is not None or as_json  # JSON says "unknown" without one
    verdicts = verdicts_of(reader, target_ops) if shown else {}
    if wanted is not None:
        results = {}
        for target, tops in target_ops.items():
            found = accurate_window(reader.stores, book, target, tops, stat, reader.now, wanted,
                                    hosts=reader.hosts)
            results[target] = [found] if found else []
        show_uptime(reader, results, stat, verbose, as_json, accuracy=wanted, states=states,
                    verdicts=verdicts)
        return
    results = target_slowdowns(reader.stores, book, list(target_ops), target_ops,
                               reader.config.windows, stat, reader.now, hosts=reader.hosts,
                               live_stuck=reader.live_stuck(),
                               confidence=0.95 if verbose or as_json else None,
                               prepared=reader.prepared)
    servers = servers_named(reader, book, target_ops, verdicts, verbose)
    show_uptime(reader, results, stat, verbose, as_json, states=states, verdicts=verdicts,
                servers=servers)


def servers_named(reader: Reader, book, target_ops: dict[str, list[str]],
                  verdicts: dict[str, Verdict], verbose: bool) -> dict[str, str]:
    """The slow servers per target, read only for ``-v`` or a verdict of ``filesystem`` (the
    plain line pays nothing for them); a ``filesystem`` verdict names them in its text."""
    filesystem = [t for t, v in verdicts.items() if v.word == FILESYSTEM]
    if not verbose and not filesystem:
        return {}
    from slowdown.analysis.stats.server_naming import slow_servers

    named = slow_servers(reader.stores, book, list(target_ops) if verbose else filesystem,
                         reader.hosts, reader.now)
    for target in filesystem:
        verdicts[target].servers = named.get(target)
    return named


def verdicts_of(reader: Reader, target_ops: dict[str, list[str]]) -> dict[str, Verdict]:
    """Each target's verdict for this node (``--host`` when it names one host), from the
    configured [fleet]; "unknown" everywhere without one."""
    from slowdown.analysis.stats.fleet_sources import fleet_verdicts

    if not target_ops:
        return {}
    host = verdict_host(reader)
    return fleet_verdicts(reader.config.fleet, stores_of(reader, host), reader.book(),
                          target_ops, reader.now, host, reader.live_stuck(host))


def stores_of(reader: Reader, host: str) -> list:
    """The files holding ``host``'s series (a cluster view's others are not read again for
    this node's own slowdown; none when no file holds it: then its verdict says so)."""
    if len(reader.store_series) != len(reader.stores):
        return list(reader.stores)
    return [s for s, series in zip(reader.stores, reader.store_series)
            if any(h == host for h, _, _ in series)]


def verdict_host(reader: Reader) -> str:
    """The node a verdict is about: the one ``--host`` names, else this node."""
    if len(reader.hosts) == 1 and not any(c in reader.hosts[0] for c in "*?["):
        return reader.hosts[0]
    return reader.config.host


def show_uptime(reader: Reader, results: dict[str, list[TargetSlowdown]], stat: str,
                verbose: bool, as_json: bool, accuracy: float | None = None,
                states: dict[str, TargetState] | None = None,
                verdicts: dict[str, Verdict] | None = None,
                servers: dict[str, str] | None = None) -> None:
    """One line per target: its numbers (with what is known of the service behind them), or
    that its service is collecting the first minute; with ``verbose``, the table behind them,
    the verdicts and the slow servers (``servers``: per target, the note naming them)."""
    states = states or {}
    verdicts = verdicts or {}
    names = sorted({*results, *(t for t, ts in states.items() if ts.state in NOT_YET)})
    cluster = reader.cluster
    span = max((ts.window for windows in results.values() for ts in windows),
               default=max(reader.config.windows, default=3600))
    end = minute_of(reader.now)
    merged = reader.merged(end - span, end)
    lost = {}  # what the numbers alone do not say: records lost, a full or failing filesystem
    for t in names:
        services = [s for s in reader.services() if t in s.targets]
        failing = failing_note(results.get(t) or [], services, t, reader.now)
        lost[t] = [*landing_notes(services, reader.now - span, reader.now, reader.now),
                   *space_notes(services, t), *([failing] if failing else [])]
    if as_json:
        doc = {
            "time": reader.now,
            "statistic": stat,
            **({"accuracy": accuracy} if accuracy is not None else {}),
            "targets": [{
                "target": target,
                "windows": [_window_json(ts) for ts in results.get(target, [])],
                **({"found": bool(results.get(target))} if accuracy is not None else {}),
                **({"service": states[target].json(reader.now)} if target in states else {}),
                **({"verdict": verdicts[target].json()} if target in verdicts else {}),
                "notes": lost[target],
            } for target in names],
        }
        if reader.at_now:
            doc["services"] = [s.json(reader.now) for s in reader.services()]
        doc["merged"] = merged.json()
        dump_json(doc)
        return
    clock = format_clock(reader.now)
    stuck_targets = {t for t, _ in reader.live_stuck()}
    width = max(len(t) for t in names)
    for target in names:
        windows = results.get(target)
        state = states.get(target)
        if windows is None and state is not None:  # collecting: no numbers yet
            flag = "  (stuck)" if target in stuck_targets else ""
            flag += "".join(f"  ({note})" for note in lost[target])
            click.echo(f"{clock}  {target:<{width}}  {collecting_text(state, reader.now)}{flag}")
            continue
        if not windows:
            click.echo(f"{clock}  {target:<{width}}  no window reaches +-{accuracy:.0%} "
                       f"(longest tried: 24h)")
            continue
        parts = "  ".join(f"{format_duration(ts.window)} {fmt_ratio(ts.value)}" for ts in windows)
        worst = max((ts.worst for ts in windows if ts.worst), key=lambda o: o.value, default=None)
        tail = f"  worst {worst.op}" if worst else ""
        if reader.config.fleet is not None and target in verdicts:
            tail += f"  {verdicts[target].word}"
        flags = []
        if any(ts.provisional for ts in windows):
            flags.append("provisional baseline")
        if any(o.observed.raised for ts in windows for o in ts.ops):
            flags.append("stuck")
        if state is not None:
            flags += state_notes(state, reader.now, cluster)
        flags += lost[target]
        note = f"  ({', '.join(flags)})" if flags else ""
        label = f"window {format_duration(windows[0].window)} for +-{accuracy:.0%}  " \
            if accuracy is not None else ""
        click.echo(f"{clock}  {target:<{width}}  {label}slowdown {stat}  {parts}{tail}{note}")
    if cluster:
        click.echo(f"{clock}  {merged.text(f'the last {format_duration(span)}')}")
    if verbose:
        rows = []
        flats: dict[str, None] = {}
        for target, windows in results.items():
            for ts in windows:
                for o in ts.ops:
                    ob = o.observed
                    ci = (f"{format_latency(ob.low)}..{format_latency(ob.high)}"
                          if ob.low is not None else "-")
                    exp = o.expected
                    rows.append([target, o.op, format_duration(ts.window), format_latency(ob.value)
                                 + (" stuck" if ob.raised else ""), ci, ob.count,
                                 _failed(o, last_errors(reader.services(), target, o.op)),
                                 format_latency(exp.value) if exp else "-",
                                 _source(exp), fmt_ratio(o.value)])
                    if exp is not None and exp.basis == "flat":
                        flats.setdefault(f"{target} {o.op}: {exp.note}", None)
        if rows:
            click.echo()
            table(rows, ["target", "op", "window", stat, "95% ci", "n", "failed", "expected",
                         "from", "slowdown"], right=(3, 5, 6, 7, 9))
        for line in flats:  # expected = "weekly" where the week's value cannot be taken
            click.echo(line)
        if verdicts:
            click.echo()
        for target, v in sorted(verdicts.items()):
            click.echo(f"verdict {target} ({v.host}, {v.statistic} over "
                       f"{format_duration(v.window)}): {v.text()}")
        if servers:
            from slowdown.analysis.stats.server_naming import SPAN
        for target, note in sorted((servers or {}).items()):
            click.echo(f"slow servers {target} (medians over the last "
                       f"{format_duration(SPAN)}, whole ten minutes): {note}")


def _source(exp) -> str:
    """Where the expected value came from: ``baseline``, ``provisional``; with expected =
    "weekly", the hour of the week taken (``weekly Tue 03h``) or ``(flat)``."""
    if exp is None:
        return "-"
    word = "provisional" if exp.provisional else "baseline"
    if exp.basis == "weekly":
        return exp.note + (" provisional" if exp.provisional else "")
    return f"{word} (flat)" if exp.basis == "flat" else word


def _basis(exp) -> dict:
    """With expected = "weekly" (only: the flat default's JSON is as it was): whether the
    value is the hour of the week's (``weekly``) or the flat one, and why."""
    if exp is None or exp.basis is None:
        return {}
    return {"expected_basis": exp.basis, "expected_note": exp.note}


def _failed(o, errors: list[str]) -> str:
    """``12 ENOTCONN``: the op's failures in the window and the errors it last met."""
    failed = round(o.errors)
    return f"{failed} {', '.join(errors)}".strip() if failed else "0"


def _window_json(ts: TargetSlowdown) -> dict:
    worst = ts.worst
    return {
        "window": ts.window,
        "slowdown": clean(ts.value),
        "worst_op": worst.op if worst else None,
        "provisional": ts.provisional,
        "ops": [{
            "op": o.op,
            "observed": clean(o.observed.value),
            "count": o.observed.count,
            "errors": round(o.errors, 3),
            "error_rate": clean(o.error_rate),
            "low": clean(o.observed.low),
            "high": clean(o.observed.high),
            "stuck": o.observed.stuck,
            "raised_to_stuck": o.observed.raised,
            "expected": clean(o.expected.value) if o.expected else None,
            "expected_statistic": o.expected.statistic if o.expected else None,
            "provisional": o.expected.provisional if o.expected else None,
            **_basis(o.expected),
            "slowdown": clean(o.value),
        } for o in ts.ops],
    }


__all__ = ["show_uptime", "uptime"]
