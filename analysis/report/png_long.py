"""The long-period figures as PNG images (``slowdown report --png DIR``), from the same data
as the page (``longview``, ``longpage``); matplotlib imported only here, as in ``png``.
Sized to read at 800 pixels wide (8 inches at 100 dpi)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

from slowdown.analysis.report import longpage
from slowdown.analysis.report.page import _slug
from slowdown.analysis.report.png import COLORS, _nan, _save, _time_axis, _times
from slowdown.analysis.units import format_duration

STAT_COLORS = {"median": "#1f77b4", "q95": "#ff7f0e", "q99": "#d62728", "max": "#7f7f7f"}
BELOW = "#2ca02c"
RATIO_TICKS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 1, 1.4, 2, 3, 5, 10, 20, 50, 100,
               1000)


def _when(t: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(t, dt.timezone.utc)


def _log_axis(ax, label) -> None:
    """A log y axis labelled at 1, 2 and 5 of each decade (a range under one decade, as
    most of these are, would otherwise show one label or none)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: label(v)))
    ax.yaxis.set_minor_formatter(NullFormatter())


def _latency(ax) -> None:
    from slowdown.analysis.units import format_latency

    _log_axis(ax, format_latency)


def _ratio_axis(ax, values) -> None:
    finite = [v for v in values if v is not None and v > 0]
    lo, hi = (min(finite), max(finite)) if finite else (1.0, 1.0)
    from matplotlib.ticker import FixedLocator

    _log_axis(ax, lambda v: f"{v:g}")
    ax.yaxis.set_major_locator(FixedLocator(RATIO_TICKS))
    ax.set_ylim(min(0.5, lo * 0.8), max(2.0, hi * 1.25))
    ax.axhspan(1e-9, 1.0, color=BELOW, alpha=0.08, lw=0)
    ax.axhline(1.0, color="#1d232a", lw=0.8, ls="--")


def slowdown(target: str, long: dict) -> bytes:
    from matplotlib.figure import Figure

    d = longpage.long_slowdown(long)
    fig = Figure(figsize=(8, 3.6), layout="constrained")
    ax = fig.subplots()
    for k, o in enumerate(d["ops"]):
        ax.plot(_times(d["t0"], d["step"], len(o["values"])), _nan(o["values"]),
                color=COLORS[k % len(COLORS)], lw=1, label=o["op"])
        for a, b in o["runs"]:
            ax.axvspan(_when(a), _when(b), color=BELOW, alpha=0.18, lw=0)
    _ratio_axis(ax, [v for o in d["ops"] for v in o["values"]])
    ax.set_xlim(_when(d["start"]), _when(d["end"]))
    _time_axis(ax)
    ax.set_ylabel("slowdown")
    ax.legend(fontsize=8, ncol=min(6, len(d["ops"])), loc="upper left")
    ax.set_title(f"{target}: slowdown per {format_duration(long['step'])} "
                 f"({long['statistic']} / expected); shaded: below 1", loc="left", fontsize=10)
    return _save(fig)


def rhythm(target: str, long: dict) -> bytes:
    from matplotlib.figure import Figure

    d = longpage.rhythm(long)
    fig = Figure(figsize=(8, 3.4), layout="constrained")
    left, right = fig.subplots(1, 2, sharey=True, gridspec_kw={"width_ratios": [24, 12]})
    values = []
    for k, o in enumerate(d["ops"]):
        color = COLORS[k % len(COLORS)]
        left.plot(range(24), _nan(o["by_hour"]), color=color, lw=1.4, label=o["op"])
        right.plot(range(7), _nan(o["by_weekday"]), color=color, lw=1.4, marker="o", ms=3)
        values += o["by_hour"] + o["by_weekday"]
    for ax in (left, right):
        _ratio_axis(ax, values)
    left.set_xticks(range(0, 24, 3), [f"{h:02d}" for h in range(0, 24, 3)])
    left.set_xlabel("hour of the day (UTC)")
    right.set_xticks(range(7), [w[:3] for w in longpage.WEEKDAYS])
    right.set_xlabel("day of the week")
    left.set_ylabel("median slowdown")
    left.legend(fontsize=8, loc="upper right")
    found = [o for o in d["ops"] if o["cycles"]]
    said = "; no cycle found"
    if found:
        said = f"; {found[0]['op']}: " + ", ".join(
            f"{c['kind']} {c['factor']:.2f}x ({c['explained']:.0%} of the variation)"
            for c in found[0]["cycles"]) + (f"; +{len(found) - 1} op(s)"
                                             if len(found) > 1 else "")
    fig.suptitle(f"{target}: the week's rhythm{said}", x=0.01, ha="left", fontsize=9)
    return _save(fig)


