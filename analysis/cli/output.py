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


# -- the service's state, in words --------------------------------------------------------------

FIRST_NUMBERS_GRACE = 10.0  # seconds past the first flush before the first numbers are late


def collecting_text(state: Any, now: float) -> str:
    """``collecting since 16:41:55 UTC, first numbers at 16:43:00 UTC`` for a target (a
    ``scope.TargetState``) whose service runs but has written no minute of it yet;
    ``preparing since 16:41:50 UTC`` while slowdown-probe makes the workspaces."""
    from slowdown.analysis.units import format_clock

    word = "preparing" if state.state == "preparing" else "collecting"
    text = word + (f" since {format_clock(state.since, now)}" if state.since else "")
    due = state.first_numbers_at
    if due is not None:
        late = now > due + FIRST_NUMBERS_GRACE
        text += f", first numbers {'were due' if late else 'at'} {format_clock(due, now)}"
    return text


def state_notes(state: Any, now: float, cluster: bool) -> list[str]:
    """What to add to a line of numbers about the services behind them: ``service stopped;
    numbers from 10:42:00 UTC, 7m ago``; on a cluster, the hosts it concerns. (The states
    are ``scope``'s: running, collecting, stopped.)"""
    from slowdown.analysis.units import format_age, format_clock

    def on(hosts: list[str]) -> str:
        return f" on {', '.join(hosts)}" if cluster else ""

    notes = []
    stopped = [h for h, s in state.hosts.items() if s == "stopped"]
    if stopped:
        words = []
        copies = [h for h in stopped if h in getattr(state, "published", {})]
        if copies:  # published copies: the age of the copy, not a service that stopped
            made = min(state.published[h] for h in copies)
            words.append(f"published cop{'ies' if len(copies) > 1 else 'y'}"
                         f"{' of ' + ', '.join(copies) if cluster else ''}, "
                         f"{'the oldest ' if len(copies) > 1 else ''}made at "
                         f"{format_clock(made, now)}")
        quiet = [h for h in stopped if h not in state.not_probed and h not in copies]
        if quiet:
            words.append("service stopped" + on(quiet))
        dropped = [h for h in stopped if h in state.not_probed]
        if dropped:
            words.append("no longer probed" + on(dropped))
        text = "; ".join(words)
        if state.state == "stopped" and state.newest_record is not None:
            text += (f"; numbers from {format_clock(state.newest_record, now)}, "
                     f"{format_age(now - state.newest_record)} ago")
        notes.append(text)
    collecting = [h for h, s in state.hosts.items() if s == "collecting"]
    if collecting and state.state != "collecting":
        notes.append(f"collecting on {', '.join(collecting)}")
    preparing = [h for h, s in state.hosts.items() if s == "preparing"]
    if preparing:  # numbers of an earlier run: no service behind them now
        since = state.since if state.state == "preparing" else None
        notes.append("preparing" + on(preparing)
                     + (f" since {format_clock(since, now)}" if since else ""))
    return notes
