"""The histogram benchmark's report: runs combined into medians, the Markdown table with each
goal, the spread over runs and the environment measured in."""

from __future__ import annotations

import datetime
import os
import platform
import sqlite3
import statistics
from pathlib import Path
from typing import Any

import numpy as np

from bench.histogram_data import (
    Sizes,
    ddsketch,
    ddsketch_proto,
)

TABLE_HEAD = "| what | ours | anchor | ratio | goal | met? |"


def fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "n/a"
    if unit == "B":
        return f"{value:,.0f} B"
    for scale, name in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us")):
        if value >= scale:
            return f"{value / scale:.3g} {name}"
    return f"{value * 1e9:.3g} ns"


def combine(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median of the runs' medians per cell; the ratio is the median of the runs' ratios."""
    rows = []
    for cells in zip(*(run["rows"] for run in runs)):
        first = dict(cells[0])
        for field in ("ours", "anchor", "ratio"):
            values = [c[field] for c in cells if c[field] is not None]
            first[field] = statistics.median(values) if values else None
            first[field + "_range"] = (min(values), max(values)) if values else None
        rows.append(first)
    errors = {k: statistics.median(r["errors"][k] for r in runs) for k in runs[0]["errors"]}
    return {
        "rows": rows, "errors": errors, "runs": len(runs),
        "table_bytes": runs[0]["table_bytes"],
        "write_p99": statistics.median(r["write_p99"] for r in runs),
        "trimmed": runs[0]["trimmed"], "sample_blob_mean": runs[0]["sample_blob_mean"],
    }


def table(result: dict[str, Any]) -> str:
    lines = [TABLE_HEAD, "|---|---:|---:|---:|---:|---|"]
    for r in result["rows"]:
        goal = met = ""
        if r["goal"] is not None:
            goal = "< " + fmt(r["goal"], r["unit"])
            met = "yes" if r["ours"] < r["goal"] else "**NO**"
        ratio = "" if r["ratio"] is None else f"{r['ratio']:.2f}"
        lines.append(f"| {r['what']} | {fmt(r['ours'], r['unit'])} | "
                     f"{fmt(r['anchor'], r['unit'])} | {ratio} | {goal} | {met} |")
    return "\n".join(lines)


def spread(result: dict[str, Any]) -> str:
    lines = ["| key | ours, min..max of runs | anchor, min..max | ratio, min..max |",
             "|---|---:|---:|---:|"]
    for r in result["rows"]:
        cells = []
        for field in ("ours", "anchor", "ratio"):
            span = r.get(field + "_range")
            unit = r["unit"] if field != "ratio" else ""
            if span is None:
                cells.append("")
            elif field == "ratio":
                cells.append(f"{span[0]:.2f}..{span[1]:.2f}")
            else:
                cells.append(f"{fmt(span[0], unit)}..{fmt(span[1], unit)}")
        lines.append(f"| {r['key']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def environment() -> str:
    parts = [
        f"date {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
        f"Python {platform.python_version()}", f"numpy {np.__version__}",
        f"SQLite {sqlite3.sqlite_version}",
        f"ddsketch {getattr(ddsketch, '__version__', '?')}" if ddsketch else "ddsketch absent",
    ]
    if ddsketch_proto is not None:
        import google.protobuf

        parts.append(f"protobuf {google.protobuf.__version__}")
    else:
        parts.append("protobuf absent (no DDSketch sizes or decode)")
    parts.append(f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}")
    return "; ".join(parts)


def report(result: dict[str, Any], sizes: Sizes, directory: Path) -> str:
    errors = result["errors"]
    notes = [
        f"runs: {result['runs']}; repeats per timing: {sizes.repeats} (median); database in "
        f"{directory}",
        "quantile relative error vs exact, max over q50/q95/q99 of the merged minutes: ours "
        f"{errors['ours']:.4%}" + (f", DDSketch {errors['anchor']:.4%}" if "anchor" in errors
                                   else ""),
        "database bytes per row by b-tree (those above 0.5 B): " + ", ".join(
            f"{name} {size:.1f}" for name, size in result["table_bytes"].items() if size > 0.5),
        f"Store.write of one minute, p99: {fmt(result['write_p99'], 's')}",
    ]
    if result["trimmed"]:
        mean, n = result["trimmed"]
        notes.append(
            f"DDSketch protobuf with its bins cut to the occupied key range (ddsketch-py pads "
            f"its dense store in 128-bin chunks): mean {mean:,.0f} B over the first {n:,} "
            f"records, whose own encoding averages {result['sample_blob_mean']:,.0f} B")
    out = [environment(), "", table(result), ""]
    out += [f"- {n}" for n in notes]
    if result["runs"] > 1:
        out += ["", spread(result)]
    return "\n".join(out)
