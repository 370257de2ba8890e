"""GlusterFS: the brick (or the replica set of bricks) that holds a file, from the client.

A GlusterFS fuse client answers the virtual extended attribute ``glusterfs.pathinfo`` of a
file with the bricks the file lives on, as its translators see them::

    (<DISTRIBUTE:v-dht> <POSIX(/b4/brick):host:/b4/brick/d1/file-1>)
    (<DISTRIBUTE:v-dht> (<REPLICATE:v-replicate-0> <POSIX(/b2/brick):host:/b2/brick/f>
                                                   <POSIX(/b1/brick):host:/b1/brick/f>))

A file lives on one distribute subvolume (DHT places it by the hash of its name), so its
bricks are one server set: a plain brick, or a replica (or disperse) set, named by its bricks
``host:/brick/path`` sorted and joined with ``+``. Every op on the file, data or metadata,
goes to that set, so the offset does not matter (except on a sharded volume, whose blocks past
the first shard live elsewhere, in ``/.shard``: not handled yet, docs/PROBES.md).

Why ``glusterfs.pathinfo`` before ``trusted.glusterfs.pathinfo``: the kernel answers a
``trusted.*`` name only to a process with CAP_SYS_ADMIN (ENODATA to any other, as if there
were none), and the packaged service runs as an unprivileged user. FUSE passes a name with no
namespace to the client as it is, and GlusterFS's distribute translator answers both names
the same (measured on GlusterFS 10.3: ``glusterfs.pathinfo`` as uid 65534 works,
``trusted.glusterfs.pathinfo`` gives ENODATA). A directory (its layout spans every
subvolume), a file gone (the md-delete's object, unless asked before), any error or an
answer without a brick: ``unknown``.
"""

from __future__ import annotations

import os
import re

from slowdown.analysis.store.server_records import UNKNOWN
from slowdown.probe.servers import Resolver

NAMES = ("glusterfs.pathinfo", "trusted.glusterfs.pathinfo")  # unprivileged first
_BRICK = re.compile(r"<POSIX\(([^()<>]+)\):([^:<>()\s]+):")
MAX_CACHED = 100_000  # paths (about 20 MiB at most); an hour of ticks asks about 7,200


def bricks_of(pathinfo: str) -> str:
    """The server set of a file's ``pathinfo``: its bricks as ``host:/path``, sorted, joined
    with ``+``; ``UNKNOWN`` for a directory's answer (every subvolume) or none."""
    if "-dht-layout" in pathinfo:
        return UNKNOWN
    bricks = sorted({f"{host}:{root}" for root, host in _BRICK.findall(pathinfo)})
    return "+".join(bricks) if bricks else UNKNOWN


class GlusterResolver(Resolver):
    """Asks the client once per file where it lives; the answer holds until ``refresh``."""

    fstypes = ("fuse.glusterfs",)

    def __init__(self, target) -> None:
        super().__init__(target)
        self._cache: dict[str, str] = {}
        self._name: str | None = None  # the attribute name that answered here

    def server(self, op: str, path: str, offset: int | None) -> str:
        found = self._cache.get(path)
        if found is None:
            found = self._ask(path)
            if found != UNKNOWN:  # a file not there yet, or gone, is asked again later
                if len(self._cache) >= MAX_CACHED:
                    self._cache.clear()
                self._cache[path] = found
        return found

    def _ask(self, path: str) -> str:
        for name in (self._name,) if self._name else NAMES:
            try:
                value = os.getxattr(path, name)
            except OSError:
                continue
            except Exception:  # never raise: a lookup that fails gives unknown
                return UNKNOWN
            self._name = name
            return bricks_of(value.rstrip(b"\0").decode("utf-8", "replace"))
        return UNKNOWN

    def refresh(self) -> None:
        self._cache.clear()


RESOLVER = GlusterResolver
