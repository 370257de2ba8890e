"""The live state: a small JSON file the service rewrites in place once a second beside its
database (ticks, ops in flight, errors), read by ``slowdown``, ``watch`` and ``alerts``."""

from __future__ import annotations

import json
import time
from pathlib import Path


def live_path(database: Path) -> Path:
    """Where the live state of the service writing ``database`` is: beside it."""
    return database.with_name(database.name + ".live.json")


def read_live(database: Path, tries: int = 5) -> dict | None:
    """The live state the service publishes beside ``database``, or None. The service
    overwrites it in place once a second: a read that meets a write half done reads again."""
    path = live_path(database)
    for attempt in range(tries):
        try:
            return json.loads(path.read_bytes())
        except OSError:
            return None
        except ValueError:
            if attempt + 1 < tries:
                time.sleep(0.01)
    return None
