"""Text output of the read commands: aligned plain text when piped, rich tables on a terminal.

rich is imported only when a terminal will show its output, so a piped ``slowdown`` stays
quick to start.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Sequence
from typing import Any, TextIO


def fmt_ratio(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.1f}" if value < 100 else f"{value:.0f}"


def table(rows: Sequence[Sequence[Any]], headers: Sequence[str], out: TextIO | None = None,
          right: Sequence[int] = (), title: str | None = None) -> None:
    """Columns aligned; rich's box table when writing to a terminal."""
    out = out or sys.stdout
    cells = [[("" if c is None else str(c)) for c in row] for row in rows]
    if out.isatty():
        from rich.console import Console
        from rich.table import Table

        t = Table(title=title, header_style="bold")
        for i, h in enumerate(headers):
            t.add_column(h, justify="right" if i in right else "left")
        for row in cells:
            t.add_row(*row)
        Console(file=out).print(t)
        return
    if title:
        out.write(title + "\n")
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]

    def line(values: Sequence[str]) -> str:
        parts = [v.rjust(w) if i in right else v.ljust(w)
                 for i, (v, w) in enumerate(zip(values, widths))]
        return "  ".join(parts).rstrip()

    out.write(line(headers) + "\n")
    for row in cells:
        out.write(line(row) + "\n")


def dump_json(doc: Any, out: TextIO | None = None) -> None:
    (out or sys.stdout).write(json.dumps(doc, indent=2, default=_jsonable) + "\n")


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def clean(value: float | None) -> float | None:
    """NaN as None, for JSON."""
    if value is None or (isinstance(value, float) and (math.isnan(value) or math.isinf(value))):
        return None
    return value
