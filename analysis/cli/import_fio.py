"""``slowdown import-fio``: fio histogram or latency logs in, percentiles over time out.

    slowdown import-fio logs/h_clat_hist.*.log                      # CSV on stdout
    slowdown import-fio --noweight --directions rw -o p.csv logs/h_clat_hist.*.log
    slowdown import-fio --format json --unit us logs/l_clat.*.log
    slowdown import-fio --into-db fio-run7 --db run.db --start 2026-11-21T15:56:25Z \\
        node*/h_clat_hist.*.log --host-offset node2=1500

With no options the percentiles are fiologparser_hist.py's with no options (its weighting of
each histogram-log line over the intervals its samples ran in); ``--noweight`` is its
``--noweight`` (each line whole in one interval), as there.

Bad input stops with ``file:line: what was expected, what was found`` and exit code 2;
nothing is written then (CSV and JSON are written whole or not at all, records in one
transaction).
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path

import click
from click.core import ParameterSource

from slowdown.analysis.fio import FioLogError
from slowdown.analysis.fio.intervals import DIRECTION_LETTERS, IntervalSeries
from slowdown.analysis.fio.latlog import UNITS as LAT_UNITS
from slowdown.analysis.fio.merge import merge
from slowdown.analysis.fio.output import (
    UNIT_SECONDS,
    csv_text,
    json_text,
    write_file,
    write_records,
)
from slowdown.analysis.fio.percentiles import METHODS, parse_percentiles
from slowdown.analysis.fio.sources import Source, open_sources

EXIT_BAD_INPUT = 2
NOWEIGHT_OFFSET_MS = 10  # fiologparser_hist.py --noweight: a line counts where time + 10 falls
PROGRESS_BYTES = 32 << 20  # show a progress bar (on a terminal) from this much input on
_NAME = re.compile(r"[A-Za-z0-9_.-]+")


class FioImportError(click.ClickException):
    """Bad input or a refused write: one line naming the file (and line), exit code 2."""

    exit_code = EXIT_BAD_INPUT


def _warn(message: str) -> None:
    click.echo(f"import-fio: {message}", err=True)


def _host_offsets(values: tuple[str, ...]) -> dict[str, int]:
    offsets: dict[str, int] = {}
    for value in values:
        host, sep, ms = value.partition("=")
        try:
            number = int(ms)
        except ValueError:
            number = None
        if not sep or not host or number is None or not _NAME.fullmatch(host):
            raise click.BadParameter(f"expected HOST=MS like node2=1500; got {value!r}",
                                     param_hint="--host-offset")
        if host in offsets:
            raise click.BadParameter(f"host {host!r} given twice", param_hint="--host-offset")
        offsets[host] = number
    return offsets


def _directions(value: str | None) -> str:
    letters = (value or "m").lower()
    if not letters or set(letters) - set("m" + "".join(DIRECTION_LETTERS)):
        raise click.BadParameter(f"expected letters of r, w, t and m; got {value!r}",
                                 param_hint="--directions")
    return letters


def _progress(enabled: bool | None, total: int) -> tuple[Callable[[int], None] | None,
                                                          Callable[[], None]]:
    """A byte-counting progress bar on stderr, or nothing."""
    if enabled is None:
        enabled = total >= PROGRESS_BYTES and sys.stderr.isatty()
    if not enabled:
        return None, lambda: None
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    bar = Progress(TextColumn("import-fio"), BarColumn(), DownloadColumn(),
                   TransferSpeedColumn(), TimeRemainingColumn(),
                   console=Console(stderr=True), transient=True)
    task = bar.add_task("read", total=total)
    bar.start()
    return (lambda n: bar.advance(task, n)), bar.stop


def _start_ms(start: str | None, sources: list[Source]) -> int:
    """What to add to the logs' times to get unix epoch ms."""
    if sources[0].epoch:
        if start is not None:
            raise click.BadParameter("the logs carry unix epoch times (--log_unix_epoch); "
                                     "leave --start out", param_hint="--start")
        return 0
    if start is None:
        raise click.UsageError(
            f"{sources[0].path}: times are ms since the job started; give --start (when fio "
            "started, e.g. 2026-11-21T15:56:25Z or @1795276585) or run fio with "
            "--log_unix_epoch=1")
    from slowdown.analysis.units import parse_time

    try:
        return round(parse_time(start, time.time()) * 1000)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--start") from None


@click.command("import-fio")
@click.argument("files", nargs=-1, required=True,
                type=click.Path(dir_okay=False, path_type=Path))
@click.option("-i", "--interval-ms", type=click.IntRange(min=1), default=1000, show_default=True,
              help="Width of the output intervals.")
