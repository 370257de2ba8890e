"""fio's histogram logs (``--write_hist_log``): ``time_ms, ddir, bs, bin counts...``.

Guarantees: ``HistLog.parse`` returns a block's times, directions and bin counts exactly as
written, or raises ``BlockError`` for the first bad line (fields are named: time, direction,
block size, bin j); ``layout_error`` lists every field count a fio log can have.
"""

from __future__ import annotations

from pathlib import Path

from slowdown.analysis.fio import FioLogError
from slowdown.analysis.fio.blockparse import parse_block
from slowdown.analysis.fio.layout import HEADER_COLUMNS, Layout
from slowdown.analysis.fio.logblock import Block, check_directions
from slowdown.analysis.fio.textblocks import RawBlock


class HistLog:
    """A histogram log (``--write_hist_log``): ``time_ms, ddir, bs, bin counts...``."""

    kind = "histogram"

    def __init__(self, path: Path, layout: Layout) -> None:
        self.path = path
        self.layout = layout
        self.columns = layout.columns

    def field_name(self, j: int) -> str:
        return ("time", "direction", "block size")[j] if j < HEADER_COLUMNS else \
            f"bin {j - HEADER_COLUMNS}"

    def parse(self, raw: RawBlock, scratch: bool = False) -> Block:
        """Parse a block (runs in a worker thread); raises BlockError. With ``scratch`` the
        counts are valid until the thread's next parse (see parse_block)."""
        values, rows = parse_block(raw, self.columns, None, self.field_name, scratch)
        ddir = values[:, 1]
        check_directions(ddir, rows)
        if scratch:
            return Block(values[:, 0].copy(), ddir.copy(), counts=values[:, HEADER_COLUMNS:],
                         rows=rows)
        return Block(values[:, 0], ddir, counts=values[:, HEADER_COLUMNS:], rows=rows)


def layout_error(path: Path, line: int, fields: int) -> FioLogError:
    counts = ", ".join(str(HEADER_COLUMNS + (groups * 64 >> c))
                       for groups in (29, 19) for c in range(7))
    return FioLogError(
        path, line,
        f"expected a fio histogram log (3 + 1856/2^c fields for fio >= 3.0, 3 + 1216/2^c "
        f"before, c = log_hist_coarseness 0..6: {counts}) or a latency log (4 to 7 fields); "
        f"found {fields} fields")


__all__ = ["HistLog", "layout_error"]
