"""CephFS: a data op's OSD (the primary of its object's placement group) and a metadata op's
MDS rank, asked as the mount's own client and cached.

Data: the file's ``ceph.file.layout`` and inode give the object of an offset
(``ceph_placement``); the object's PG is computed exactly (Ceph's hash, checked against
each answer); the PG's acting primary (reads and writes go to it) is asked once, with
``osd map`` for one object of each PG the file touches, all in one batch when the file is
first seen. The map is dropped on ``refresh`` and when the osdmap epoch changes (asked at
most every ``EPOCH_EVERY`` seconds, with the MDS map's). Metadata: with one rank, ``mds.0``;
with several, the rank an export pin (``ceph.dir.pin``) on the directory or an
ancestor within the mount names; otherwise ``unknown`` (the balancer moves unpinned trees).

The monitors are never waited for: a lookup that needs them starts one question in a helper
process and says ``unknown`` now; a later lookup collects the answer (one question in
flight at a time). So a lookup costs a dictionary look-up, or a process start, and blocks
only on the filesystem, for a path not seen yet (``stat``, ``getxattr``). Anything that
fails is ``unknown``; after a failure the monitors are asked again only after ``BACKOFF``
seconds (a cluster without monitors: one helper of at most 10 s every 5 minutes).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import time
from typing import ClassVar

from slowdown.analysis.store.server_records import UNKNOWN
from slowdown.probe.layout.names import BLOCK_SIZE
from slowdown.probe.servers import Resolver
from slowdown.probe.servers.ceph_client import CephClient, CephError, Pending, client_of
from slowdown.probe.servers.ceph_placement import (
    HASH_RJENKINS,
    FileLayout,
    object_name,
    object_number,
    object_numbers,
    parse_layout,
    pg_of,
)

EPOCH_EVERY = 120.0  # seconds between looks at the osdmap and MDS map epochs
BACKOFF = 300.0  # seconds without asking the monitors after they failed to answer
MAX_OBJECTS = 1 << 20  # a file's objects enumerated to find its PGs (4 TiB of 4 MiB objects)


class CephResolver(Resolver):
    """``osd.N`` for data ops, ``mds.N`` for metadata ops on a CephFS mount."""

    fstypes: ClassVar[tuple[str, ...]] = ("ceph", "fuse.ceph-fuse", "fuse.ceph")

    def __init__(self, target) -> None:
        super().__init__(target)
        self.asked = 0  # helper runs (each one process, one monitor session): the cost
        self.failures = 0  # helper runs that found no answer
        self._job: tuple[str, Pending, object] | None = None
        self.refresh()

    def refresh(self) -> None:
        self._drop_job()
        self._client: CephClient | None = None
        self._files: dict[str, tuple[int, FileLayout, int]] = {}
        self._pools: dict[str, tuple[int, str, int, int]] = {}  # id, name, pg_num, hash
        self._primary: dict[str, int] = {}  # PG (or object, if the hash is not Ceph's) -> OSD
        self._mapped: set[str] = set()  # files whose every PG was asked for in this map
        self._by_object = False
        self._osd_epoch: int | None = None
        self._mds_epoch: int | None = None
        self._max_mds: int | None = None
        self._ranks: dict[str, int | None] = {}
        self._checked = -EPOCH_EVERY
        self._failed = -BACKOFF

    def server(self, op: str, path: str, offset: int | None) -> str:
        try:
            self._collect()
            if op.startswith("md-"):
                return self._mds(path)
            if offset is None:
                return UNKNOWN
            return self._osd(path, offset)
        except (CephError, OSError, ValueError, KeyError, TypeError, json.JSONDecodeError):
            return UNKNOWN

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the question in flight (for a caller that may
        block, as a test); True when none is left."""
        if self._job is not None:
            self._job[1].done(wait=timeout)
            self._collect()
        return self._job is None

    # The monitors, asked in the background, one question at a time.
    def _start(self, kind: str, commands: list[dict], context: object = None) -> None:
        if self._job is not None or time.monotonic() - self._failed < BACKOFF:
            return
        try:
            if self._client is None:
                self._client = client_of(self.target)
            self._job = (kind, self._client.start(commands), context)
            self.asked += 1
        except CephError:
            self._failed, self.failures = time.monotonic(), self.failures + 1
            raise

    def _collect(self) -> None:
        if self._job is None or not self._job[1].done():
            return
        kind, pending, context = self._job
        self._job = None
        try:
            answers = pending.result()
            if kind == "check":
                self._got_check(answers)
            elif kind == "pools":
                self._got_pools(answers)
            else:
                self._got_map(answers, context)  # type: ignore[arg-type]
        except (CephError, ValueError, KeyError, TypeError):  # JSONDecodeError is a ValueError
            self._failed, self.failures = time.monotonic(), self.failures + 1

    def _drop_job(self) -> None:
        job, self._job = getattr(self, "_job", None), None
        if job is not None:
            job[1].proc.kill()
            job[1].done(wait=5)
            with contextlib.suppress(CephError):
                job[1].result()

    def _due(self) -> None:
        """Look at the osdmap and MDS map epochs when it is time."""
        if time.monotonic() - self._checked >= EPOCH_EVERY:
            self._start("check", [{"prefix": "osd stat", "format": "json"},
                                  {"prefix": "mds stat", "format": "json"}])

    def _got_check(self, answers: list[tuple[int, str, str]]) -> None:
        """Drop what a newer osdmap or MDS map may have changed."""
        osd, mds = answers
        self._checked = time.monotonic()
        if osd[0] == 0:
            epoch = json.loads(osd[1])["epoch"]
            if epoch != self._osd_epoch:
                self._forget_map()
                self._pools.clear()
                self._osd_epoch = epoch
        if mds[0] == 0:
            fsmap = json.loads(mds[1]).get("fsmap", {})
            if fsmap.get("epoch") != self._mds_epoch:
                self._ranks.clear()
                self._mds_epoch = fsmap.get("epoch")
                self._max_mds = self._ranks_of(fsmap)

    def _ranks_of(self, fsmap: dict) -> int | None:
        """How many ranks the mount's filesystem has (by its name, else the default one)."""
        wanted = self._client.fs if self._client else ""
        for fs in fsmap.get("filesystems", []):
            mdsmap = fs.get("mdsmap", {})
            if (wanted and mdsmap.get("fs_name") == wanted) or \
                    (not wanted and fs.get("id") == fsmap.get("default_fscid")):
                ranks = mdsmap.get("in")  # the ranks that exist now; max_mds is the wish
                return len(ranks) if isinstance(ranks, list) and ranks else \
                    int(mdsmap.get("max_mds", 0)) or None
        return None

    # Data ops.
    def _osd(self, path: str, offset: int) -> str:
        self._due()
        ino, layout, size = self._file(path)
        pool = self._pools.get(layout.pool)
        if pool is None:
            self._start("pools", [{"prefix": "osd dump", "format": "json"}])
            return UNKNOWN
        pool_id, pool_name, pg_num, hashing = pool
        self._by_object = self._by_object or hashing != HASH_RJENKINS
        names = [object_name(ino, n) for n in object_numbers(layout, offset, BLOCK_SIZE)]
        keys = [self._key(pool_id, pg_num, n, layout) for n in names]
        if any(k not in self._primary for k in keys):
            self._map(path, (ino, layout, size), (pool_id, pool_name, pg_num), names)
            return UNKNOWN
        primaries = {self._primary[k] for k in keys}
        if min(primaries) < 0:
            return UNKNOWN
        return "+".join(f"osd.{p}" for p in sorted(primaries))

    def _forget_map(self) -> None:
        self._primary.clear()
        self._mapped.clear()

    def _key(self, pool_id: int, pg_num: int, name: str, layout: FileLayout) -> str:
        if self._by_object:
            return f"{pool_id}/{layout.pool_namespace}/{name}"
        return pg_of(pool_id, pg_num, name, layout.pool_namespace)

    def _file(self, path: str) -> tuple[int, FileLayout, int]:
        if path not in self._files:
            st = os.stat(path)
            layout = parse_layout(os.getxattr(path, "ceph.file.layout").decode())
            self._files[path] = (st.st_ino, layout, st.st_size)
        return self._files[path]

    def _got_pools(self, answers: list[tuple[int, str, str]]) -> None:
        (ret, out, status), = answers
        if ret != 0:
            raise CephError(f"osd dump: {status or ret}")
        dump = json.loads(out)
        for p in dump["pools"]:
            found = (int(p["pool"]), p["pool_name"], int(p["pg_num"]),
                     int(p.get("object_hash", HASH_RJENKINS)))
            self._pools[p["pool_name"]] = self._pools[str(p["pool"])] = found
        if self._osd_epoch != dump.get("epoch"):
            self._forget_map()
            self._osd_epoch = dump.get("epoch")

    def _map(self, path: str, file: tuple[int, FileLayout, int], pool: tuple[int, str, int],
             names: list[str]) -> None:
        """One batch: ``osd map`` for one object of each PG of the file not known yet, the
        first time (its objects hashed once per map); ``names`` only after that, or when
        PGs cannot be computed."""
        if self._job is not None or time.monotonic() - self._failed < BACKOFF:
            return  # a question in flight, or a back-off: nothing to hash now
        ino, layout, size = file
        pool_id, pool_name, pg_num = pool
        wanted: dict[str, str] = {}  # key -> an object in it
        if not self._by_object and size > 0 and path not in self._mapped:
            self._mapped.add(path)
            last = object_number(layout, size - 1)
            count = min(MAX_OBJECTS, (last // layout.stripe_count + 1) * layout.stripe_count)
            for number in range(count):
                name = object_name(ino, number)
                wanted.setdefault(self._key(pool_id, pg_num, name, layout), name)
        for name in names:
            wanted.setdefault(self._key(pool_id, pg_num, name, layout), name)
        todo = {k: n for k, n in wanted.items() if k not in self._primary}
        commands = []
        for name in todo.values():
            command = {"prefix": "osd map", "pool": pool_name, "object": name, "format": "json"}
            if layout.pool_namespace:
                command["nspace"] = layout.pool_namespace
            commands.append(command)
        self._start("map", commands, list(todo))

    def _got_map(self, answers: list[tuple[int, str, str]], todo: list[str]) -> None:
        epochs = set()
        for key, (ret, out, _status) in zip(todo, answers):
            if ret != 0:
                if ret == -errno.ENOENT:  # the pool is gone: the layout is stale
                    self._files.clear()
                continue
            got = json.loads(out)
            epochs.add(got["epoch"])
            if not self._by_object and got["pgid"] != key:
                self._by_object = True  # not the hash Ceph uses: ask per object from now on
                self._forget_map()
                return
            self._primary[key] = int(got["acting_primary"])
        if epochs and self._osd_epoch is not None and min(epochs) != self._osd_epoch:
            self._osd_epoch = min(epochs)  # the next check drops what changed in between

    # Metadata ops.
    def _mds(self, path: str) -> str:
        self._due()
        if self._max_mds is None:
            return UNKNOWN
        if self._max_mds == 1:
            return "mds.0"
        directory = os.path.dirname(path.rstrip("/")) or "/"
        if directory not in self._ranks:
            self._ranks[directory] = self._pinned(directory)
        rank = self._ranks[directory]
        return UNKNOWN if rank is None else f"mds.{rank}"

    def _pinned(self, directory: str) -> int | None:
        """The rank of the nearest export pin at or above ``directory`` within the mount;
        None when there is none (the balancer decides) or the tree is pinned another way."""
        top = os.path.realpath(self.target)
        here = os.path.realpath(directory)
        while True:
            for other in ("ceph.dir.pin.distributed", "ceph.dir.pin.random"):
                try:
                    if float(os.getxattr(here, other).decode() or 0):
                        return None  # ephemeral pins: a rank per child, not this tree's
                except OSError:
                    pass
            pin = int(os.getxattr(here, "ceph.dir.pin").decode() or -1)
            if 0 <= pin < (self._max_mds or 0):
                return pin
            parent = os.path.dirname(here)
            if here == top or parent == here or not here.startswith(top):
                return None
            here = parent


RESOLVER = CephResolver
