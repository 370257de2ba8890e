"""Per-server records read back: each (target, op, server)'s histogram over a time range,
merged exactly over the hosts of one file and over many files.

A fleet's nodes probe each server a few times a minute apiece; only the sum says anything of
one server, so the hosts merge into one histogram per (target, op, server), bucket counts
added (exact in any order). Each file is one query; its blobs are merged in Python once per
(target, op, server) and handed back as bucket counts. Many files are split between
processes (``forking.run_all``), as the cluster's windows are.
Files of schema < 9 hold none (``server_records.holds``) and add nothing.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field

from slowdown.analysis.histogram import codec
from slowdown.analysis.histogram.buckets import BucketCounts
from slowdown.analysis.histogram.histogram import Histogram
from slowdown.analysis.store import server_records
from slowdown.analysis.store.selection import Selection
from slowdown.analysis.store.store import Store, StoreError

Key = tuple  # (target, op, server)


@dataclass
class ServerLatencies:
    """One (target, op, server)'s latencies over the range, merged over hosts and files."""

    target: str
    op: str
    server: str
    histogram: Histogram
    errors: int = 0
    hosts: set[str] = field(default_factory=set)

    @property
    def probes(self) -> int:
        return self.histogram.count


@dataclass
class ServerRead:
    """What the files hold of the range: the merged latencies, and the files that keep no
    per-server records at all (schema < 9, or none written)."""

    latencies: dict[Key, ServerLatencies]
    without: list[str]  # files with no per-server record at all
    extent: tuple[int, int] | None  # first and last ten held by any file (any time)


_QUERY = """
    SELECT s.host, s.target, s.op, s.server, t.errors, t.hist
    FROM server_tens t JOIN server_series s ON s.id = t.series
    WHERE {where}
"""

Part = tuple  # (scale, zero count, {index: count}, errors, hosts) of one (target, op, server)


def _read_file(store: Store, selection: Selection) -> tuple[dict[Key, Part], bool,
                                                              tuple | None]:
    """One file's latencies per (target, op, server), whether it holds any per-server record,
    and the extent of its tens. Its rows' blobs are merged here, once per key (SQLite's
    ``hist_sum`` would encode each series' merge again: most of the time of a long range)."""
    if not server_records.holds(store.version):
        return {}, False, None
    where, params = selection.where("t", server_records.TEN)
    try:
        conn = store.conn
        first, last = conn.execute("SELECT min(start), max(start) FROM server_tens").fetchone()
        if first is None:
            return {}, False, None
        found: dict[Key, tuple[list[bytes], int, set[str]]] = {}
        for host, target, op, server, errors, blob in conn.execute(
                _QUERY.format(where=where), params):
            blobs, errs, hosts = found.get((target, op, server), ([], 0, set()))
            blobs.append(blob)
            hosts.add(host)
            found[(target, op, server)] = (blobs, errs + errors, hosts)
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"{store.path}: {exc}") from None
    parts = {}
    for key, (blobs, errors, hosts) in found.items():
        h = codec.merge_blobs(blobs)
        parts[key] = (h.scale, h.zero_count, h.buckets.counts, errors, hosts)
    return parts, True, (first, last)


def _read_part(part: tuple[Sequence[Store], Selection]) -> list[tuple[dict, bool, tuple | None]]:
    stores, selection = part
    return [_read_file(store, selection) for store in stores]


def read(stores: Sequence[Store], selection: Selection) -> ServerRead:
    """Each (target, op, server)'s latencies in the records overlapping the selection's range
    (whole tens: a ten is the smallest part a per-server record keeps), of the hosts, targets
    and ops it names, over all ``stores``."""
    from slowdown.analysis.store import forking

    chunks = max(1, min(forking.processes(), len(stores) // 16 or 1))
    parts = [(stores[i::chunks], selection) for i in range(chunks)]
    results = forking.run_all(parts, _read_part) if chunks > 1 else [_read_part(parts[0])]
    order = [store for i in range(chunks) for store in stores[i::chunks]]
    latencies: dict[Key, ServerLatencies] = {}
    without: list[str] = []
    firsts, lasts = [], []
    for store, (found, holds, extent) in zip(order, (r for part in results for r in part)):
        if not holds:
            without.append(str(store.path))
            continue
        firsts.append(extent[0])
        lasts.append(extent[1])
        for key, (scale, zero, counts, errors, hosts) in found.items():
            h = Histogram(scale)
            h.buckets = BucketCounts(counts)
            h.zero_count = zero
            h.count = zero + h.buckets.total()
            mine = latencies.get(key)
            if mine is None:
                latencies[key] = ServerLatencies(*key, h, errors, set(hosts))
                continue
            mine.histogram.merge(h)
            mine.errors += errors
            mine.hosts |= hosts
    return ServerRead(dict(sorted(latencies.items())), sorted(without),
                      (min(firsts), max(lasts)) if firsts else None)


__all__ = ["ServerLatencies", "ServerRead", "read"]
