"""The comparison of docs/VALIDATION.md from the nodes' 1m slowdowns: per phase, node and op
the peak 1m median and q95 slowdown; how long until a phase shows (a minute >= 2) and until it
is gone (a minute < 1.5); false alarms in the quiet period; how far the nodes agree."""

from __future__ import annotations

import math
from collections.abc import Sequence

from slowdown.analysis.words import DATA_OPS, MD_OPS, OPS
from tests.kit.testbed.io500 import Phase
from tests.kit.testbed.results import Minutes

SHOWS, GONE = 2.0, 1.5

# The paper's Archer figure, in words (slowdown of each phase as the probe saw it).
PAPER = {
    "ior-easy-write": "~100x", "ior-easy-read": "data read stable",
    "ior-hard-write": "not too much", "ior-hard-read": "data read stable",
    "mdtest-easy-write": "", "mdtest-easy-stat": "", "mdtest-easy-delete": "",
    "mdtest-hard-write": "~1000x (md), data ops delayed tens of s",
    "mdtest-hard-stat": "", "mdtest-hard-read": "", "mdtest-hard-delete": "",
}


def minutes_of(start: float, end: float) -> list[int]:
    """The minutes [start, end) overlaps."""
    first = int(start) // 60 * 60
    return list(range(first, math.ceil(end / 60) * 60, 60))


def peak(minutes: Minutes, op: str, span: Sequence[int]) -> float | None:
    values = [minutes[(op, m)] for m in span if (op, m) in minutes]
    return max(values) if values else None


def worst(minutes: Minutes, m: int, ops: Sequence[str] = OPS) -> float | None:
    values = [minutes[(op, m)] for op in ops if (op, m) in minutes]
    return max(values) if values else None


def fmt(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.0f}" if value >= 100 else f"{value:.1f}" if value >= 10 else f"{value:.2f}"


def detection(minutes: Minutes, phase: Phase, horizon: float) -> tuple[str, str]:
    """Seconds from the phase's start until the end of the first minute whose worst op has a
    1m median slowdown >= 2 (when a 1m window shows it), and from the phase's end until the
    end of the first minute after it that is < 1.5 for every op."""
    shown = gone = None
    for m in minutes_of(phase.start, phase.end):
        value = worst(minutes, m)
        if value is not None and value >= SHOWS:
            shown = m + 60 - phase.start
            break
    if shown is not None:
        for m in minutes_of(phase.end, horizon):  # from the minute the phase ends in
            value = worst(minutes, m)
            if value is not None and value < GONE:
                gone = m + 60 - phase.end
                break
    return ("-" if shown is None else f"{shown:.0f}"), ("-" if gone is None else f"{gone:.0f}")


def phase_table(nodes: dict[str, tuple[Minutes, Minutes]], plan: list[Phase],
                horizon: float) -> str:
    """Markdown: one row per phase and node; median and q95 peaks per op, then timings."""
    head = ["phase", "node", *[f"{op} med/q95" for op in OPS], "shows after s", "gone after s",
            "paper (Archer)"]
    rows = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for phase in plan:
        span = minutes_of(phase.start, phase.end)
        for name, (median, q95) in nodes.items():
            cells = [f"{fmt(peak(median, op, span))} / {fmt(peak(q95, op, span))}" for op in OPS]
            shown, gone = detection(median, phase, horizon)
            rows.append("| " + " | ".join([phase.name, name, *cells, shown, gone,
                                           PAPER.get(phase.name, "")]) + " |")
    return "\n".join(rows)


def false_alarms(nodes: dict[str, tuple[Minutes, Minutes]], start: float, end: float
                 ) -> tuple[int, int]:
    """(minutes with a 1m median slowdown >= 2 on any op, node-minutes looked at)."""
    alarms = total = 0
    for median, _ in nodes.values():
        for m in minutes_of(start, end):
            if m < start or m + 60 > end:
                continue  # whole quiet minutes only
            value = worst(median, m)
            if value is None:
                continue
            total += 1
            alarms += value >= SHOWS
    return alarms, total


def agreement(nodes: dict[str, tuple[Minutes, Minutes]], plan: list[Phase]) -> str:
    """Per phase: the largest ratio between two nodes' peak 1m median slowdown, over md ops
    and data ops; and the correlation of log slowdown, minute by minute, over the whole run."""
    names = list(nodes)
    lines = ["| phase | md ops: max/min across nodes | data ops: max/min across nodes |",
             "| --- | --- | --- |"]
    for phase in plan:
        span = minutes_of(phase.start, phase.end)
        cells = []
        for ops in (MD_OPS, DATA_OPS):
            ratios = []
            for op in ops:
                peaks = [peak(nodes[n][0], op, span) for n in names]
                if all(p for p in peaks):
                    ratios.append(max(peaks) / min(peaks))
            cells.append(fmt(max(ratios)) if ratios else "-")
        lines.append(f"| {phase.name} | {cells[0]} | {cells[1]} |")
    if len(names) >= 2:
        a, b = nodes[names[0]][0], nodes[names[1]][0]
        pairs = [(math.log(a[k]), math.log(b[k])) for k in a if k in b and a[k] > 0 and b[k] > 0]
        lines.append("")
        lines.append(f"Correlation of log 1m median slowdown, {names[0]} against {names[1]}, "
                     f"every op and minute of the run ({len(pairs)} pairs): "
                     f"{_pearson(pairs):.2f}")
    return "\n".join(lines)


def _pearson(pairs: list[tuple[float, float]]) -> float:
    if len(pairs) < 3:
        return float("nan")
    n = len(pairs)
    mx = sum(x for x, _ in pairs) / n
    my = sum(y for _, y in pairs) / n
    sxy = sum((x - mx) * (y - my) for x, y in pairs)
    sx = math.sqrt(sum((x - mx) ** 2 for x, _ in pairs))
    sy = math.sqrt(sum((y - my) ** 2 for _, y in pairs))
    return sxy / (sx * sy) if sx and sy else float("nan")
