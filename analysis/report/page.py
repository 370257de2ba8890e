"""The report as one HTML file: every figure's data in a JSON block beside its canvas, drawn
by the inline script; no external resource of any kind (the page's content security policy
forbids loading one).

The style sheet and the script are the package's files ``report.css`` and ``report.js``,
inlined whole into every report. The script finds every ``figure.chart``, parses the JSON
block inside it and draws the figure on its canvas. After drawing it notes what it drew on the
figure (``data-drawn``, and ``data-total``/``data-cells`` on heat maps, ``data-points`` on line
charts) and, when all are done, the time since navigation start on ``<body data-rendered>``:
tests read these back. It is inlined first and lends its helpers (formats, ticks, canvas
setup, legend, readout, the drawing loop) to the page's other scripts as
``window.slowdownReport``.
"""

from __future__ import annotations

import datetime as dt
import json
from html import escape
from importlib.resources import files

from slowdown.analysis.report import longpage, serverpage
from slowdown.analysis.units import format_duration, format_latency


def _asset(name: str) -> str:
    return files(__package__).joinpath(name).read_text(encoding="utf-8")


STYLE = _asset("report.css")
SCRIPT = _asset("report.js")

CSP = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
       "img-src data:")


def _time(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def _json(value: object) -> str:
    """JSON safe inside a <script> element (no "</script>", no "<!--")."""
    text = json.dumps(value, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _slug(*parts: str) -> str:
    return "-".join("".join(ch if ch.isalnum() or ch in "-." else "_" for ch in p)
                    for p in parts)


def figure(kind: str, fig_id: str, caption: str, data: dict, attrs: dict[str, str],
           extra: str = "") -> str:
    more = "".join(f' data-{k}="{escape(v)}"' for k, v in attrs.items())
    return (f'<figure class="chart" id="{fig_id}" data-kind="{kind}"{more}>'
            f"<figcaption>{caption}</figcaption><canvas></canvas>"
            f'<div class="legend"></div><div class="readout"></div>{extra}'
            f'<script type="application/json">{_json(data)}</script></figure>')


def _x_or_better_table(d: dict) -> str:
    if not d["table"]:
        return '<p class="note">no minute records</p>'
    rows = "".join(
        f"<tr><td>{_fraction(r['fraction'])}</td><td>{r['value']:.4g}</td>"
        f"<td>{format_latency(r['latency'])}</td></tr>" for r in d["table"])
    return (f'<table class="x-or-better"><thead><tr><th>of {d["minutes"]} minutes</th>'
            f"<th>{escape(d['unit'])} or better</th><th>mean latency or better</th></tr>"
            f"</thead><tbody>{rows}</tbody></table>")


def _fraction(f: float) -> str:
    return "all" if f == 1 else f"{f * 100:g}%"


def _provision_table(target: str, p: dict) -> str:
    pct = f"{p['confidence'] * 100:g}%"
    body = []
    for r in p["ops"]:
        if "note" in r:
            body.append(f"<tr><td>{escape(r['op'])}</td><td colspan=6>{escape(r['note'])}</td>"
                        "</tr>")
            continue
        body.append(f"<tr><td>{escape(r['op'])}</td><td>{r['minutes']}</td>"
                    f"<td>{r['best_per_node']:.4g}</td><td>{r['mean_per_node']:.4g}</td>"
                    f"<td>{r['nodes_best_case']}</td><td>{r['nodes']}</td>"
                    f"<td>{r['ratio']:.2f}</td></tr>")
    return (f'<h3>Nodes needed for {escape(p["text"])}</h3>'
            f'<p class="note">Per node: the per-minute throughput of one host (ops/s; MiB/s '
            f"for data ops), drawn from the measured minutes. Best case: every node as fast "
            f"as the best minute. With {pct} confidence: the fewest nodes whose summed draws "
            f"reach the goal in {pct} of {p['trials']} Monte Carlo trials (seed {p['seed']})."
            f"</p><table class=\"provision\" data-target=\"{escape(target)}\"><thead><tr>"
            f"<th>op</th><th>minutes</th><th>best/node</th><th>mean/node</th>"
            f"<th>nodes, best case</th><th>nodes at {pct}</th><th>ratio</th></tr></thead>"
            f"<tbody>{''.join(body)}</tbody></table>"
            f'<script type="application/json" class="provision-data">{_json(p)}</script>')


def _target_section(t: dict, doc: dict) -> str:
    name = t["target"]
    tl = t["timeline"]
    stats = ", ".join(doc["statistics"])
    windows = ", ".join(format_duration(w) for w in doc["windows"])
    node = tl["node"]
    node_text = (f", and the node context of {escape(', '.join(node['hosts']))} (load, CPU and "
                 "memory: the column's highest; disk and network: mean MB/s, hosts added)"
                 if node["hosts"] else " (no node context recorded)")
    baseline = ("provisional baseline (computed from the data so far)" if t["provisional"]
                else f"{len(tl['baselines'])} baseline change(s) in this range")
    parts = [
        f'<section class="target" id="{_slug("target", name)}" data-target="{escape(name)}">',
        f"<h2>{escape(name)}</h2>",
        f'<p class="meta">hosts {escape(", ".join(t["hosts"]) or "-")}; '
        f'{t["count"]} ops recorded in this range; {baseline}</p>',
        figure("timeline", _slug("timeline", name),
               f"<b>Slowdown</b> (observed / expected, log scale) over windows of {windows}, "
               f"statistics {escape(stats)}, each the worst op's; shaded: an op stuck. Below: "
               f"errors, skipped ticks and the longest stuck age{node_text}.",
               tl, {"target": name}),
    ]
    if t["provision"] is not None:
        parts.append(_provision_table(name, t["provision"]))
    parts.append('<div class="ops">')
    for f in t["op_figures"]:
        op = f["op"]
        parts.append(f'<h3 class="op-title" id="{_slug("op", name, op)}">{escape(op)}</h3>')
        if not f.get("percentiles"):
            parts.append('<p class="note">no records in this range</p>')
            continue
        attrs = {"target": name, "op": op}
        parts.append(figure(
            "percentiles", _slug("percentiles", name, op),
            f"<b>Latency percentiles</b> per {format_duration(f['percentiles']['step'])}, "
            "raised to the stuck age at each column's end",
            f["percentiles"], attrs))
        heat = f["heatmap"]
        parts.append(figure(
            "heatmap", _slug("heatmap", name, op),
            f"<b>Heat map</b>: ops per {format_duration(heat['step'])} and latency bucket "
            f"(histogram scale {heat['scale']}), {heat['total']} ops",
            heat, attrs))
        xob = f["x_or_better"]
        parts.append(figure(
            "x_or_better", _slug("x_or_better", name, op),
            f"<b>{escape(xob['unit'])} or better</b>: per-minute throughput (1 / mean "
            "latency) reached or beaten in a fraction of the minutes",
            xob, attrs, extra=_x_or_better_table(xob)))
    parts.append("</div>" + serverpage.section(t) + (longpage.section(t) if "long" in t else "")
                 + "</section>")
    return "\n".join(parts)


def render(doc: dict, title: str = "slowdown report") -> str:
    """The whole page."""
    targets = doc["targets"]
    nav = " ".join(f'<a href="#{_slug("target", t["target"])}">{escape(t["target"])}</a>'
                   for t in targets)
    filters = "; ".join(f"{k} {', '.join(v)}" for k, v in doc["filters"].items() if v)
    merged = (f'\n<p class="meta merged">{escape(doc["merged_text"])}</p>'
              if doc.get("merged_text") else "")
    merged += "".join(f'\n<p class="meta verdict">{escape(line)}</p>'
                      for line in doc.get("verdicts", ()))
    span = f"{_time(doc['from'])} .. {_time(doc['to'])}"
    long = any("long" in t for t in targets)
    servers = serverpage.has_maps(targets)
    body = "\n".join(_target_section(t, doc) for t in targets) if targets else \
        '<section><p class="note">No data for the chosen targets, hosts and ops.</p></section>'
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{CSP}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>{escape(title)}: {escape(span)}</title>
<style>
{STYLE}{longpage.STYLE if long else ""}{serverpage.STYLE if servers else ""}</style>
</head>
<body>
<header>
<h1>{escape(title)}</h1>
<p class="meta">{escape(span)}; one column per {format_duration(doc['step'])}; expected value:
{'the same statistic' if doc['expected'] == 'same' else 'the median'} of the baseline in force</p>
<p class="meta">from {escape(', '.join(doc['databases']))}{'; ' + escape(filters) if filters
                                                            else ''}</p>{merged}
<nav>{nav}</nav>
</header>
{body}
<footer>Made by slowdown report at {_time(doc['now'])}. Move the pointer over a chart to read
its values. Times are UTC.</footer>
<script>
{SCRIPT}</script>{longpage.script() if long else ""}{serverpage.script() if servers else ""}
</body>
</html>
"""


__all__ = ["render"]
