"""The benchmarks' databases, built once and kept: each with its info beside it (``<db>.json``),
to reuse while the info says it is the data asked for."""

from __future__ import annotations

import json
from pathlib import Path


def info_path(db: Path) -> Path:
    return Path(str(db) + ".json")


def kept_info(db: Path, rebuild: bool) -> dict:
    """The info kept beside ``db``; ``{}`` when there is none, it is unreadable or ``rebuild``."""
    meta = info_path(db)
    if rebuild or not db.exists() or not meta.exists():
        return {}
    try:
        return json.loads(meta.read_text())
    except ValueError:
        return {}


def keep_info(db: Path, info: dict) -> None:
    info_path(db).write_text(json.dumps(info, indent=1) + "\n")
