"""Fleets of per-server records with planted slow servers, for tests and benchmarks.

Each node's probes fall on the servers uniformly at random (as the probe's random offsets
and spread files do), each server's latencies lognormal around a median of its own (servers
differ a little even when all is well: ``spread``), a planted slow server's median raised by
its factor. In memory (``ten_of_servers``: one ten's histograms, for the rule's measurement)
or written through the store as a node's service writes them (``write_fleet``: minute records
and per-server records, one file per node).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from slowdown.analysis.histogram import Histogram
from slowdown.analysis.store import Store
from slowdown.analysis.store.records import Record
from slowdown.analysis.store.server_records import TEN, ServerRecord


def server_names(count: int) -> list[str]:
    """GlusterFS-style brick names: ``h1:/bricks/b1`` ..."""
    return [f"h{i}:/bricks/b{i}" for i in range(1, count + 1)]


def server_medians(rng: np.random.Generator, names: Sequence[str], median: float,
                   spread: float, slow: Mapping[str, float]) -> dict[str, float]:
    """Each server's own median: ``median`` times a lognormal factor of sigma ``spread``,
    and a slow one's times its factor."""
    factors = rng.lognormal(0.0, spread, len(names)) if spread else np.ones(len(names))
    return {name: median * float(f) * slow.get(name, 1.0) for name, f in zip(names, factors)}


def probes_per_server(rng: np.random.Generator, names: Sequence[str], total: int
                      ) -> dict[str, int]:
    """``total`` probes spread over the servers uniformly at random."""
    counts = rng.multinomial(total, [1 / len(names)] * len(names))
    return dict(zip(names, counts.tolist()))


def ten_of_servers(rng: np.random.Generator, medians: Mapping[str, float], total: int,
                   sigma: float = 0.5) -> dict[str, Histogram]:
    """One ten's histograms per server: ``total`` probes (all nodes') spread over them."""
    out = {}
    for name, n in probes_per_server(rng, list(medians), total).items():
        h = Histogram()
        if n:
            h.record_many(rng.lognormal(np.log(medians[name]), sigma, n))
        out[name] = h
    return out


def write_fleet(directory: Path, nodes: int, servers: int, start: int, tens: int, *,
                per_node_ten: int = 600, target: str = "work", op: str = "data-read",
                median: float = 0.004, sigma: float = 0.5, spread: float = 0.1,
                slow: Mapping[str, float] | None = None,
                slow_tens: Sequence[int] | None = None, seed: int = 0,
                names: Sequence[str] | None = None) -> list[Path]:
    """Files ``n1.db`` ... under ``directory``, each a node's minutes and per-server records
    of ``tens`` ten minutes from ``start`` (a multiple of 600): ``per_node_ten`` probes per
    node and ten over ``servers`` servers. ``slow``: server name -> factor, in the tens
    numbered in ``slow_tens`` (all when None)."""
    if start % TEN:
        raise ValueError(f"start {start} is not a multiple of {TEN}")
    rng = np.random.default_rng(seed)
    names = list(names or server_names(servers))
    base = server_medians(rng, names, median, spread, {})
    paths = []
    directory.mkdir(parents=True, exist_ok=True)
    for node in range(1, nodes + 1):
        host = f"n{node}"
        path = directory / f"{host}.db"
        with Store(path) as store:
            for ten in range(tens):
                t0 = start + ten * TEN
                slowed = slow if (slow and (slow_tens is None or ten in slow_tens)) else {}
                records, per_server = _one_ten(rng, host, target, op, t0, base, slowed,
                                               per_node_ten, sigma)
                store.write(records, servers=per_server)
        paths.append(path)
    return paths


def _one_ten(rng: np.random.Generator, host: str, target: str, op: str, t0: int,
             base: Mapping[str, float], slow: Mapping[str, float], total: int,
             sigma: float) -> tuple[list[Record], list[ServerRecord]]:
    """A node's minute records and per-server records of one ten."""
    names = list(base)
    which = rng.integers(0, len(names), total)
    minute = rng.integers(0, TEN // 60, total)
    medians = np.array([base[n] * slow.get(n, 1.0) for n in names])
    values = rng.lognormal(np.log(medians[which]), sigma)
    records = []
    for m in range(TEN // 60):
        h = Histogram()
        h.record_many(values[minute == m])
        records.append(Record(host, target, op, t0 + 60 * m, h))
    per_server = []
    for i, name in enumerate(names):
        mine = values[which == i]
        if mine.size:
            h = Histogram()
            h.record_many(mine)
            per_server.append(ServerRecord(host, target, op, name, t0, h))
    return records, per_server
