"""fio's latency logs (``--write_lat_log``): one line per I/O, or per averaging window.

A line is ``time_ms, value, ddir, bs`` followed, depending on fio's version and options,
by the offset (``log_offset``), the priority (``%u``, or ``0x%04x`` with ``log_prio``) and
the issue time (``log_issue_time``): 4 to 7 fields, of which time, value and direction are
read. fio writes ``_lat``, ``_clat`` and ``_slat`` files for total, completion and
submission latency; the histogram log counts completion latency, like ``_clat``.

Values are nanoseconds since fio 3.0 and microseconds before; a log does not say which, so
the unit is an option (nanoseconds by default). With ``--log_avg_msec`` a line holds the
average of a window, not one I/O: percentiles then describe those averages.
"""

from __future__ import annotations

import re
from pathlib import Path

from slowdown.analysis.fio.blockparse import parse_block
from slowdown.analysis.fio.logblock import Block, check_directions
from slowdown.analysis.fio.textblocks import RawBlock

MIN_COLUMNS = 4
MAX_COLUMNS = 7
UNITS = {"ns": 1e-9, "us": 1e-6}
_NAMES = ("time", "latency", "direction", "block size", "offset or priority", "priority",
          "issue time")
# fio names logs <prefix>_<kind>.<job>.log (plus .<host> from a fio server): these are not
# latencies.
_NOT_LATENCY = re.compile(r"_(bw|iops)(\.\d+)?\.log(\.|$)")


class LatLog:
    """A latency log: times, latencies (in ``unit``) and directions."""

    kind = "latency"
    layout = None  # no bins: every value itself
    wanted = (0, 1, 2)

    def __init__(self, path: Path, columns: int, unit: str = "ns") -> None:
        if unit not in UNITS:
            raise ValueError(f"latency unit must be one of {', '.join(UNITS)}, got {unit!r}")
        self.path = path
        self.columns = columns
        self.unit = unit
        self.unit_seconds = UNITS[unit]

    def field_name(self, j: int) -> str:
        return _NAMES[j] if j < len(_NAMES) else f"field {j + 1}"

    def parse(self, raw: RawBlock) -> Block:
        """Parse a block (runs in a worker thread); raises BlockError."""
        values, rows = parse_block(raw, self.columns, self.wanted, self.field_name)
        check_directions(values[2], rows)
        return Block(values[0], values[2], values=values[1], rows=rows)


def not_latency(path: Path) -> str | None:
    """What a log named like fio's bandwidth or IOPS logs is, or None."""
    match = _NOT_LATENCY.search(path.name)
    if match is None:
        return None
    return "a bandwidth log" if match.group(1) == "bw" else "an IOPS log"


__all__ = ["MAX_COLUMNS", "MIN_COLUMNS", "UNITS", "LatLog", "not_latency"]
