"""Warnings about where a configuration puts the fleet's copies (``check-config``).

Copies published under a target's path, or read from there, sit on the filesystem that is
probed: when it fails, the fleet cannot read them, just when the verdict is wanted (it then
says so, docs/FLEET.md, but has no peers' numbers). Not an error (a small site may have no
other shared filesystem), a warning. Paths are compared resolved (symbolic links followed),
in a child process with a deadline: resolving touches each directory on the way, and a
hung filesystem must not hang ``check-config``; past the deadline they are compared as
written, as are at once the paths under one already known not to answer.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from slowdown.analysis.config.model import Config
from slowdown.analysis.stats.fleet_copies import literal_directory, under
from slowdown.analysis.store.bounded import Unanswered, call_bounded

RESOLVE_TIMEOUT = 2.0  # seconds to resolve the paths before they are compared as written


def copies_warnings(config: Config, unanswered: Sequence[str] = ()) -> list[str]:
    """One line per ``[publish] dir`` or ``[fleet] databases`` glob under a target's path.
    ``unanswered``: paths that did not answer a moment ago (a hung filesystem)."""
    places = []
    if config.publish is not None:
        places.append(("[publish] dir", str(config.publish.dir), str(config.publish.dir),
                       "no node can read this copy"))
    if config.fleet is not None:
        places += [("[fleet] databases", glob, literal_directory(glob),
                    "the verdict cannot read the copies")
                   for glob in config.fleet.databases]
    if not places:
        return []
    targets = [(t.name, str(t.path)) for t in config.targets]
    resolved = _resolved([d for _, _, d, _ in places] + [p for _, p in targets], unanswered)
    directories, paths = resolved[:len(places)], resolved[len(places):]
    lines = []
    for (key, shown, _, loss), directory in zip(places, directories):
        for (name, path), real in zip(targets, paths):
            if under(directory, real):
                lines.append(f"{key} {shown} lies under target {name}'s path {path}: when "
                             f"that filesystem fails, {loss}; use a filesystem that no target "
                             "probes, or Prometheus (docs/FLEET.md)")
                break
    return lines


def _resolved(paths: Sequence[str], unanswered: Sequence[str]) -> list[str]:
    """The paths with symbolic links resolved, or as written (absolute and normal) when
    that takes longer than ``RESOLVE_TIMEOUT`` or they lie under an ``unanswered`` path."""
    written = [os.path.normpath(os.path.abspath(os.path.expanduser(p))) for p in paths]
    hung = [os.path.normpath(os.path.abspath(p)) for p in unanswered]
    asked = [p for p in written if not any(under(p, h) for h in hung)]
    try:
        found = dict(zip(asked, call_bounded(
            "check-config paths", lambda note: [os.path.realpath(p) for p in asked],
            RESOLVE_TIMEOUT))) if asked else {}
    except Unanswered:
        return written
    return [found.get(p, p) for p in written]


__all__ = ["copies_warnings"]