def _boxes(ax, groups: list[dict | None], positions, width: float, color: str) -> None:
    stats = [{"med": b["median"], "q1": b["q1"], "q3": b["q3"], "whislo": b["low"],
              "whishi": b["high"], "fliers": [v for v in (b["min"], b["max"])
                                              if v < b["low"] or v > b["high"]]}
             for b in groups if b]
    where = [p for p, b in zip(positions, groups) if b]
    if not stats:
        return
    ax.bxp(stats, positions=where, widths=width, patch_artist=True, manage_ticks=False,
           boxprops={"facecolor": color, "alpha": 0.35, "edgecolor": color},
           medianprops={"color": color, "lw": 1.6}, whiskerprops={"color": color},
           capprops={"color": color}, flierprops={"markeredgecolor": color, "ms": 3})


def op_boxes(target: str, long: dict) -> bytes:
    from matplotlib.figure import Figure

    stats = ["median", "q95", "q99", "max"]
    fig = Figure(figsize=(8, 3.4), layout="constrained")
    ax = fig.subplots()
    ops = long["ops"]
    for j, s in enumerate(stats):
        _boxes(ax, [o["boxes"][s] for o in ops], [i + (j - 1.5) * 0.2 for i in range(len(ops))],
               0.16, STAT_COLORS[s])
        ax.plot([], [], color=STAT_COLORS[s], lw=4, alpha=0.6, label=s)
    ax.set_xticks(range(len(ops)), [o["op"] for o in ops])
    _latency(ax)
    ax.legend(fontsize=8, ncol=4, loc="upper left")
    ax.set_title(f"{target}: {format_duration(long['step'])} statistics over the range, per op",
                 loc="left", fontsize=10)
    return _save(fig)


def host_boxes(target: str, long: dict) -> bytes:
    from matplotlib.figure import Figure

    ops = long["ops"]
    fig = Figure(figsize=(8, max(3.0, 0.6 + 1.6 * len(ops))), layout="constrained")
    axes = fig.subplots(len(ops), 1, squeeze=False)[:, 0]
    for k, (ax, o) in enumerate(zip(axes, ops)):
        hosts = o["hosts"]
        _boxes(ax, [h["box"] for h in hosts], range(len(hosts)), 0.6, COLORS[k % len(COLORS)])
        every = max(1, -(-len(hosts) // 16))
        ax.set_xticks(range(0, len(hosts), every), [h["host"] for h in hosts][::every],
                      fontsize=7)
        ax.set_xlim(-0.7, len(hosts) - 0.3)
        _latency(ax)
        ax.set_ylabel(o["op"], fontsize=8)
    axes[0].set_title(f"{target}: robustness on hosts: each host's "
                      f"{format_duration(long['step'])} {long['statistic']}", loc="left",
                      fontsize=10)
    return _save(fig)


def timeline(target: str, long: dict, o: dict) -> bytes:
    from matplotlib.figure import Figure

    d = longpage.long_timeline(long, o)
    fig = Figure(figsize=(8, 3.4), layout="constrained")
    ax = fig.subplots()
    for e in d["episodes"]:
        ax.axvspan(_when(e["at"]), _when(e["until"]), color="#9467bd", alpha=0.15, lw=0)
    times = _times(d["t0"], d["step"], d["columns"])
    for name, values in d["stats"].items():
        ax.plot(times, _nan(values), color=STAT_COLORS.get(name, "k"), lw=1, label=name)
    for c in d["changes"]:
        ax.axvline(_when(c["at"]), color="#1d232a", ls="--", lw=1.2)
        ax.annotate(f"{c['factor']:.2f}x", (_when(c["at"]), 1), xycoords=("data",
                    "axes fraction"), xytext=(3, -12), textcoords="offset points",
                    fontsize=8)
    _latency(ax)
    ax.set_xlim(_when(d["start"]), _when(d["end"]))
    _time_axis(ax)
    ax.legend(fontsize=8, ncol=4, loc="lower right", bbox_to_anchor=(1, 1), frameon=False,
              borderaxespad=0)  # above the axes: a level at the bottom stays in sight
    ax.set_title(f"{target} {o['op']}: {format_duration(d['step'])} statistics"
                 + (f"; change points ({len(d['changes'])})" if d["changes"] else ""),
                 loc="left", fontsize=10)
    return _save(fig)


def figures(t: dict) -> Iterator[tuple[str, bytes]]:
    """``(file name, PNG bytes)`` of target ``t``'s long figures, in page order."""
    long, name = t["long"], t["target"]
    if not long["ops"]:
        return
    yield f"{_slug(name)}-long-slowdown.png", slowdown(name, long)
    yield f"{_slug(name)}-rhythm.png", rhythm(name, long)
    yield f"{_slug(name)}-long-boxes.png", op_boxes(name, long)
    yield f"{_slug(name)}-host-boxes.png", host_boxes(name, long)
    for o in long["ops"]:
        yield f"{_slug(name, o['op'])}-long-timeline.png", timeline(name, long, o)


__all__ = ["figures"]