@click.option("--weighted/--noweight", default=True, show_default=True,
              help="Histogram logs: spread each line over the intervals its samples ran in "
                   "(--weighted, the default, as fiologparser_hist.py's), or count it whole "
                   "in the interval its time + --offset-ms falls in (--noweight, as "
                   "fiologparser_hist.py --noweight). Latency logs hold the time of every "
                   "sample: neither applies.")
@click.option("-d", "--directions", default=None, metavar="LETTERS",
              help="Rows per direction: r(ead), w(rite), t(rim), m(ixed: all); adds a dir "
                   "column (default: m only, no dir column).")
@click.option("-p", "--percentiles", default="90,95,99", show_default=True,
              help="Percentiles besides the median, comma or colon separated.")
@click.option("--method", "method", type=click.Choice(METHODS), default="interp",
              show_default=True,
              help="Percentiles of fio bins: interp (fiologparser_hist.py's interpolation) or "
                   "rank (fio's own: the bin holding rank ceil(q*n)). Latency logs are exact.")
@click.option("--format", "fmt", type=click.Choice(["csv", "json"]), default="csv",
              show_default=True)
@click.option("--unit", type=click.Choice(list(UNIT_SECONDS)), default=None,
              help="Unit of latencies in the output (default: the logs' own, ns for fio >= 3.0 "
                   "and us before, like fiologparser_hist.py).")
