"""Which server served an op: one resolver per kind of filesystem, behind one interface.

A probe reports where each op went (a file and an offset, or an object); a resolver maps that
to the server(s) that served it: a GlusterFS brick, a Ceph OSD or MDS rank, a Lustre OST or
MDT. It runs in the worker, after the timed call and outside it (a lookup may hang as the
filesystem does, and the service must never wait on one), and caches what it learns: a file's
layout is asked once, and again only when ``refresh`` says the layout or the cluster map may
have changed (at most hourly). Where it cannot tell, the server is ``UNKNOWN``, never a guess.

A resolver is one module here with a ``Resolver`` subclass named ``RESOLVER``, and its
module's line in ``BUILTIN``; ``for_mount`` picks the first whose ``fstypes`` hold the
target's filesystem type (as /proc/self/mountinfo names it). Imports ``layout`` and the
analysis rooms only (``probe/probes``' worker imports this room, never the reverse).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import ClassVar

from slowdown.analysis.store.server_records import UNKNOWN

# The modules of this release's resolvers.
BUILTIN: tuple[str, ...] = ("slowdown.probe.servers.gluster", "slowdown.probe.servers.ceph",
                            "slowdown.probe.servers.lustre")

REFRESH_EVERY = 3600.0  # seconds: a cached layout or map is asked again at most this often


class Resolver:
    """Maps where an op went on one target to the server that served it.

    ``server`` returns a name that says what it is to a storage team (``brick
    host:/path``, ``osd.3``, ``mds.0``, ``OST0007``), or ``UNKNOWN``. It may block on the
    filesystem (it runs in the worker, outside the timed call) and must not raise: a lookup
    that fails gives ``UNKNOWN``. ``refresh`` drops what may be stale; the worker calls it at
    most every ``REFRESH_EVERY`` seconds, and a resolver may drop its cache sooner when it
    learns the map changed.
    """

    fstypes: ClassVar[tuple[str, ...]] = ()

    def __init__(self, target: Path) -> None:
        self.target = target

    def server(self, op: str, path: str, offset: int | None) -> str:
        """The server that served ``op`` on ``path`` (at ``offset`` for a data op)."""
        raise NotImplementedError

    def refresh(self) -> None:
        """Forget cached layouts and maps, so the next lookups ask again."""


class Unknown(Resolver):
    """Any other filesystem: one server, ``unknown``."""

    def server(self, op: str, path: str, offset: int | None) -> str:
        return UNKNOWN


_REGISTRY: list[type[Resolver]] = []


def register(cls: type[Resolver]) -> type[Resolver]:
    """Add a resolver class (the built-in ones are added on first use)."""
    if cls not in _REGISTRY:
        _REGISTRY.append(cls)
    return cls


def unregister(cls: type[Resolver]) -> None:
    """Take an added resolver class out (a test's, when the test ends)."""
    if cls in _REGISTRY:
        _REGISTRY.remove(cls)


def registered() -> list[type[Resolver]]:
    """The resolver classes, built-in ones first."""
    if not getattr(registered, "_loaded", False):
        for name in BUILTIN:
            register(importlib.import_module(name).RESOLVER)
        registered._loaded = True  # type: ignore[attr-defined]
    return list(_REGISTRY)


def for_mount(target: Path, fstype: str | None) -> Resolver:
    """The resolver for a target on a filesystem of type ``fstype`` (``Unknown`` if none)."""
    for cls in registered():
        if fstype is not None and fstype in cls.fstypes:
            return cls(target)
    return Unknown(target)


__all__ = ["BUILTIN", "REFRESH_EVERY", "UNKNOWN", "Resolver", "Unknown", "for_mount",
           "register", "registered", "unregister"]
