"""Which brick is slow, from the clients' side, short form, on a real GlusterFS volume: a
distribute volume of four bricks (no replicas), three probing nodes (namespaces with their own
host names and mounts). The nodes' per-server records (``server_tens``, merged over the three
databases) show, quiet (40 to 100 s), no brick far above the others; in the next minute, with
one brick's glusterfsd held to 5 % of a CPU (a cgroup v1 CPU quota that a busy loop beside it
uses up, as on a loaded server), that brick's median clearly above each of the other three for
the ops its files alone serve (md-write and data-read far above, md-delete above; data-read
where other bricks hold a node's data file too), and each node's data ops attributed to the
brick that holds its data file. md-stat is slowed on every brick alike (``ABOVE``'s note).
``slowdown servers`` calls no brick slow, quiet, and none but the slowed one with it.
The testbed leaves nothing behind (about 3 minutes).
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from slowdown.analysis.store.live import live_path
from slowdown.analysis.words import DATA_OPS, MD_OPS
from tests.kit.iorkit import sleep_until
from tests.kit.testbed.nodes import Testbed
from tests.kit.testbed.servers import (
    brick_holding,
    exported_ops,
    minus,
    probes,
    quantile,
    read_counts,
    servers_words,
    slow_ones,
    stored_ops,
)

pytestmark = [pytest.mark.root, pytest.mark.slow, pytest.mark.testbed,
              pytest.mark.timeout(420)]

QUOTA = 5  # percent of one CPU for the slowed brick's server
QUIET_SPREAD = 2.5  # in the quiet minute no brick's md median above this times another's
QUIET_FOR = 40  # seconds of probing at least before the brick is slowed
MIN_PROBES = 10  # per brick and md op in a minute of three nodes (about 45 expected)
# The ops the file's brick alone serves, and by how much the slowed brick's median must stand
# above every other brick's (three runs: md-write 190-288 ms against 1.9-3.8 ms, data-read
# 129-258 ms against 2.6-2.9 ms, md-delete 1.7-93 ms against 0.44-0.87 ms). Not asserted:
# md-read (0.73-2.35 ms against 0.32-0.56 ms: the client's caches answer much of it, so the
# margin is thin) and md-stat: the first op of a tick in a directory revalidates the
# directory, which DHT looks up on every brick, so a slow brick raised every brick's md-stat
# (100-294 ms).
ABOVE = {"md-write": 3.0, "data-read": 3.0, "md-delete": 1.0}


def data_servers(database: Path) -> set[str]:
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=30) as conn:
        return {row[0] for row in conn.execute(
            "SELECT DISTINCT server FROM server_series WHERE op IN (?, ?)", DATA_OPS)}


def test_a_slowed_brick_stands_above_the_others_in_the_nodes_per_server_records(root_only):
    began = time.monotonic()
    with Testbed(nodes=3, brick_mib=1024, bricks=4, replica=1, pool_files=400) as bed:
        host = bed.server.host
        pids = bed.server.brick_pids()
        bricks = sorted(pids)
        assert len(bricks) == 4
        names = {b: f"{host}:{b}" for b in bricks}
        deadline = time.monotonic() + 150
        while not all(live_path(n.database).exists() for n in bed.nodes):  # probing
            assert time.monotonic() < deadline, [n.output()[-1500:] for n in bed.nodes]
            time.sleep(1)
        databases = [n.database for n in bed.nodes]
        # Quiet: from the first tick to a minute's end at least QUIET_FOR later; each reading
        # just after a minute's flush.
        slowing = (int(time.time() + QUIET_FOR) // 60 + 1) * 60 + 3
        sleep_until(slowing)
        before, scale = read_counts(databases)
        quiet_words = servers_words(databases)  # the command's words, quiet
        slowed = brick_holding(bricks, f"slowdown/.slowdown/{bed.nodes[0].name}/data.bin")
        bed.server.slow_down(pids[slowed], QUOTA)
        sleep_until(slowing + 60)
        after = read_counts(databases)[0]
        slow_words = servers_words(databases)  # its tens hold the quiet minutes too
        bed.server.release(pids[slowed])
        held = {n.name: brick_holding(bricks, f"slowdown/.slowdown/{n.name}/data.bin")
                for n in bed.nodes}
        served = {n.name: data_servers(n.database) for n in bed.nodes}
        outputs = [n.output()[-1500:] for n in bed.nodes]
        bed.stop_nodes()  # each service's last textfile, after its last flush
        exported = {n.name: exported_ops(n.dir / "slowdown.prom") for n in bed.nodes}
        stored = {n.name: stored_ops(n.database) for n in bed.nodes}
    assert bed.leftovers() == []
    print(f"testbed test: {time.monotonic() - began:.0f} s")
    for node, brick in held.items():  # data ops: the data file's brick, and only it
        assert served[node] == {names[brick]}, (node, brick, served[node])
    # Each node's per-server counters (its metrics textfile) are its records' ops per brick.
    for node in held:
        assert exported[node] == stored[node], (node, exported[node], stored[node])
        assert {server for _, server in exported[node]} == set(names.values()), exported[node]
    quiet_counts, slow_counts = before, minus(after, before)
    medians, problems = {}, []
    for period, counts in (("quiet", quiet_counts), ("slow", slow_counts)):
        for op in (*MD_OPS, *DATA_OPS):
            seen = {b: probes(counts.get((op, names[b]), {})) for b in bricks}
            medians[period, op] = {b: quantile(counts.get((op, names[b]), {}), scale, 0.5)
                                   for b in bricks if seen[b]}
            print(period, op, {b[-12:]: f"{v * 1e3:.2f} ms ({seen[b]})"
                               for b, v in medians[period, op].items()})
            if op in MD_OPS and min(seen.values()) < MIN_PROBES:
                problems.append((period, op, "few probes", seen))
            assert probes(counts.get((op, "unknown"), {})) == 0, (period, op)
    for op in MD_OPS:  # quiet: no brick far above another
        quiet = medians["quiet", op]
        if max(quiet.values()) >= QUIET_SPREAD * min(quiet.values()):
            problems.append(("quiet", op, quiet))
    # Slowed: the ops its files alone serve stand above every other brick's (ABOVE).
    for op, factor in ABOVE.items():
        slow = medians["slow", op]
        others = [v for b, v in slow.items() if b != slowed]
        if slowed in slow and others and slow[slowed] <= factor * max(others):
            problems.append(("slow", op, slowed, slow))
    assert not problems, (problems, outputs)
    # slowdown servers: quiet, no brick slow; with the slowed minute, none but that brick (its
    # ten minutes hold the quiet minutes too, so naming it is the long form's, aligned to tens:
    # tests/long/test_gluster_servers_long.py).
    print("servers, quiet:", {k[-14:]: v["word"] for k, v in quiet_words.items()},
          "slowed:", {k[-14:]: v["word"] for k, v in slow_words.items()})
    assert slow_ones(quiet_words) == [], quiet_words
    assert set(slow_ones(slow_words)) <= {names[slowed]}, slow_words
