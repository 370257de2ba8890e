"""The long-period figures' part of the page (``longview``): a section per target after its
op figures, and their own style sheet and script (``report_long.css``, ``report_long.js``),
inlined only into a page that has them, so that a report without them is the same bytes as
before they existed. Their figures are ``figure.long`` (not ``figure.chart``: the main
script draws only its own kinds); the long script marks each as drawn as the main one does
(``data-drawn``; ``<body data-long-figures>``), with the main script's helpers
(``window.slowdownReport``)."""

from __future__ import annotations

import datetime as dt
from html import escape
from importlib.resources import files

from slowdown.analysis.units import format_duration

WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


def _asset(name: str) -> str:
    return files(__package__).joinpath(name).read_text(encoding="utf-8")


STYLE = _asset("report_long.css")
SCRIPT = _asset("report_long.js")


def script() -> str:
    return f"\n<script>\n{SCRIPT}</script>"


def _figure(kind: str, fig_id: str, caption: str, data: dict, attrs: dict[str, str],
            extra: str = "") -> str:
    from slowdown.analysis.report.page import figure

    return figure(kind, fig_id, caption, data, attrs, extra).replace(
        '<figure class="chart"', '<figure class="long"', 1)


def _day(t: int) -> str:
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%d %H:%M")


def _cycles_table(long: dict) -> str:
    rows = []
    for o in long["ops"]:
        for c in o["cycles"]:
            names = (lambda h: f"{h:02d}:00 UTC") if c["kind"] == "daily" else \
                WEEKDAYS.__getitem__
            rows.append(f"<tr><td>{escape(o['op'])}</td><td>{c['kind']}</td>"
                        f"<td>{names(c['peak'])}</td><td>{names(c['trough'])}</td>"
                        f"<td>{c['factor']:.2f}x</td><td>{c['explained']:.0%}</td></tr>")
    if not rows:
        return '<p class="note">no daily or weekly cycle found</p>'
    return ('<table class="cycles"><thead><tr><th>op</th><th>cycle</th><th>peak</th>'
            "<th>trough</th><th>peak / trough</th><th>variation explained</th></tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table>")


def _changes_table(long: dict) -> str:
    rows = [f"<tr><td>{escape(o['op'])}</td><td>{_day(c['at'])}</td><td>{c['factor']:.2f}x"
            f"</td><td>{c['sure']:.0%}</td></tr>" for o in long["ops"] for c in o["changes"]]
    if not rows:
        return '<p class="note">no change point: the level held over the range</p>'
    return ('<table class="changes"><thead><tr><th>op</th><th>changed at (UTC)</th>'
            "<th>factor</th><th>sure</th></tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table>")


def section(t: dict) -> str:
    """The long figures of target ``t`` (its ``long``)."""
    from slowdown.analysis.report.page import _slug

    long, name = t["long"], t["target"]
    step, stat = format_duration(long["step"]), escape(long["statistic"])
    attrs = {"target": name}
    parts = [f'<div class="long-view" id="{_slug("long", name)}">',
             f"<h3>Over the range: {step} statistics</h3>"]
    if not long["ops"]:
        return "\n".join([*parts, '<p class="note">no records in this range</p></div>'])
    parts.append(_figure(
        "long_slowdown", _slug("long_slowdown", name),
        f"<b>Slowdown per {step}</b> ({stat} / expected, log scale) of each op: typically 1, "
        f"sometimes many times slower; values below 1 (shaded band) are unusual (caching), "
        f"stretches of a day or more under {long['below']:g} marked", long_slowdown(long),
        attrs))
    parts.append(_figure(
        "rhythm", _slug("rhythm", name),
        "<b>The week's rhythm</b>: median slowdown of each hour by hour of the day (UTC) and "
        "by day of the week; the cycles found in the hourly "
        f"{escape(long['trend_statistic'])} (as <code>slowdown trends</code>)",
        rhythm(long), attrs, extra=_cycles_table(long)))
    parts.append(_figure(
        "long_boxes", _slug("long_boxes", name),
        f"<b>Statistics per {step}</b>: the spread of each {step} median, q95, q99 and max "
        "over the range, per op (box: quartiles; whiskers: 1.5 x the interquartile range)",
        {"stats": ["median", "q95", "q99", "max"],
         "ops": [{"op": o["op"], "boxes": o["boxes"]} for o in long["ops"]]}, attrs))
    parts.append(_figure(
        "host_boxes", _slug("host_boxes", name),
        f"<b>Robustness on hosts</b>: each host's own {step} {stat} over the range, per op",
        {"statistic": long["statistic"],
         "ops": [{"op": o["op"], "hosts": o["hosts"]} for o in long["ops"]]}, attrs))
    parts.append(f"<h3>Timelines of {step} statistics and change points</h3>")
    parts.append(_changes_table(long))
    parts.append('<div class="ops">')
    for o in long["ops"]:
        parts.append(_figure(
            "long_timeline", _slug("long_timeline", name, o["op"]),
            f"<b>{escape(o['op'])}</b>: median, q95, q99 and max per {step} (log scale); "
            "dashed: the change points of the hourly "
            f"{escape(long['trend_statistic'])}; shaded: a stretch that left its level and "
            "came back", long_timeline(long, o), {**attrs, "op": o["op"]}))
    parts.append("</div></div>")
    return "\n".join(parts)


def long_slowdown(long: dict) -> dict:
    first = long["ops"][0]["timeline"]
    return {"t0": first["t0"], "step": first["step"], "columns": first["columns"],
            "start": long["start"], "end": long["end"], "below": long["below"],
            "ops": [{"op": o["op"], "values": o["slowdown"], "runs": o["below"]}
                    for o in long["ops"]]}


def rhythm(long: dict) -> dict:
    return {"ops": [{"op": o["op"], "by_hour": o["by_hour"], "by_weekday": o["by_weekday"],
                     "cycles": o["cycles"]} for o in long["ops"]]}


def long_timeline(long: dict, o: dict) -> dict:
    return {**o["timeline"], "start": long["start"], "end": long["end"],
            "changes": o["changes"], "episodes": o["episodes"]}


__all__ = ["STYLE", "WEEKDAYS", "script", "section"]
