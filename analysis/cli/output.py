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

from slowdown.analysis.words import OPS


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
    ``service_states.TargetState``) whose service runs but has written no minute of it yet;
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
    are ``service_states``': running, collecting, stopped.)"""
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


def landing_notes(services: Sequence[Any], start: float, end: float, now: float,
                  ongoing_only: bool = False) -> list[str]:
    """What readers must be told of records that did not reach a database (``service_states``'
    services, ``store/landing.py``) in ``[start, end]``: going on now (``records are not
    reaching ... since ...``), or ended but with the file itself deleted, moved or replaced
    (what the file at the path held before is not in it). ``ongoing_only``: the first kind."""
    from slowdown.analysis.units import format_clock

    notes = []
    for service in services:
        landing = getattr(service, "landing", None)
        for episode in landing.within(start, end) if landing is not None else ():
            reason = episode["reason"] or "unknown"
            if episode["to"] is None:
                kept = getattr(service, "pending", None)
                kept = f"; {kept} minute(s) kept in memory" if kept else ""
                notes.append(f"records are not reaching {landing.path} since "
                             f"{format_clock(episode['from'], now)} ({reason}{kept})")
            elif episode.get("moved") and not ongoing_only:
                began, ended = (format_clock(episode[k], now) for k in ("from", "to"))
                when = f"at {began}" if began == ended else f"between {began} and {ended}"
                notes.append(f"records did not reach {landing.path} {when} ({reason}); they "
                             "are in the file at that path now")
    return notes


FULL = 0.99  # a probed filesystem this full (bytes or inodes) is said to be full


def space_notes(services: Sequence[Any], target: str, full: float = FULL) -> list[str]:
    """``filesystem 99.6% full (12 MiB free)`` or ``inodes 99.9% used`` for a target whose
    filesystem is at least ``full`` used, as its services last saw it (once a minute): every
    user's write fails there, while the probe, which only overwrites what it has, may not."""
    from slowdown.analysis.units import format_size

    notes = []
    for service in services:
        space = (getattr(service, "probes", {}).get(target) or {}).get("space") or {}
        used = _used(space.get("bytes_free"), space.get("bytes"))
        if used is not None and used >= full:
            notes.append(f"filesystem {_percent(used)} full ({format_size(space['bytes_free'])} "
                         "free)")
        used = _used(space.get("files_free"), space.get("files"))
        if used is not None and used >= full:
            notes.append(f"inodes {_percent(used)} used ({space['files_free']} free)")
    return sorted(set(notes))


def _used(free: object, total: object) -> float | None:
    """The share used, None where the counts say nothing (an older service reported CephFS's
    "unknown", -1 free inodes, as a count)."""
    ok = all(isinstance(v, int) and not isinstance(v, bool) for v in (free, total))
    if not ok or not 0 <= free <= total or total <= 0:  # type: ignore[operator]
        return None
    return 1.0 - free / total  # type: ignore[operator]


def failing_note(windows: Sequence[Any], services: Sequence[Any], target: str,
                 now: float, level: float = 0.05) -> str | None:
    """``failing: 100% of ops (ESHUTDOWN)``: the share of the target's ops that failed in the
    shortest window (``stats.slowdown.TargetSlowdown``), when at least ``level``, with the
    errors the ops last met there (the worst state a filesystem can be in: the slowdown
    alone may show nothing, no op having returned); ``failing: every op since ...`` instead
    while every op fails now (``failing_now``), which no window holds yet for up to a
    minute (the minute records are written when the minute ends)."""
    gone = failing_now_note(services, target, now)  # says more: since when, and at once
    if gone is not None or not windows:
        return gone
    shortest = min(windows, key=lambda ts: ts.window)
    errors = sum(o.errors for o in shortest.ops)
    attempts = errors + sum(o.samples for o in shortest.ops)
    if not attempts or errors / attempts < level:
        return None
    names = last_errors(services, target, since=now - shortest.window - 60)
    rate = errors / attempts
    return f"failing: {_percent(rate)} of ops" + (f" ({', '.join(names)})" if names else "")


def failing_now(services: Sequence[Any], target: str, now: float,
                ops: Sequence[str] = OPS) -> tuple[float, list[str], list[str]] | None:
    """``(since, errors, hosts)`` when every op of the target failed at its last try on a
    running service (its live state: a mount gone, an evicted client), before any window
    holds enough of it: since when all of them fail, the errors, and the hosts where they
    do; None otherwise. A last try counts if it is recent: at most three intervals (or 10 s)
    old, so a stuck op is said as stuck, not as failing."""
    since, names, hosts = None, set(), []
    for service in services:
        live = getattr(service, "live", None)
        if not isinstance(live, dict) or "stopped" in live:
            continue
        errors = (getattr(service, "probes", {}).get(target) or {}).get("errors") or {}
        interval = live.get("interval") if isinstance(live.get("interval"), (int, float)) else 1
        recent = now - max(10.0, 3 * interval)
        tries = [errors.get(op) for op in ops]
        if not all(isinstance(e, dict) and isinstance(e.get("at"), (int, float))
                   and e["at"] >= recent for e in tries):
            continue
        starts = [e.get("since", e["at"]) for e in tries]
        start = max(float(s) for s in starts if isinstance(s, (int, float)))
        since = start if since is None else min(since, start)
        names.update(str(e.get("err")) for e in tries)
        hosts.append(str(getattr(service, "host", None) or "?"))
    return None if since is None else (since, sorted(names), sorted(hosts))


def failing_now_note(services: Sequence[Any], target: str, now: float) -> str | None:
    """``failing: every op since 16:41:07 (ESHUTDOWN)``, from ``failing_now``; with the hosts
    when a view holds several services."""
    from slowdown.analysis.units import format_clock

    gone = failing_now(services, target, now)
    if gone is None:
        return None
    since, names, hosts = gone
    on = f" on {', '.join(hosts)}" if len(services) > 1 else ""
    return f"failing{on}: every op since {format_clock(since, now)} ({', '.join(names)})"


def _percent(rate: float) -> str:
    """99.6%, 100%: rounded down, so never 100 % while something is left."""
    return "100%" if rate >= 1 else f"{math.floor(rate * 1000) / 10:g}%"


def last_errors(services: Sequence[Any], target: str, op: str | None = None,
                since: float | None = None) -> list[str]:
    """The errors (``ENOTCONN``) the target's ops (or one op) last met, as their services
    said, those met at ``since`` or later."""
    names = set()
    for service in services:
        errors = (getattr(service, "probes", {}).get(target) or {}).get("errors") or {}
        for name, e in errors.items():
            at = e.get("at") if isinstance(e, dict) else None
            if (op is None or name == op) and isinstance(at, (int, float)) \
                    and (since is None or at >= since):
                names.add(str(e.get("err")))
    return sorted(names)
