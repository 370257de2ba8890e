"""The input files of a merge: each log's kind, layout and host, and its place on one timeline.

Times are put on one timeline first: ``timeline = time_ms + offset_ms + host offset``, where
a host offset corrects for hosts whose fio did not start together.

Guarantees: ``open_sources`` reads only the first line of each file and returns sources that
merge (one kind of log, one layout family, all times relative or all unix epoch, every
``--host-offset`` host used, no file twice), or raises ``FioLogError`` saying why not. It
tells ``warn`` of what it does that the numbers would not show: an empty file skipped, a file
that ends inside its first line (fio stopped while writing it) skipped, and histogram logs of
different bin counts (``--log_hist_coarseness``) merged at the coarsest.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from slowdown.analysis.fio import FioLogError
from slowdown.analysis.fio.histlog import HistLog, layout_error
from slowdown.analysis.fio.latlog import MAX_COLUMNS, MIN_COLUMNS, LatLog, not_latency
from slowdown.analysis.fio.layout import HEADER_COLUMNS, Layout
from slowdown.analysis.fio.textblocks import first_line

EPOCH_MS = 10**11  # fio times at or above this are unix epoch ms (--log_unix_epoch)
CUT = "the file ends in the middle of this line (fio stopped while writing it?)"
_LINE_START = re.compile(rb"\d+(?:, \d+)*(?:, ?)?")  # how a line fio was writing can end


@dataclass
class Source:
    """One log file and where its times go on the common timeline."""

    path: Path
    log: HistLog | LatLog
    first_line: int
    first_time: int
    size: int
    host: str | None = None
    offset_ms: int = 0

    @property
    def epoch(self) -> bool:
        return self.first_time >= EPOCH_MS


def sniff(path: Path) -> tuple[int, int, int, bool] | None:
    """``(line number, field count, time, whole)`` of the first line of a log (the time is 0
    when it is not a number: the parser reports that; ``whole``: False when the file ends
    inside that line and the line is the start of one of fio's); None when the file is
    empty."""
    found = first_line(path)
    if found is None:
        return None
    number, line, whole = found
    time = line.split(b",", 1)[0].strip()
    cut = not whole and _LINE_START.fullmatch(line) is not None
    return number, line.count(b",") + 1, int(time) if time.isdigit() else 0, not cut


def host_of(path: Path, hosts: Iterable[str]) -> str | None:
    """The host a log belongs to: fio's client names logs ``<name>.log.<host>``; otherwise a
    directory named like one of ``hosts`` (from ``--host-offset``)."""
    name = path.name
    if ".log." in name:
        return name.split(".log.", 1)[1]
    parts = set(path.parent.parts)
    found = [h for h in hosts if h in parts]
    return max(found, key=len) if found else None


def open_sources(paths: Sequence[Path], *, lat_unit: str = "ns", offset_ms: int = 0,
                 host_offsets: dict[str, int] | None = None,
                 warn: Callable[[str], None] = lambda message: None) -> list[Source]:
    """Look at the first line of every file: its kind, layout and host; check they merge."""
    host_offsets = dict(host_offsets or {})
    sources: list[Source] = []
    seen: dict[Path, Path] = {}
    for path in paths:
        path = Path(path)
        try:
            real = path.resolve()
            size = path.stat().st_size
            first = sniff(path)
        except OSError as exc:
            raise FioLogError(path, None, f"cannot read it: {exc.strerror or exc}") from None
        if real in seen:
            raise FioLogError(path, None, f"given twice (also as {seen[real]}): its samples "
                                          "would count twice")
        seen[real] = path
        if first is None:
            warn(f"{path}: empty, skipped")
            continue
        line, columns, first_time, whole = first
        log: HistLog | LatLog
        if MIN_COLUMNS <= columns <= MAX_COLUMNS:
            what = not_latency(path)
            if what is not None:
                raise FioLogError(path, line, f"expected a latency log, found {what} "
                                              "(by its name): it holds no latencies")
            log = LatLog(path, columns, lat_unit)
        else:
            layout = Layout.from_bins(columns - HEADER_COLUMNS)
            if layout is None and not whole:  # fio stopped while writing its first line
                warn(f"{path}:{line}: {CUT}; it holds no whole line, skipped")
                continue
            if layout is None:
                raise layout_error(path, line, columns)
            log = HistLog(path, layout)
        sources.append(Source(path, log, line, first_time, size))
    if not sources:
        raise FioLogError(paths[0] if paths else "-", None,
                          "no samples: every file is empty or holds no whole line")
    _check_kinds(sources)
    coarser = coarser_merge(sources)
    if coarser is not None:
        warn(coarser)
    hosts = list(host_offsets)
    for source in sources:
        source.host = host_of(source.path, hosts)
        source.offset_ms = offset_ms + host_offsets.get(source.host or "", 0)
    unused = [h for h in hosts if not any(s.host == h for s in sources)]
    if unused:
        raise FioLogError(
            f"--host-offset {unused[0]}", None,
            "no file belongs to this host (a log belongs to host H when it is named "
            "<name>.log.H, as fio's client writes them, or lies in a directory named H)")
    if len({s.epoch for s in sources}) > 1:
        relative = next(s for s in sources if not s.epoch)
        absolute = next(s for s in sources if s.epoch)
        raise FioLogError(relative.path, relative.first_line,
                          f"times relative to the job start ({relative.first_time} ms), but "
                          f"{absolute.path} has unix epoch times (--log_unix_epoch): they "
                          "do not merge")
    return sources


def _check_kinds(sources: list[Source]) -> None:
    first = sources[0]
    for source in sources[1:]:
        if source.log.kind != first.log.kind:
            raise FioLogError(source.path, source.first_line,
                              f"a {source.log.kind} log, but {first.path} is a "
                              f"{first.log.kind} log: give one kind of log at a time")
    if first.log.kind == "latency":
        return
    family = first.log.layout.family
    for source in sources[1:]:
        layout = source.log.layout
        if layout.family != family:
            raise FioLogError(source.path, source.first_line,
                              f"the {layout.family}, but {first.path} has the {family}: "
                              "mixed layouts do not merge")


def _names(paths: list[str], most: int = 3) -> str:
    shown = ", ".join(paths[:most])
    return shown if len(paths) <= most else f"{shown} and {len(paths) - most} more"


def coarser_merge(sources: Sequence[Source]) -> str | None:
    """What a merge of histogram logs of different bin counts does, in one line (None when
    they have one): every log is read at the coarsest one's bins, so the finer logs lose
    their resolution without their numbers saying so."""
    layouts = {s.log.layout for s in sources if isinstance(s.log, HistLog)}
    if len(layouts) < 2:
        return None
    common = max(layouts, key=lambda layout: layout.coarseness)
    finer = []
    for layout in sorted(layouts - {common}, key=lambda layout: layout.coarseness):
        paths = [str(s.path) for s in sources if s.log.layout == layout]
        finer.append(f"{_names(paths)} ({layout.bins} bins, --log_hist_coarseness="
                     f"{layout.coarseness}; {1 << (common.coarseness - layout.coarseness)} "
                     "of their bins in one)")
    as_in = _names([str(s.path) for s in sources if s.log.layout == common])
    return (f"logs of different bin counts merge at the coarsest, {common.bins} bins "
            f"(--log_hist_coarseness={common.coarseness}, as {as_in}): "
            + "; ".join(finer) + " are read at that resolution")


def common_layout(sources: Sequence[Source]) -> Layout | None:
    """The layout all histogram logs merge into: the coarsest among them (coarse bins are
    unions of fine ones, so finer logs coarsen exactly)."""
    layouts = [s.log.layout for s in sources if isinstance(s.log, HistLog)]
    if not layouts:
        return None
    return max(layouts, key=lambda layout: layout.coarseness)


__all__ = ["CUT", "EPOCH_MS", "Source", "coarser_merge", "common_layout", "host_of",
           "open_sources", "sniff"]
