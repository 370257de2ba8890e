"""``slowdown servers``: which server of each target is slow, from the client's side.

Per target, each server's probes, median and q95 over the range, its slowdown against the
op's expected value and against the other servers of that op, and the rule's word (``slow``,
``ok``, ``few``: ``stats/server_rule.py``, docs/SERVERS.md). The fleet's files merge per
(target, op, server) exactly: one node probes each of a hundred servers a few times in ten
minutes, the fleet's nodes together enough to judge.
"""

from __future__ import annotations

import math

import click

from slowdown.analysis.cli import read_setup as cli
from slowdown.analysis.cli.options import read_options
from slowdown.analysis.cli.output import clean, dump_json, fmt_ratio, table
from slowdown.analysis.stats import server_table
from slowdown.analysis.store import server_reads
from slowdown.analysis.store.selection import Selection
from slowdown.analysis.store.server_records import ten_of
from slowdown.analysis.units import format_clock, format_latency
from slowdown.analysis.words import OPS

HEADERS = ("server", "op", "probes", "errors", "median", "q95", "slowdown", "vs others", "word")
NONE_KEPT = ("no per-server records: the service predates them (schema 9) or the filesystem "
             "does not say which server served an op")


@click.command("servers")
@read_options
@click.option("--since", default="10m", show_default=True,
              help="Start: a duration ago or a time; the ten minutes holding it are read whole "
                   "(per-server records are kept per ten minutes).")
@click.option("--json", "as_json", is_flag=True,
              help="A list of objects, one per (target, server).")
@click.pass_context
def servers(ctx, dbs, targets, hosts, ops, at, since, as_json):
    """Each server's latency per target and whether it is slow (slow, ok, few)."""
    reader = cli.open_reader(ctx, dbs, targets, hosts, ops, at)
    start = cli.parse_time_option(since, reader.now, "--since")
    end = reader.now
    if start >= end:
        raise click.BadParameter("must be before now (or --at)", param_hint="--since")
    read = server_reads.read(reader.stores, Selection(reader.hosts, reader.targets, reader.ops,
                                                      int(start), int(end) + 1))
    files = [str(s.path) for s in reader.stores]
    if len(read.without) == len(files):
        raise click.ClickException(f"{_names(files)}: {NONE_KEPT}")
    if read.without:
        click.echo(f"note: {len(read.without)} of {len(files)} files hold no per-server "
                   f"records: {_names(read.without)}", err=True)
    if not read.latencies:
        first, last = read.extent
        raise click.ClickException(
            f"{_names(files)}: no per-server records of the chosen targets, hosts and ops "
            f"since {format_clock(start, reader.now)} (records from "
            f"{format_clock(first, reader.now)} to {format_clock(last + 600, reader.now)})")
    book = reader.book()

    def expected(target: str, op: str) -> float | None:
        found = book.expected(target, op, "median", reader.now)
        return found.value if found is not None else None

    rows = server_table.rows(read.latencies, expected, OPS)
    if as_json:
        dump_json([_json_row(r) for r in rows])
        return
    shown_from = ten_of(start)
    for target in sorted({r.target for r in rows}):
        mine = [r for r in rows if r.target == target]
        hosts_seen = len({h for (t, _, _), f in read.latencies.items() if t == target
                          for h in f.hosts})
        click.echo(f"{target}: {len(mine)} servers, {hosts_seen} host"
                   f"{'s' if hosts_seen != 1 else ''}, "
                   f"{format_clock(shown_from, reader.now)} .. {format_clock(end, reader.now)}")
        note = server_table.slow_note(mine)
        if note:
            click.echo(f"slow: {note}")
        table([line for r in mine for line in _text_lines(r)], HEADERS,
              right=(2, 3, 4, 5, 6, 7))
        click.echo("")


def _names(files: list[str]) -> str:
    return ", ".join(files[:3]) + (f" and {len(files) - 3} more" if len(files) > 3 else "")


def _text_lines(row: server_table.ServerRow) -> list[list[str]]:
    out = []
    for i, figures in enumerate(row.ops):
        j = figures.judgment
        out.append([row.server if i == 0 else "", figures.op, str(j.probes),
                    str(figures.errors), format_latency(j.median), format_latency(j.q95),
                    _ratio(figures.slowdown), _ratio(j.against_others), j.word])
    return out


def _ratio(value: float) -> str:
    return "-" if math.isnan(value) else fmt_ratio(value)


def _json_row(row: server_table.ServerRow) -> dict:
    return {
        "target": row.target, **row.summary(clean),
        "per_op": {f.op: {"probes": f.judgment.probes, "errors": f.errors,
                          "median": clean(f.judgment.median), "q95": clean(f.judgment.q95),
                          "expected": f.expected, "slowdown": clean(f.slowdown),
                          "others_median": clean(f.judgment.others_median),
                          "against_others": clean(f.judgment.against_others),
                          "judged_against": f.judgment.against,
                          "word": f.judgment.word}
                   for f in row.ops},
    }
