"""Which server served each op, named in the worker after the op returned, outside its timing.

The resolver is the one for the workspace's filesystem type, as ``/proc/self/mountinfo``
names the mount it is on (``analysis/store/filesystem.py``; ``fuse.glusterfs``, ``ceph``,
``lustre``), chosen at the first op that says where it went. Every ``REFRESH_EVERY`` seconds
the type is looked at again (a target mounted anew, or another filesystem there) and the
resolver's cache dropped (a layout or a cluster map that changed). A lookup runs in the
worker: it may block as the filesystem does, and then shows as the op just returned still in
flight, as any wait of the worker does; the op's latency is its timed call alone.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from slowdown.analysis.store.filesystem import filesystem_of
from slowdown.analysis.store.server_records import UNKNOWN
from slowdown.probe.probes import Place
from slowdown.probe.servers import REFRESH_EVERY, Resolver, for_mount


class Where:
    """One workspace's resolver, chosen by the filesystem it is on, refreshed at most every
    ``REFRESH_EVERY`` seconds."""

    def __init__(self, workspace: Path, clock: Callable[[], float] = time.monotonic,
                 refresh_every: float = REFRESH_EVERY) -> None:
        self.workspace = workspace
        self._clock = clock
        self._every = refresh_every
        self._resolver: Resolver | None = None
        self._fstype: str | None = None
        self._at = 0.0  # when the resolver was chosen or refreshed (monotonic)

    def _current(self) -> Resolver:
        now = self._clock()
        if self._resolver is not None and now - self._at < self._every:
            return self._resolver
        found = filesystem_of(self.workspace)
        fstype = found.fstype if found is not None else None
        if self._resolver is not None and fstype == self._fstype:
            self._resolver.refresh()
        else:
            self._resolver, self._fstype = for_mount(self.workspace, fstype), fstype
        self._at = now
        return self._resolver

    def server(self, op: str, place: Place | None) -> str:
        """The server that served ``op`` at ``place``; ``UNKNOWN`` without a place or when
        the resolver cannot tell (or fails: it must not, but an op is never lost for it)."""
        if place is None:
            return UNKNOWN
        try:
            return self._current().server(op, place.path, place.offset) or UNKNOWN
        except Exception:
            return UNKNOWN
