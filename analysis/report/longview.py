"""What the report's long-period figures show (ranges of ``LONG_FROM`` or more): months of
probes read as the paper read them.

Per target, from the merged fleet (every file read a file at a time, as the rest of the
report):

- **Timelines of the step's statistics** (per op): median, q95, q99 and max of each
  ``step``-long cell (4 h by default), the change points and episodes of
  ``stats.trends`` (the same hourly statistic ``slowdown trends`` follows) drawn on them.
  The maximum of a cell is one op; q99 and q95 move less.
- **Boxes per op**: of each statistic, the spread of its step values over the range.
- **Boxes per host**: the report's statistic per step of each host alone (its own cells),
  per op: hosts that agree are a robust statistic, one that does not stands out.
- **Slowdown over the range**: the report's statistic per step over its expected value (as
  the timeline's slowdown), per op. Values below 1 are unusual (caching): stretches of a day
  or more under ``BELOW`` are listed.
- **The week's rhythm**: the slowdown of each hour (hourly cells) by hour of the day and by
  day of the week (medians), with the daily and weekly cycles ``stats.trends`` found (peak,
  trough, factor, share of the variation explained).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from slowdown.analysis.stats import history_by_file, series
from slowdown.analysis.store import Selection, Store
from slowdown.analysis.store.records import HOUR

DAY = 86400
LONG_FROM = 14 * DAY  # ranges at least this long show the long-period figures by default
LONG_STEP = 4 * HOUR
TREND_STEP = HOUR  # the hourly statistic of ``slowdown trends``
TREND_STAT = "median"  # ``slowdown trends``' default
LONG_STATS = ("median", "q95", "q99", "max")
BELOW = 0.9  # a slowdown under this for a day or more is listed (caching?)


def is_on(span: float, asked: bool | None) -> bool:
    """The long figures: as asked, or on for ranges of ``LONG_FROM`` or more."""
    return span >= LONG_FROM if asked is None else asked


def box(values: np.ndarray) -> dict | None:
    """A box plot's numbers: quartiles, whiskers at the last values within 1.5 times the
    interquartile range, the extremes; None without values."""
    from slowdown.analysis.report.data import floats

    v = np.sort(np.asarray(values, np.float64)[np.isfinite(values)])
    if not v.size:
        return None
    q1, median, q3 = np.quantile(v, [0.25, 0.5, 0.75])
    reach = 1.5 * (q3 - q1)
    inside = v[(v >= q1 - reach) & (v <= q3 + reach)]
    low, high = (inside[0], inside[-1]) if inside.size else (q1, q3)
    names = ("q1", "median", "q3", "low", "high", "min", "max")
    return {"n": int(v.size), **dict(zip(names, floats([q1, median, q3, low, high, v[0],
                                                        v[-1]])))}


def _runs_below(starts: np.ndarray, values: np.ndarray, step: int) -> list[list[int]]:
    """``[from, to)`` of each stretch of consecutive cells under ``BELOW`` lasting a day or
    more (cells without a value end a stretch)."""
    out: list[list[int]] = []
    a = None
    prev = None
    for t, v in zip(starts.tolist(), values.tolist()):
        under = v == v and v < BELOW
        if under and a is not None and t == prev + step:
            prev = t
            continue
        if a is not None and prev + step - a >= DAY:
            out.append([a, prev + step])
        a, prev = (t, t) if under else (None, None)
    if a is not None and prev + step - a >= DAY:
        out.append([a, prev + step])
    return out


def _exact(name: str) -> str:
    """A host name as a GLOB pattern matching only itself."""
    return "".join(f"[{c}]" if c in "*?[" else c for c in name)


def host_values(stores: Sequence[Store], selection: Selection, step: int, statistic: str,
                processes: int = 1) -> dict[str, dict[tuple[str, str], np.ndarray]]:
    """Each host's own values of ``statistic`` at ``step``, per (target, op): a (host, its
    files) at a time, the hosts split between ``processes`` (``store.forking``)."""
    from slowdown.analysis.store import forking

    where: dict[str, list[int]] = {}
    for f in sorted({(f[3], f[2]) for f in series.selected_series(stores, selection)}):
        where.setdefault(f[0], []).append(f[1])
    hosts = sorted(where)
    n = max(1, min(processes, len(hosts)))
    groups = [hosts[len(hosts) * i // n:len(hosts) * (i + 1) // n] for i in range(n)]

    def of(group: list[str]) -> dict:
        from slowdown.analysis.report.data import statistic_values

        out = {}
        for host in group:
            mine = Selection((_exact(host),), selection.targets, selection.ops,
                             selection.start, selection.end, selection.pairs)
            cells = history_by_file.histories([stores[i] for i in where[host]], mine, [step],
                                              [statistic], moments=False)[0]
            values = statistic_values(cells, statistic)
            out[host] = {pair: values[part] for pair, part in series.runs(cells).items()}
        return out

    found: dict = {}
    for part in forking.run_all([g for g in groups if g], of):
        found.update(part)
    return found


def figures(target: str, ops: Sequence[str], step: int, statistic: str, at_step: dict,
            by_host: dict[str, dict], expected, start: int, end: int) -> dict:
    """The long figures of one target (see the module docstring); ``at_step``: the merged
    cells at ``step`` and ``TREND_STEP``; ``expected(cells, statistic, step)``: the expected
    value of each cell."""
    from slowdown.analysis.report.data import Grid, _dense, floats, statistic_values
    from slowdown.analysis.stats.trends import analyse

    cells, hourly = at_step[step], at_step[TREND_STEP]
    runs, hour_runs = series.runs(cells), series.runs(hourly)
    grid = Grid(start, end, step)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = statistic_values(cells, statistic) / expected(cells, statistic, step)
        hour_ratio = statistic_values(hourly, statistic) / expected(hourly, statistic,
                                                                    TREND_STEP)
    out_ops = []
    for op in ops:
        part = runs.get((target, op))
        if part is None:
            continue
        starts = cells.start[part]
        stats = {s: statistic_values(cells, s)[part] for s in LONG_STATS}
        item = {"op": op, "timeline": {**grid.json(), "stats": {
            s: floats(_dense(grid, starts, v)) for s, v in stats.items()}},
            "boxes": {s: box(v) for s, v in stats.items()},
            "slowdown": floats(_dense(grid, starts, ratio[part])),
            "below": _runs_below(starts, ratio[part], step),
            "hosts": [{"host": h, "box": box(v[(target, op)])}
                      for h, v in sorted(by_host.items()) if (target, op) in v]}
        hp = hour_runs.get((target, op))
        item.update(_rhythm(hourly, hour_ratio, hp))
        result = None if hp is None else analyse(hourly.start[hp],
                                                 hourly.quantiles[TREND_STAT][hp])
        item["changes"] = [] if result is None else [
            {"at": c.at, "before": c.before, "after": c.after, "factor": round(c.factor, 4),
             "sure": round(c.sure, 3)} for c in result.changes]
        item["episodes"] = [] if result is None else [
            {"at": e.at, "until": e.until, "factor": round(e.factor, 4)}
            for e in result.episodes]
        item["cycles"] = [] if result is None else [
            {"kind": c.kind, "peak": c.peak, "trough": c.trough,
             "factor": round(c.factor, 4), "explained": round(c.explained, 3)}
            for c in result.cycles]
        out_ops.append(item)
    return {"step": step, "statistic": statistic, "trend_statistic": TREND_STAT,
            "start": start, "end": end, "below": BELOW, "ops": out_ops}


def _rhythm(hourly: series.Cells, ratio: np.ndarray, part: slice | None) -> dict:
    """The median slowdown by hour of the day (UTC) and by day of the week (0: Monday)."""
    from slowdown.analysis.report.data import floats

    if part is None:
        return {"by_hour": [None] * 24, "by_weekday": [None] * 7}
    t, r = hourly.start[part], ratio[part]
    ok = np.isfinite(r)
    t, r = t[ok], r[ok]
    hour, weekday = (t % DAY) // HOUR, (t // DAY + 3) % 7  # 1970-01-01 was a Thursday
    return {"by_hour": floats([np.median(r[hour == h]) if (hour == h).any() else np.nan
                               for h in range(24)]),
            "by_weekday": floats([np.median(r[weekday == d]) if (weekday == d).any()
                                  else np.nan for d in range(7)])}


__all__ = ["BELOW", "LONG_FROM", "LONG_STATS", "LONG_STEP", "TREND_STEP", "box", "figures",
           "host_values", "is_on"]
