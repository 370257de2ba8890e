"""The verdict on a real shared filesystem (docs/VALIDATION.md, "The verdict"): three probing
nodes on the GlusterFS or the CephFS testbed (the test's parameter, ``-k glusterfs`` or
``-k cephfs``), each with its own database, the other nodes' databases as its
[fleet]. Quiet minutes must read "ok" everywhere; IO500's ior-easy-write and mdtest-hard-write
at once from two nodes that do not probe (IOR's large sequential writes again and again to the
end of the phase, mdtest's small files in one directory) must read "filesystem" on every
probing node; one node's own trouble, its filesystem client (glusterfs or ceph-fuse) held
back by a CPU quota (cgroup cpu controller), must read "node" there and "ok" on the others.
Right in at least 95 % of the counted node-minutes; the minutes in which the volume settles after a
load are shown, not counted. A last, milder load (mdtest-hard, whose slowdown on this testbed
may stay under the slow threshold) is shown and counted apart: "filesystem" or "ok" there are
both right, "node" is wrong blame, and the test asserts there is none.

Opt-in (``--long``), root. About 25 minutes with the defaults; SLOWDOWN_VERDICT_BASELINE
(seconds), SLOWDOWN_VERDICT_QUIET, SLOWDOWN_VERDICT_PHASE and SLOWDOWN_VERDICT_SETTLE
(minutes) change the schedule, SLOWDOWN_VERDICT_OUT keeps the per-minute verdicts as JSON.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from pathlib import Path

import pytest

from tests.kit.iorkit import ior_bin, mdtest_hard, sleep_until
from tests.kit.testbed.io500 import EASY, mpi
from tests.kit.testbed.kinds import KINDS, open_testbed
from tests.kit.testbed.results import at, rebaseline, slowdown

pytestmark = [pytest.mark.root, pytest.mark.timeout(3600)]

BASELINE = int(os.environ.get("SLOWDOWN_VERDICT_BASELINE", "150"))  # seconds, at least
QUIET = int(os.environ.get("SLOWDOWN_VERDICT_QUIET", "3"))
PHASE = int(os.environ.get("SLOWDOWN_VERDICT_PHASE", "3"))
SETTLE = int(os.environ.get("SLOWDOWN_VERDICT_SETTLE", "4"))
CPU_CGROUP = Path("/sys/fs/cgroup/cpu")  # the cgroup v1 cpu controller of this machine
QUOTA_US, PERIOD_US = 1000, 100_000  # 1 % of one CPU
ANY_BUT_NODE = ("filesystem", "ok")  # a load that may or may not be slow: never "node"


def ior_easy_write_until(end: float) -> list[str]:
    """IO500's ior-easy-write (file per process, 2 MiB transfers, fsync at the end), 2 GiB per
    process and then removed, again until ``end``: the volume stays busy for the whole phase
    while the bricks never hold more than one round (one round takes ~30 s here)."""
    ior = mpi(2, "ior", "-C", "-Q", "1", "-g", "-G", "271", "-e", "-t", "2m", "-b", "2g",
              "-F", "-a", "POSIX", "-w", "-o", f"{EASY}/ior_file_easy")
    loop = 'mkdir -p "$1"; shift; while [ "$(date +%s)" -lt "$1" ]; do "${@:2}" || exit; done'
    return ["bash", "-c", loop, "ior-loop", EASY, str(int(end)), *ior]


def cpu_cgroup_of(pid: int) -> Path:
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "cpu" in controllers.split(","):
            return CPU_CGROUP / path.lstrip("/")
    return CPU_CGROUP


@contextlib.contextmanager
def held_back(pids: list[int], name: str):
    """``pids`` in a cpu cgroup of their own with a quota of QUOTA_US per PERIOD_US; put back
    where they were, and the cgroup removed, on the way out."""
    group = CPU_CGROUP / name
    group.mkdir()
    before = {pid: cpu_cgroup_of(pid) for pid in pids}
    try:
        (group / "cpu.cfs_period_us").write_text(str(PERIOD_US))
        (group / "cpu.cfs_quota_us").write_text(str(QUOTA_US))
        for pid in pids:
            (group / "cgroup.procs").write_text(str(pid))
        yield group
    finally:
        for pid, home in before.items():
            with contextlib.suppress(OSError):
                (home / "cgroup.procs").write_text(str(pid))
        group.rmdir()


def reader_config(node, databases: list[Path]) -> Path:
    """The node's configuration for reading: its host name (a reader outside its namespace
    has another) and the [fleet] of every node's database."""
    path = node.dir / "reader.toml"
    path.write_text(f'host = "{node.name}"\n' + node.config.read_text()
                    + "[fleet]\ndatabases = [" + ", ".join(f'"{d}"' for d in databases) + "]\n")
    return path


def verdict_at(config: Path, minute: int) -> dict:
    """The verdict on the minute ``[minute, minute + 60)``, as ``slowdown --json`` gives it
    a second after that minute."""
    doc = json.loads(slowdown("--config", str(config), "--json", "--at", at(minute + 61)))
    (target,) = doc["targets"]
    return target["verdict"]


