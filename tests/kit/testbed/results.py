"""What the nodes measured, read the way a user reads it: ``slowdown rebaseline`` from a quiet
period, then ``slowdown history`` per minute (the 1m window), per node, op and statistic."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
from pathlib import Path

Minutes = dict[tuple[str, int], float]  # (op, minute start) -> slowdown


def slowdown(*args: str, timeout: float = 120) -> str:
    proc = subprocess.run(["slowdown", *args], capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"slowdown {' '.join(args)} failed ({proc.returncode}): "
                           f"{proc.stderr.strip()}")
    return proc.stdout


def at(t: float) -> str:
    return "@" + str(int(t))


def rebaseline(config: Path, start: float, end: float, reason: str) -> None:
    """A baseline from [start, end) of the node's own database."""
    slowdown("rebaseline", "--config", str(config), "--reason", reason,
             "--from", at(start), "--to", at(end))


def per_minute(config: Path, start: float, end: float, stat: str) -> tuple[Minutes, dict]:
    """Slowdown of ``stat`` per (op, minute) in [start, end), and the raw rows."""
    text = slowdown("history", "--config", str(config), "--since", at(start), "--until",
                    at(end), "--stat", stat, "--format", "json")
    doc = json.loads(text)
    found: Minutes = {}
    rows = doc["rows"]
    for row in rows:
        value = row.get(f"slowdown_{stat}")
        if value is not None:
            found[(row["op"], _epoch(row["time"]))] = float(value)
    return found, doc


def _epoch(value: object) -> int:
    if isinstance(value, (int, float)):
        return int(value)
    return int(dt.datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp())
