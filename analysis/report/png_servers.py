"""The server x time heat maps as PNG images (``slowdown report --png``), from the same data
as the page (``servermap``): the same colours on the same log scale, few-probe cells grey,
the rows the rule names slow over the range in red. Imported only with ``--png``."""

from __future__ import annotations

from collections.abc import Iterator

from slowdown.analysis.report.page import _slug
from slowdown.analysis.report.servermap import cells_of
from slowdown.analysis.units import format_duration

# Slowdown -> colour, as report_servers.js draws it (log scale, 0.25x .. 32x).
STOPS = ((0.25, "#2166ac"), (0.5, "#92c5de"), (1, "#f7f7f7"), (1.5, "#fddbc7"),
         (2, "#f4a582"), (4, "#d6604d"), (10, "#b2182b"), (32, "#67001f"))
FEW, SLOW = "#c9ced4", "#b2182b"


def server_map(target: str, m: dict) -> bytes:
    import math

    import numpy as np
    from matplotlib.colors import LinearSegmentedColormap, ListedColormap, LogNorm
    from matplotlib.figure import Figure

    from slowdown.analysis.report.png import _save, _time_axis, _times

    rows, columns = len(m["servers"]), m["columns"]
    values = np.full((rows, columns), np.nan)
    few = np.zeros((rows, columns))
    for row, column, _probes, _errors, median, is_few in cells_of(m):
        if is_few or not m["expected"]:
            few[row, column] = 1
        else:
            values[row, column] = median / m["expected"]
    lo, hi = math.log(STOPS[0][0]), math.log(STOPS[-1][0])
    cmap = LinearSegmentedColormap.from_list(
        "slowdown", [((math.log(v) - lo) / (hi - lo), c) for v, c in STOPS])
    x = _times(m["t0"], m["step"], columns + 1, middle=False)
    y = np.arange(rows + 1)
    fig = Figure(figsize=(10, 1.6 + 0.22 * rows), layout="constrained")
    ax = fig.subplots()
    ax.pcolormesh(x, y, np.ma.masked_equal(few, 0), cmap=ListedColormap([FEW]),
                  shading="flat")
    mesh = ax.pcolormesh(x, y, np.ma.masked_invalid(np.clip(values, STOPS[0][0],
                                                            STOPS[-1][0])),
                         cmap=cmap, norm=LogNorm(STOPS[0][0], STOPS[-1][0]), shading="flat")
    bar = fig.colorbar(mesh, ax=ax, label="slowdown", pad=0.01)
    ticks = [0.25, 0.5, 1, 2, 4, 10, 32]
    bar.set_ticks(ticks, labels=[f"{t:g}x" for t in ticks])
    bar.ax.minorticks_off()
    ax.set_ylim(rows, 0)
    ax.set_yticks(np.arange(rows) + 0.5)
    ax.set_yticklabels([f"{s}  slow" if w == "slow" else s
                        for s, w in zip(m["servers"], m["words"])], fontsize=8)
    for label, word in zip(ax.get_yticklabels(), m["words"]):
        if word == "slow":
            label.set_color(SLOW)
            label.set_fontweight("bold")
    for row, word in enumerate(m["words"]):
        if word == "slow":
            ax.axhspan(row, row + 1, fill=False, edgecolor=SLOW, lw=1.5)
    _time_axis(ax)
    ax.set_title(f"{target} {m['op']}: each server's median per {format_duration(m['step'])} "
                 f"over expected (grey: fewer than {m['few']} probes)", loc="left", fontsize=10)
    return _save(fig)


def figures(t: dict) -> Iterator[tuple[str, bytes]]:
    """``<target>-<op>-servers.png`` for each heat map of target ``t``."""
    for m in t.get("servers", {}).get("maps", ()):
        yield f"{_slug(t['target'], m['op'])}-servers.png", server_map(t["target"], m)


__all__ = ["figures", "server_map"]
