"""The start state: a small JSON file beside the database, ``<database>.start.json``, that
``slowdown-probe`` keeps from the moment ``prepare`` or ``run`` begins until it ends, so that
readers tell what is going on from the first instant, before the database and the live state
exist: "preparing" while the workspaces are made, "collecting" while the service starts.

It names its process (PID, and the machine's boot id, so that a reader on this machine can
tell whether that process still runs); a file whose process is gone (a kill -9) is
ignored, and replaced by the next start. The same PID turns a live state that still looks
fresh into a stopped one at once when the service that wrote it is gone. The writer
(``write_start``, ``clear_start``) never replaces a file it cannot read as one of these, and
removes only its own.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from slowdown.analysis.atomic_write import replace_whole
from slowdown.analysis.machine import boot_id

PREPARING = "preparing"  # the workspaces are being made (prepare, run --prepare)
STARTING = "starting"  # the service starts: no live state yet
LIVE_FRESH = 5.0  # seconds: a live state older than this belongs to a stopped service


def start_path(database: Path) -> Path:
    """Where the start state of the process about to write ``database`` is: beside it."""
    return database.with_name(database.name + ".start.json")


def read_start(database: Path) -> dict | None:
    """The start state beside ``database`` as written (None: none, or not one of ours)."""
    try:
        state = json.loads(start_path(database).read_bytes())
    except (OSError, ValueError):
        return None
    ok = isinstance(state, dict) and state.get("what") in (PREPARING, STARTING) and \
        isinstance(state.get("pid"), int) and isinstance(state.get("since"), (int, float))
    return state if ok else None


def running(state: dict | None) -> bool:
    """Whether the process a start state names still runs, on this machine, this boot, and
    is slowdown's (a PID taken again by another program counts as gone)."""
    if not state or not state.get("boot") or state.get("boot") != boot_id():
        return False
    try:
        os.kill(state["pid"], 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: it exists
    try:
        with open(f"/proc/{state['pid']}/cmdline", "rb") as f:
            return b"slowdown" in f.read()
    except OSError:
        return True  # cannot tell (hidepid): count it as running


def live_now(database: Path, live: dict | None, now: float) -> dict | None:
    """The service's state as a reader should take it, from its live state and the start
    state beside ``database``: while the running process has written no live state of this
    run yet (it prepares, or it starts), a live state made of the start state (``preparing``
    set while it prepares); a live state whose writer is known gone, marked stopped."""
    started = read_start(database)
    if started is None:
        return live
    if running(started):
        return not_yet(started, live, now) or live
    if live is not None and "stopped" not in live and live.get("pid") == started["pid"] and \
            started.get("boot") == boot_id():  # its process ended without saying so
        return {**live, "stopped": live.get("updated", now)}
    return live


def not_yet(started: dict | None, live: dict | None, now: float) -> dict | None:
    """The live state made of a running process's start state, when it has written no live
    state of this run yet (None otherwise: its own live state tells, or another service's
    that runs; a prepare beside a running service tells of nothing)."""
    if not running(started):
        return None
    other = live is not None and live.get("pid") != started["pid"]  # type: ignore[index]
    if other and "stopped" not in live and now - live.get("updated", 0) <= LIVE_FRESH:
        return None
    if live is None or float(live.get("started") or 0) < started["since"]:  # type: ignore
        return _as_live(started, now)  # type: ignore[arg-type]
    return None


def _as_live(started: dict, now: float) -> dict:
    """A live state (``analysis/store/live.py``'s keys) of a process that is not probing yet."""
    return {
        **({"preparing": started.get("target")} if started["what"] == PREPARING else {}),
        "host": started.get("host"),
        "pid": started["pid"],
        "started": started["since"],
        "updated": now,
        "interval": started.get("interval") or 1.0,
        "targets": {name: {} for name in started.get("targets", [])},
    }


def write_start(database: Path, state: dict) -> bool:
    """Write ``state`` (with this process's PID and boot id) whole, by a rename; False when
    a start state of another running process is there, or a file that is not one (left
    as it is). OSError when the directory cannot be written."""
    path = start_path(database)
    there = read_start(database)
    if path.exists() and (there is None or (there["pid"] != os.getpid() and running(there))):
        return False
    data = json.dumps({**state, "pid": os.getpid(), "boot": boot_id()}).encode()
    replace_whole(path, data, mode=0o644)
    return True


def clear_start(database: Path) -> None:
    """Remove the start state if it is this process's (another's, or none, is left)."""
    there = read_start(database)
    if there is not None and there["pid"] == os.getpid() and there.get("boot") == boot_id():
        with contextlib.suppress(OSError):
            start_path(database).unlink()


__all__ = ["LIVE_FRESH", "PREPARING", "STARTING", "clear_start", "live_now", "not_yet",
           "read_start", "running", "start_path", "write_start"]