@pytest.mark.parametrize("fs", KINDS)
def test_verdict_right_on_the_testbed(fs: str, root_only, tmp_path) -> None:
    ior_bin()
    # (minute, phase, the words right on each node, or None where not counted)
    schedule: list[tuple[int, str, dict[str, tuple[str, ...]] | None]] = []
    found: dict[str, dict[int, dict]] = {}
    with open_testbed(fs, nodes=3, gib=6, lock_wait=3600) as bed:
        names = [n.name for n in bed.nodes]
        started = time.time()
        quiet = (int(started + BASELINE) // 60 + 1) * 60
        load = quiet + QUIET * 60
        own = load + (PHASE + SETTLE) * 60
        mild = own + (PHASE + 1) * 60
        end = mild + (PHASE + 1) * 60

        def each(word: str) -> dict[str, tuple[str, ...]]:
            return dict.fromkeys(names, (word,))

        schedule += [(m, "quiet", each("ok")) for m in range(quiet, load, 60)]
        schedule += [(m, "ior-easy + mdtest-hard", each("filesystem"))
                     for m in range(load, load + PHASE * 60, 60)]
        schedule += [(m, "settling", None) for m in range(load + PHASE * 60, own, 60)]
        slow_node = bed.nodes[1]
        expected_own = {n: ("node",) if n == slow_node.name else ("ok",) for n in names}
        schedule += [(m, f"{slow_node.name} client held back", expected_own)
                     for m in range(own, own + PHASE * 60, 60)]
        schedule += [(m, "settling", None) for m in range(own + PHASE * 60, mild, 60)]
        schedule += [(m, "mdtest-hard (apart)", dict.fromkeys(names, ANY_BUT_NODE))
                     for m in range(mild, mild + PHASE * 60, 60)]
        schedule += [(m, "settling", None) for m in range(mild + PHASE * 60, end, 60)]

        sleep_until(quiet)
        for node in bed.nodes:
            rebaseline(node.config, started, quiet, "quiet volume before the loads")
        sleep_until(load - 2)
        md: list[int] = []
        beside = threading.Thread(target=lambda: md.append(bed.load(
            mdtest_hard(PHASE * 60 - 10), "mdtest-hard", timeout=PHASE * 120)))
        beside.start()
        time.sleep(1)  # its namespace named first
        rc = bed.load(ior_easy_write_until(load + PHASE * 60 - 10), "ior-easy-write",
                      timeout=PHASE * 120)
        beside.join()
        assert rc == 0 and md == [0], "\n".join(o.output()[-2000:] for o in bed.others)
        sleep_until(own - 2)
        pids = bed.client_pids(slow_node)
        assert pids, f"no filesystem client of {slow_node.mount}"
        with held_back(pids, f"{bed.ledger.prefix}-{slow_node.name}"):
            sleep_until(own + PHASE * 60)
        sleep_until(mild - 5)
        rc = bed.load(mdtest_hard(int(mild + PHASE * 60 + 1 - time.time())), timeout=PHASE * 120)
        assert rc == 0, bed.others[-1].output()[-3000:]
        sleep_until(end + 3)  # the last minute flushed
        databases = [n.database for n in bed.nodes]
        for node in bed.nodes:
            config = reader_config(node, databases)
            found[node.name] = {m: verdict_at(config, m) for m, _, _ in schedule}
    assert bed.leftovers() == []
    assert not any(p.name.startswith(bed.ledger.prefix) for p in CPU_CGROUP.iterdir())

    rows, right, counted, apart, blamed = [], 0, 0, 0, 0
    for minute, phase, expected in schedule:
        for name in names:
            v = found[name][minute]
            ok = None if expected is None else v["verdict"] in expected[name]
            if ok is not None and expected[name] == ANY_BUT_NODE:
                apart += 1
                blamed += not ok
            elif ok is not None:
                counted += 1
                right += ok
            rows.append({"minute": minute, "phase": phase, "node": name,
                         "expected": expected and "/".join(expected[name]),
                         "verdict": v["verdict"], "right": ok, "slowdown": v["slowdown"],
                         "peers": v["peers"], "slow_peers": v["slow_peers"],
                         "stale_peers": v["stale_peers"], "reason": v["reason"]})
    out = Path(os.environ.get("SLOWDOWN_VERDICT_OUT") or tmp_path)
    out.mkdir(parents=True, exist_ok=True)
    (out / "verdicts.json").write_text(json.dumps(
        {"right": right, "counted": counted, "apart": apart, "wrong_blame_apart": blamed,
         "rows": rows}, indent=1))
    for r in rows:
        print(time.strftime("%H:%M", time.gmtime(r["minute"])), f"{r['phase']:<26}",
              r["node"], f"{r['expected'] or '-':<13}", f"{r['verdict']:<10}",
              "" if r["right"] is None else ("right" if r["right"] else "WRONG"),
              f"own {r['slowdown']}", f"{r['slow_peers']}/{r['peers']} slow")
    print(f"right in {right} of {counted} counted node-minutes ({right / counted:.1%}); "
          f"mdtest-hard apart: {blamed} of {apart} node-minutes called 'node'")
    assert blamed == 0, "a load on the shared filesystem was blamed on a node"
    assert counted and right / counted >= 0.95, (right, counted)
