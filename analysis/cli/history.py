"""``slowdown history``: percentiles and slowdown over time, one row per step, target and op,
as CSV (numpy-built text, split between forked processes) or JSON (written a block at a time)."""

from __future__ import annotations

import datetime as dt
import math
import os
import sys

import click

from slowdown.analysis.cli import read_setup as cli
from slowdown.analysis.cli.options import read_options
from slowdown.analysis.store import Selection, Store


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
    start, end = cli.minute_range(reader, since, until)
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
    from slowdown.analysis.store import forking as forked

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
        from slowdown.analysis.stats import series
        from slowdown.analysis.stats.baseline import BaselineBook

        quantile_stats = [s for s in self.stats if s not in ("mean", "max")]
        cells = series.history(stores, selection, self.step, quantile_stats,
                               moments="mean" in self.stats or "max" in self.stats)
        columns = {s: series.raised(cells.quantiles[s], cells.stuck_end) for s in quantile_stats}
        if "mean" in self.stats:
            columns["mean"] = series.raised(series.mean_of(cells), cells.stuck_end)
        if "max" in self.stats:
            columns["max"] = series.raised(cells.max, cells.stuck_end)
        book = self.reader.book() if stores is self.reader.stores else \
            BaselineBook(stores, self.reader.config.baseline.expected,
                         zone=self.reader.config.baseline.weekly())
        first = int(cells.start.min()) if len(cells) else 0
        expected = series.expected_values(book, cells, self.headline, first,
                                          int(self.selection.end), self.step)
        ratio = columns[self.headline] / expected
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
