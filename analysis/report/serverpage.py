"""The server x time heat maps' part of the page (``servermap``): after a target's op
figures, one ``figure.servers`` per op whose per-server records name a server, or one line
saying why there is none. Their style sheet and script (``report_servers.css``,
``report_servers.js``) are inlined only into a page that has such a figure, so that a report
of a database without per-server records differs from one made before they existed by that
line alone. The script marks each figure as drawn (``data-drawn``, ``data-cells``,
``data-few``, ``data-slow``) and sets ``<body data-servers-rendered>``, with the main
script's helpers (``window.slowdownReport``)."""

from __future__ import annotations

from html import escape
from importlib.resources import files

from slowdown.analysis.units import format_duration, format_latency


def _asset(name: str) -> str:
    return files(__package__).joinpath(name).read_text(encoding="utf-8")


STYLE = _asset("report_servers.css")
SCRIPT = _asset("report_servers.js")


def has_maps(targets: list[dict]) -> bool:
    return any(t.get("servers", {}).get("maps") for t in targets)


def script() -> str:
    return f"\n<script>\n{SCRIPT}</script>"


def section(t: dict) -> str:
    """The heat maps of target ``t`` (its ``servers``), or the line that says why none."""
    from slowdown.analysis.report.page import _slug, figure

    servers, name = t.get("servers"), t["target"]
    if servers is None:
        return ""
    if "note" in servers:
        return f'<p class="note servers-none">Servers: {escape(servers["note"])}</p>'
    step = format_duration(servers["step"])
    parts = [f'<div class="server-view" id="{_slug("servers", name)}">',
             f"<h3>Servers: slowdown per {step}</h3>"]
    for m in servers["maps"]:
        expected = (f"expected median {format_latency(m['expected'])}" if m["expected"]
                    else "no expected value yet")
        slow = (f"; slow over the range: {escape(', '.join(m['slow']))}" if m["slow"]
                else "; no server slow over the range")
        caption = (f"<b>{escape(m['op'])}</b> per server: each server's median in each {step} "
                   f"over the op's {expected} (colour, log scale); hatched: fewer than "
                   f"{m['few']} probes (few); {m['total']} probes{slow}")
        parts.append(figure("servers", _slug("servers", name, m["op"]), caption, m,
                            {"target": name, "op": m["op"]}).replace(
            '<figure class="chart"', '<figure class="servers"', 1))
    parts.append("</div>")
    return "\n".join(parts)


__all__ = ["STYLE", "has_maps", "script", "section"]
