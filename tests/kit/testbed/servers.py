"""What the nodes measured per server, read from their databases' ``server_tens`` and merged
over the nodes (bucket counts add up exactly); a period's own counts are the difference of two
readings taken at its ends. And where a file of the volume really is: the brick whose
directory holds it (not a DHT link file), seen from the server side, not from the client's
``pathinfo`` the probe uses.
"""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from slowdown.analysis.histogram import Histogram, codec
from slowdown.analysis.histogram.buckets import BucketCounts

Counts = dict[tuple[str, str], Counter]  # (op, server) -> bucket index -> count (0: zeros)
ZERO = "zero"


def read_counts(databases: Iterable[Path]) -> tuple[Counts, int]:
    """Every node's per-server counts merged, and the histograms' scale (one for all)."""
    merged: Counts = {}
    scales = set()
    for db in databases:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30) as conn:
            rows = conn.execute(
                "SELECT s.op, s.server, t.hist FROM server_tens t "
                "JOIN server_series s ON s.id = t.series").fetchall()
        for op, server, blob in rows:
            scale, zero, counts, _ = codec.decode_pairs(blob)
            scales.add(scale)
            into = merged.setdefault((op, server), Counter())
            into.update(counts)
            into[ZERO] += zero
    if len(scales) > 1:
        raise AssertionError(f"the nodes' histograms have several scales: {scales}")
    return merged, scales.pop() if scales else 0


def servers_by_op(database: Path) -> dict[str, set[str]]:
    """Each op's servers in one node's per-server records."""
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=30) as conn:
        rows = conn.execute("SELECT DISTINCT op, server FROM server_series").fetchall()
    out: dict[str, set[str]] = {}
    for op, server in rows:
        out.setdefault(op, set()).add(server)
    return out


def servers_words(databases: Iterable[Path], since: str = "10m") -> dict[str, dict]:
    """``slowdown servers --json`` over the nodes' files: each server's object by name."""
    argv = [sys.executable, "-m", "slowdown.analysis.cli.main", "servers", "--json",
            "--since", since]
    for db in databases:
        argv += ["--db", str(db)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise AssertionError(f"slowdown servers: exit {done.returncode}: {done.stderr}")
    return {row["server"]: row for row in json.loads(done.stdout)}


def slowdown_text(databases: Iterable[Path], *args: str) -> str:
    """What ``slowdown ARGS --db ...`` prints over the nodes' files (``servers --since 1m``,
    ``-v``), as a user reads it."""
    argv = [sys.executable, "-m", "slowdown.analysis.cli.main", *args]
    for db in databases:
        argv += ["--db", str(db)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    return f"$ slowdown {' '.join(args)} --db ...  (exit {done.returncode})\n" \
        f"{done.stdout}{done.stderr}"


def slow_ones(words: dict[str, dict]) -> list[str]:
    """The servers ``slowdown servers`` calls slow."""
    return sorted(name for name, row in words.items() if row["word"] == "slow")


def minus(after: Counts, before: Counts) -> Counts:
    """What was added between two readings."""
    return {key: c - before.get(key, Counter()) for key, c in after.items()}


def probes(counts: Counter) -> int:
    return sum(counts.values())


def quantile(counts: Counter, scale: int, q: float) -> float:
    """The ``q``-quantile of merged bucket counts (NaN when empty)."""
    h = Histogram(scale)
    buckets = {int(i): n for i, n in counts.items() if i != ZERO and n > 0}
    h.buckets = BucketCounts(buckets)
    h.zero_count = counts.get(ZERO, 0)
    h.count = h.zero_count + sum(buckets.values())
    h.min, h.max = 0.0, float("inf")
    return h.quantile(q)


def brick_holding(bricks: Iterable[str], relative: str) -> str:
    """The brick directory that holds the data of ``relative`` (a path in the volume): a
    regular file there that is not a DHT link file (mode ``---------T``, no data)."""
    found = []
    for brick in bricks:
        try:
            st = os.stat(Path(brick) / relative)
        except FileNotFoundError:
            continue
        if stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) != stat.S_ISVTX:
            found.append(brick)
    if len(found) != 1:
        raise AssertionError(f"{relative} is on bricks {found}, not on one")
    return found[0]


def stored_ops(database: Path) -> dict[tuple[str, str], int]:
    """(probe, server) -> the ops with a latency in one node's per-server records, as the
    per-server counters of its metrics add them up (probe: ``data`` or ``md``)."""
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=30) as conn:
        rows = conn.execute("SELECT s.op, s.server, sum(t.count) FROM server_tens t "
                            "JOIN server_series s ON s.id = t.series "
                            "GROUP BY s.op, s.server").fetchall()
    out: dict[tuple[str, str], int] = {}
    for op, server, count in rows:
        key = (op.split("-")[0], server)
        out[key] = out.get(key, 0) + count
    return out


def exported_ops(textfile: Path) -> dict[tuple[str, str], int]:
    """(probe, server) -> ``slowdown_server_ops_total`` in a node's metrics textfile."""
    from prometheus_client.parser import text_string_to_metric_families

    out = {}
    for family in text_string_to_metric_families(textfile.read_text()):
        for s in family.samples:
            if s.name == "slowdown_server_ops_total":
                out[(s.labels["probe"], s.labels["server"])] = int(s.value)
    return out
