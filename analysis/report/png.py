"""The report's figures as PNG images (``slowdown report --png DIR``), drawn with matplotlib
from the same data as the HTML page. matplotlib is an optional extra (``pip install
'slowdown[png]'``), imported only here."""

from __future__ import annotations

import datetime as dt
import io
from collections.abc import Iterator

from slowdown.analysis.report.page import _slug
from slowdown.analysis.units import format_duration


class PngUnavailable(Exception):
    """matplotlib is not installed."""


def check() -> None:
    """Raise PngUnavailable unless matplotlib can be imported."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise PngUnavailable("needs matplotlib: pip install 'slowdown[png]'") from None


PCT_COLORS = {"median": "#1f77b4", "q90": "#2ca02c", "q95": "#ff7f0e", "q99": "#d62728",
              "max": "#7f7f7f"}
COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
          "#17becf", "#7f7f7f", "#bcbd22")


def _times(t0: int, step: int, n: int, middle: bool = True) -> list[dt.datetime]:
    half = step / 2 if middle else 0
    return [dt.datetime.fromtimestamp(t0 + i * step + half, dt.timezone.utc) for i in range(n)]


def _nan(values: list) -> list[float]:
    return [float("nan") if v is None else v for v in values]


def _time_axis(ax) -> None:
    import matplotlib.dates as mdates

    locator = mdates.AutoDateLocator(tz=dt.timezone.utc)
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator, tz=dt.timezone.utc))


def _latency_axis(ax) -> None:
    from matplotlib.ticker import FuncFormatter, NullFormatter

    from slowdown.analysis.units import format_latency

    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: format_latency(v)))
    ax.yaxis.set_minor_formatter(NullFormatter())


def _save(fig) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    return buffer.getvalue()


def timeline(t: dict) -> bytes:
    from matplotlib.figure import Figure

    tl = t["timeline"]
    fields = tl["node"]["fields"]
    ratios = [5, 0.6, 0.6, 0.6, *([1.2] * len(fields))]
    fig = Figure(figsize=(13, 4.2 + 0.9 * len(fields)), layout="constrained")
    axes = fig.subplots(len(ratios), 1, sharex=True, gridspec_kw={"height_ratios": ratios})
    ax = axes[0]
    start = dt.datetime.fromtimestamp(tl["start"], dt.timezone.utc)
    end = dt.datetime.fromtimestamp(tl["end"], dt.timezone.utc)
    for k, s in enumerate(tl["series"]):
        label = f"{format_duration(s['window'])} {s['statistic']}" + (
            f" (worst per {format_duration(tl['step'])})" if s["reduced"] else "")
        color = COLORS[k % len(COLORS)]
        if s["step"] > tl["step"]:  # a window longer than a column: a step across it
            n = len(s["values"])
            ax.plot(_times(s["t0"], s["step"], n + 1, middle=False), _nan(s["values"])
                    + _nan(s["values"][-1:]), color=color, lw=1.1, label=label,
                    drawstyle="steps-post")
        else:
            ax.plot(_times(s["t0"], s["step"], len(s["values"])), _nan(s["values"]),
                    color=color, lw=1.1, label=label)
    ax.set_yscale("log")
    ax.axhline(1.0, color="#1d232a", lw=0.8, ls="--")
    for b in tl["baselines"]:
        when = dt.datetime.fromtimestamp(b["time"], dt.timezone.utc)
        ax.axvline(when, color="#6a3d9a", ls=":", lw=1.2)
        ax.annotate(f"baseline: {b['reason'] or ''}", (when, 0), xycoords=("data", "axes "
                    "fraction"), xytext=(3, 4), textcoords="offset points", fontsize=8,
                    color="#6a3d9a")
    stuck = tl["events"]["stuck"]
    for i, v in enumerate(stuck):
        if v:
            a = max(tl["start"], tl["t0"] + i * tl["step"])
            b = min(tl["end"], tl["t0"] + (i + 1) * tl["step"])
            ax.axvspan(dt.datetime.fromtimestamp(a, dt.timezone.utc),
                       dt.datetime.fromtimestamp(b, dt.timezone.utc), color="#d62728",
                       alpha=0.12, lw=0)
    ax.set_ylabel("slowdown")
    ax.set_title(f"{t['target']}: slowdown (observed / expected), worst op", loc="left",
                 fontsize=11)
    ax.legend(fontsize=8, ncol=min(len(tl["series"]), 6), loc="upper left")
    ax.set_xlim(start, end)
    edges = _times(tl["t0"], tl["step"], tl["columns"], middle=False)
    for axis, name, color in zip(axes[1:4], ("errors", "skipped", "stuck"),
                                 ("#ff7f0e", "#9467bd", "#d62728")):
        values = [v or 0 for v in tl["events"][name]]
        axis.bar(edges, values, width=tl["step"] / 86400, align="edge", color=color)
        axis.set_ylabel(name, rotation=0, ha="right", va="center", fontsize=8)
        axis.set_yticks([])
    for axis, f in zip(axes[4:], fields):
        axis.plot(_times(tl["t0"], tl["step"], len(f["values"])), _nan(f["values"]),
                  color="#17becf", lw=1)
        axis.set_ylabel(f["label"], rotation=0, ha="right", va="center", fontsize=8)
    _time_axis(axes[-1])
    return _save(fig)


def percentiles(target: str, op: str, d: dict) -> bytes:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 3.4), layout="constrained")
    ax = fig.subplots()
    times = _times(d["t0"], d["step"], d["columns"])
    for name, values in d["stats"].items():
        ax.plot(times, _nan(values), color=PCT_COLORS.get(name, "k"), lw=1, label=name)
    _latency_axis(ax)
    _time_axis(ax)
    ax.legend(fontsize=8, ncol=5, loc="upper left")
    ax.set_title(f"{target} {op}: latency percentiles per {format_duration(d['step'])}",
                 loc="left", fontsize=10)
    return _save(fig)


def heatmap(target: str, op: str, d: dict) -> bytes:
    import numpy as np
    from matplotlib.colors import LogNorm
    from matplotlib.figure import Figure
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    counts = np.zeros((d["rows"], d["columns"]))
    for cell in d["cells"]:
        col, first, values = cell[0], cell[1], cell[2:]
        counts[first:first + len(values), col] = values
    base = 2.0 ** (2.0 ** -d["scale"])
    y = base ** (d["lowest"] + np.arange(d["rows"] + 1))
    x = _times(d["t0"], d["step"], d["columns"] + 1, middle=False)
    fig = Figure(figsize=(8, 3.4), layout="constrained")
    ax = fig.subplots()
    mesh = ax.pcolormesh(x, y, np.ma.masked_equal(counts, 0), cmap="viridis",
                         norm=LogNorm(vmin=1, vmax=max(1, counts.max())), shading="flat")
    bar = fig.colorbar(mesh, ax=ax, label="ops")
    bar.formatter = ScalarFormatter()
    bar.ax.yaxis.set_minor_formatter(NullFormatter())
    bar.update_ticks()
    _latency_axis(ax)
    _time_axis(ax)
    ax.set_title(f"{target} {op}: ops per {format_duration(d['step'])} and latency "
                 f"({d['total']} ops)", loc="left", fontsize=10)
    return _save(fig)


def x_or_better(target: str, op: str, d: dict) -> bytes:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 3.4), layout="constrained")
    ax = fig.subplots()
    if d["points"]:
        f, v = zip(*d["points"])
        ax.plot([0, *f], [v[0], *v], drawstyle="steps-pre", color="#1f77b4", lw=1.4)
        ax.plot([r["fraction"] for r in d["table"]], [r["value"] for r in d["table"]], "s",
                color="#d62728", ms=4)
    ax.set_xlim(0, 1)
    ax.set_ylim(bottom=0)
    ax.xaxis.set_major_formatter(lambda value, _: f"{value * 100:.0f}%")
    ax.set_xlabel(f"fraction of {d['minutes']} minutes")
    ax.set_ylabel(f"{d['unit']} or better")
    ax.set_title(f"{target} {op}: per-minute throughput reached or beaten", loc="left",
                 fontsize=10)
    return _save(fig)


def figures(doc: dict) -> Iterator[tuple[str, bytes]]:
    """``(file name, PNG bytes)`` of every figure of the report, in page order."""
    check()
    for t in doc["targets"]:
        name = t["target"]
        yield f"{_slug(name)}-timeline.png", timeline(t)
        for f in t["op_figures"]:
            if not f.get("percentiles"):
                continue
            stem = _slug(name, f["op"])
            yield f"{stem}-percentiles.png", percentiles(name, f["op"], f["percentiles"])
            yield f"{stem}-heatmap.png", heatmap(name, f["op"], f["heatmap"])
            yield f"{stem}-x-or-better.png", x_or_better(name, f["op"], f["x_or_better"])
        if t.get("servers", {}).get("maps"):
            from slowdown.analysis.report import png_servers

            yield from png_servers.figures(t)
        if "long" in t:
            from slowdown.analysis.report import png_long

            yield from png_long.figures(t)


__all__ = ["PngUnavailable", "check", "figures"]