@click.option("--decimals", type=click.IntRange(0, 12), default=3, show_default=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write to FILE (whole or not at all) instead of stdout.")
@click.option("--force", is_flag=True, help="Replace an existing --output file.")
@click.option("--lat-unit", type=click.Choice(list(LAT_UNITS)), default="ns", show_default=True,
              help="Unit of latency-log values: ns (fio >= 3.0) or us (older fio).")
@click.option("--offset-ms", type=int, default=None,
              help="Added to every time (default: 10 for histogram logs with --noweight, which "
                   "puts a line logged up to 10 ms before an interval's end in the next one, as "
                   "fiologparser_hist.py --noweight does; else 0).")
@click.option("--host-offset", "host_offsets", multiple=True, metavar="HOST=MS",
              help="Added to the times of HOST's logs, whose fio started MS later; a log "
                   "belongs to HOST when named <name>.log.HOST (fio's client) or in a directory "
                   "named HOST. Repeatable.")
@click.option("--into-db", "target", default=None, metavar="NAME",
              help="Write minute records of target NAME into --db instead of printing.")
@click.option("--db", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Database for --into-db.")
@click.option("--host", "host_name", default=None,
              help="Host of the records (default: each log's host, else this machine's name).")
@click.option("--start", default=None, metavar="TIME",
              help="When fio started (ISO 8601 or @unix seconds), for --into-db with times "
                   "relative to the job start.")
@click.option("--merge", "merge_existing", is_flag=True,
              help="Let --into-db add to minutes the target already holds.")
@click.option("--progress/--no-progress", default=None,
              help="Progress bar on stderr (default: on a terminal, for large inputs).")
@click.option("--threads", type=click.IntRange(min=1), default=None,
              help="Parser threads (default: one per CPU, at most 8).")
def import_fio(files: tuple[Path, ...], interval_ms: int, weighted: bool,
               directions: str | None, percentiles: str, method: str, fmt: str,
               unit: str | None, decimals: int, output: Path | None, force: bool,
               lat_unit: str, offset_ms: int | None, host_offsets: tuple[str, ...],
               target: str | None, db: Path | None, host_name: str | None, start: str | None,
               merge_existing: bool, progress: bool | None, threads: int | None) -> None:
    """Merge fio histogram logs (--write_hist_log) or latency logs (--write_lat_log) of any
    number of jobs and hosts into percentiles per interval: CSV like fiologparser_hist.py,
    JSON, or records in the database (--into-db). The same options as fiologparser_hist.py
    (none; --noweight; -i, --percentiles, --directions) give the same percentiles, within
    one fio bin (0.8% or less on the real logs measured: its bin values lie half a fine
    bin higher).

    Not every column is fiologparser_hist.py's. With --noweight, samples is the same and
    min, avg and max are within 0.8%. Weighted (the default), avg and the percentiles still
    are, but samples, min and max differ: samples is the share of each line's samples that
    ran in the interval (the column adds up to the samples in the logs, less the shares
    before the job started), where fiologparser_hist.py counts in full every line that
    reaches into the interval (about 1.5 times as many over a run; up to 99.6% apart in a
    run's last interval); min and max are the values of the first and last bin with a
    share, where it takes edges beyond them: the lower edge of the bin below, the upper edge
    of the bin above (by its own edges, which lie one fine bin high): up to 2.4% lower and
    3.6% higher at coarseness 0, up to 19% and 16% at --log_hist_coarseness=3. How this
    was measured: docs/BENCHMARKS-fio.md.

    A log that ends in the middle of its last line (fio stopped while writing it) is read up
    to its last whole line, with a warning naming the file and line; a bad line anywhere
    else stops with file:line (exit 2). Histogram logs of different bin counts
    (--log_hist_coarseness) merge at the coarsest, with a warning naming the files."""
    mode_given = click.get_current_context().get_parameter_source("weighted") not in (
        ParameterSource.DEFAULT, ParameterSource.DEFAULT_MAP, None)
    offsets = _host_offsets(host_offsets)
    letters = _directions(directions)
    try:
        percents = [50.0, *parse_percentiles(percentiles)]
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--percentiles") from None
    if target is not None:
        if not _NAME.fullmatch(target):
            raise click.BadParameter(f"expected a name of letters, digits, '_', '.', '-'; "
                                     f"got {target!r}", param_hint="--into-db")
        if db is None:
            raise click.UsageError("--into-db needs --db FILE")
        if mode_given or output is not None or directions is not None:
            raise click.UsageError("--into-db writes one record per minute and direction: "
                                   "leave out --weighted, --noweight, --directions and "
                                   "--output")
        if host_name is not None and not _NAME.fullmatch(host_name):
            raise click.BadParameter(f"expected a name of letters, digits, '_', '.', '-'; "
                                     f"got {host_name!r}", param_hint="--host")
    elif db is not None or host_name is not None or start is not None or merge_existing:
        raise click.UsageError("--db, --host, --start and --merge go with --into-db")

    try:
        sources = open_sources(list(files), lat_unit=lat_unit, offset_ms=offset_ms or 0,
                               host_offsets=offsets, warn=_warn)
    except FioLogError as exc:
        raise FioImportError(str(exc)) from None
    histogram = sources[0].log.kind == "histogram"
    if offset_ms is None and histogram and target is None and not weighted:
        for source in sources:
            source.offset_ms += NOWEIGHT_OFFSET_MS
    if target is None:
        if not mode_given and not histogram:
            weighted = False  # the default applies to histogram logs
        try:
            series = IntervalSeries(sources, interval_ms=interval_ms, directions=letters,
                                    weighted=weighted, method=method, percents=percents)
        except ValueError as exc:
            raise click.UsageError(str(exc)) from None
        advance, stop = _progress(progress, sum(s.size for s in sources))
        try:
            rows = [row for done in merge(sources, series, workers=threads, progress=advance,
                                          warn=_warn)
                    for row in done]
        except FioLogError as exc:
            raise FioImportError(str(exc)) from None
        finally:
            stop()
        native = series.layout.unit if series.layout is not None else lat_unit
        unit = unit or native
        if fmt == "csv":
            text = csv_text(rows, percents, native=native, unit=unit,
                            directions=directions is not None, decimals=decimals)
        else:
            info = {"kind": "histogram" if series.histogram else "latency",
                    "layout": series.layout.describe() if series.layout else None,
                    "interval_ms": interval_ms, "weighted": weighted,
                    "method": method if series.histogram else "exact",
                    "files": [str(s.path) for s in sources]}
            text = json_text(rows, percents, native=native, unit=unit, info=info)
        if output is None:
            sys.stdout.write(text)
            return
        try:
            write_file(output, text, force)
        except OSError as exc:
            raise FioImportError(str(exc)) from None
        return

    # Imported only here: printing needs neither slowdown's histogram nor the store.
    import socket

    from slowdown.analysis.fio.minute_records import MinuteRecords

    start_ms = _start_ms(start, sources)
    local = socket.gethostname()

    def host_of(source: Source) -> str:
        return host_name or source.host or local

    records = MinuteRecords(sources, target=target, start_ms=start_ms, host=host_of)
    advance, stop = _progress(progress, sum(s.size for s in sources))
    try:
        for _ in merge(sources, records, workers=threads, progress=advance, warn=_warn):
            pass
    except FioLogError as exc:
        raise FioImportError(str(exc)) from None
    finally:
        stop()
    from slowdown.analysis.store import StoreError

    try:
        written = write_records(db, records.records, target, merge_existing)
    except (OSError, ValueError, StoreError) as exc:
        raise FioImportError(str(exc)) from None
    hosts = sorted({r.host for r in records.records})
    click.echo(f"import-fio: {written} minute records of target {target} "
               f"({', '.join(hosts) or 'no samples'}) written to {os.fspath(db)}", err=True)


__all__ = ["import_fio"]
