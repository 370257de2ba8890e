"""The md probe against md-workbench: one pool, alternately, one object per second each.

Part of ``python -m bench.bench_probe`` (which prepares the pool and prints the table).

Cadence: md-workbench has no rate of its own (``-t`` waits a multiple of each op's own time),
so it is run once per object: ``md-workbench -2 -D=1 -P=P -S=3901 -I=1 -R=1 -G=0`` on a pool of
one data set (``pool_dirs = 1``) does exactly one rotation step (stat, read, delete, create)
and writes its position; our side is one ``MdProbe.step()`` at the same position. A step
every half interval, in pairs of one step each, ABBA (ours, md-workbench; md-workbench, ours;
...), so each does one object per interval on average (1 s: the probe's cadence), each goes
first in half the pairs (the one that goes second gets an object its neighbour's step may
have warmed), and each continues where the other stopped (the status file, md-workbench's
run-info format). md-workbench prints, per phase, the quantiles of its op times; with one op
per run they are that op's time (its own timer, ``GetTimeStamp`` around the backend calls).
Each step's reads from storage (``getrusage`` inblock: ours per op, md-workbench per run)
tell a cold object from a cached one; the table says how many were cold on each side.

What each side times (md-workbench: IOR's POSIX backend, read from its source and ``strace``):

- stat: both ``stat`` (glibc: ``newfstatat``);
- read: md-workbench ``open(O_RDONLY)``, ``lseek``, ``read``, ``close``; ours the same with
  ``O_NOFOLLOW|O_CLOEXEC`` on the open;
- delete: both ``unlink``;
- create: md-workbench ``open(O_CREAT|O_RDWR)``, fills its buffer, ``lseek``, ``write``,
  ``close``; ours the same (content made once, before) with ``O_NOFOLLOW|O_CLOEXEC``.

``syscall_costs`` measures, on the same pool, what the flags and Python's own call overhead
add: the remaining differences, each with its cost.
"""

from __future__ import annotations

import os
import re
import resource
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.workspaces import filesystem_of
from slowdown.probe.layout.md_content import SEED
from slowdown.probe.layout.md_pool_layout import PoolLayout
from slowdown.probe.layout.md_status import read_status_full, write_status
from slowdown.probe.layout.names import STATUS_NAME
from slowdown.probe.probes.md import MdProbe

OPS = {"stat": "md-stat", "read": "md-read", "delete": "md-delete", "create": "md-write"}
GOAL = 0.10  # medians within 10 %, or the difference named and measured
MD_HEAD = "| what | ours | md-workbench | difference | ratio | goal | met? |"
_STATS = re.compile(r"\b(stat|read|create|delete)\(([-+0-9.e]+)s, ([-+0-9.e]+)s, ([-+0-9.e]+)s")


def md_workbench_bin() -> Path:
    """md-workbench as the tests find it: $SLOWDOWN_IOR_BIN, or built by .ci/build-ior."""
    given = os.environ.get("SLOWDOWN_IOR_BIN")
    if given:
        return Path(given) / "md-workbench"
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(["bash", str(root / ".ci" / "build-ior")], check=True,
                          capture_output=True, text=True)
    return Path(done.stdout.strip().splitlines()[-1]) / "md-workbench"


def md_workbench_command(binary: Path, ws: Path, per_dir: int, size: int) -> list[str]:
    return [str(binary), "-2", "-o", str(ws / "md"), "-D=1", f"-P={per_dir}", f"-S={size}",
            "-I=1", "-R=1", f"-G={SEED}", f"--run-info-file={STATUS_NAME}"]


def md_workbench_step(command: list[str], ws: Path) -> dict[str, float]:
    """One run of md-workbench; its median time per op (seconds)."""
    done = subprocess.run(command, cwd=ws, capture_output=True, text=True, timeout=60)
    found = {OPS[m.group(1)]: float(m.group(4)) for m in _STATS.finditer(done.stdout)}
    if done.returncode or "(0 errs)" not in done.stdout or len(found) != 4:
        raise SystemExit(f"md-workbench failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    return found


def ours_at(slot: int) -> bool:
    """Whether our probe takes slot ``slot``: pairs in ABBA order (ours first in even pairs,
    md-workbench first in odd ones). A step on a cold object can warm the next one (on ext4
    neighbouring inodes share a block of the inode table, and the disk below may read ahead),
    so the side that goes second in a pair may find a warmer object; in ABBA order each side
    goes second in half the pairs."""
    return slot % 2 == (slot // 2) % 2


def _inblock_thread() -> int:
    """Blocks this thread has read from storage (page cache misses), in 512-byte units."""
    return resource.getrusage(resource.RUSAGE_THREAD).ru_inblock


def _inblock_children() -> int:
    """Blocks the children waited for (md-workbench's runs) have read from storage."""
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_inblock


def _our_step(probe: MdProbe, status: Path) -> tuple[dict[str, float], dict[str, int]]:
    """One step of ours from the status file's position: seconds per op, and the blocks each
    op read from storage (counted between the ops, outside their timers)."""
    blocks: dict[str, int] = {}
    mark = [_inblock_thread()]

    def on_op(op: str, seconds: float | None, error: int) -> None:
        now = _inblock_thread()
        blocks[op] = now - mark[0]
        mark[0] = now

    probe.position = read_status_full(status, 1).step
    step = probe.step(on_op)
    write_status(status, probe.position, 1, fsync=False)  # as md-workbench does
    if step.errors:
        raise SystemExit(f"md probe errors: {step.errors}")
    return step.latencies, blocks


def _their_step(command: list[str], ws: Path) -> tuple[dict[str, float], int]:
    """One run of md-workbench: seconds per op, and the blocks the run read from storage."""
    before = _inblock_children()
    times = md_workbench_step(command, ws)
    return times, _inblock_children() - before


def _by_order(samples: list[dict[str, Any]], op: str) -> dict[str, dict[str, float]]:
    """Medians of ``op`` per side, apart for the pairs ours went first in and the others."""
    out = {}
    for name, ours_first in (("ours_first", True), ("md_workbench_first", False)):
        pick = [s for s in samples if s["ours_first"] == ours_first]
        if not pick:  # one object per side: one order only
            continue
        a = statistics.median(s["ours"][op] for s in pick)
        b = statistics.median(s["md_workbench"][op] for s in pick)
        out[name] = {"ours": a, "md_workbench": b, "ratio": a / b, "pairs": len(pick)}
    return out


def _cold_counts(samples: list[dict[str, Any]]) -> dict[str, int]:
    return {"ours": sum(1 for s in samples if sum(s["ours_blocks"].values()) > 0),
            "md_workbench": sum(1 for s in samples if s["md_workbench_blocks"] > 0)}


def _cold(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """How many objects were cold: their step read blocks from storage (md-workbench: its
    whole run; ours: any op, and per op), in all and apart by which side went first."""
    ours_ops = {op: sum(1 for s in samples if s["ours_blocks"].get(op, 0) > 0)
                for op in OPS.values()}
    return {"objects": len(samples), **_cold_counts(samples), "ours_ops": ours_ops,
            "ours_first": _cold_counts([s for s in samples if s["ours_first"]]),
            "md_workbench_first": _cold_counts([s for s in samples if not s["ours_first"]])}


def compare_md(ws: Path, per_dir: int, size: int, n: int, interval: float,
               progress: Callable[[str], None]) -> dict[str, Any]:
    """``n`` objects per side, a step every ``interval / 2``, in pairs of one step each in
    ABBA order (``ours_at``). Each side does one object per ``interval`` on average (its
    steps are alternately ``interval / 2`` and ``1.5 * interval`` apart)."""
    command = md_workbench_command(md_workbench_bin(), ws, per_dir, size)
    layout = PoolLayout(ws / "md", 1, per_dir, size)
    status = ws / STATUS_NAME
    probe = MdProbe(layout, position=read_status_full(status, 1).step)  # status written here
    samples: list[dict[str, Any]] = []
    pair: dict[str, Any] = {}
    slot = time.monotonic()
    for i in range(2 * n + 2):
        slot += interval / 2
        time.sleep(max(0.0, slot - time.monotonic()))
        if ours_at(i):
            pair["ours"], pair["ours_blocks"] = _our_step(probe, status)
        else:
            pair["md_workbench"], pair["md_workbench_blocks"] = _their_step(command, ws)
        if i % 2 == 1:
            pair["ours_first"] = ours_at(i - 1)
            if i >= 2:  # the first pair is a warm-up
                samples.append(pair)
            pair = {}
    progress(f"  {n} objects per side, every {interval:g} s, pairs in ABBA order")
    rows = {}
    for op in OPS.values():
        ours = [s["ours"][op] for s in samples]
        theirs = [s["md_workbench"][op] for s in samples]
        a, b = statistics.median(ours), statistics.median(theirs)
        rows[op] = {"ours": a, "md_workbench": b, "ratio": a / b, "n": n,
                    "ours_all": ours, "md_workbench_all": theirs,
                    "order": _by_order(samples, op)}
    return {"rows": rows, "command": " ".join(command), "filesystem": filesystem_of(ws),
            "cold": _cold(samples),
            "ours_first": [s["ours_first"] for s in samples],
            "blocks": [{"ours": s["ours_blocks"], "md_workbench": s["md_workbench_blocks"]}
                       for s in samples]}


def compare_burst(ws: Path, per_dir: int, size: int, n: int, rounds: int) -> dict[str, Any]:
    """Back to back (every cache warm): ``n`` steps of ours, then one md-workbench run of
    ``-I=n`` steps, ``rounds`` times alternately; medians of the round medians per op. What
    the two sides differ by here is the cost of each one's own code around the same calls.

    Everything is written out first (``sync``), and ``2 * n * rounds`` stays below the
    pool's size, so every delete of both sides finds an object written out to the disk, as
    the probe's deletes do (their objects are P ticks old): deleting one that is still only
    in the page cache costs a tenth as much on ext4."""
    command = [a if not a.startswith("-I=") else f"-I={n}"
               for a in md_workbench_command(md_workbench_bin(), ws, per_dir, size)]
    layout = PoolLayout(ws / "md", 1, per_dir, size)
    status = ws / STATUS_NAME
    probe = MdProbe(layout, position=read_status_full(status, 1).step)
    ours: dict[str, list[float]] = {op: [] for op in OPS.values()}
    theirs: dict[str, list[float]] = {op: [] for op in OPS.values()}
    os.sync()
    for _ in range(rounds):
        probe.position = read_status_full(status, 1).step
        mine: dict[str, list[float]] = {op: [] for op in OPS.values()}
        for _ in range(n):
            for op, t in probe.step().latencies.items():
                mine[op].append(t)
        write_status(status, probe.position, 1, fsync=False)
        for op in OPS.values():
            ours[op].append(statistics.median(mine[op]))
        for op, t in md_workbench_step(command, ws).items():
            theirs[op].append(t)
    med = statistics.median
    return {op: {"ours": med(ours[op]), "md_workbench": med(theirs[op]),
                 "ratio": med(ours[op]) / med(theirs[op]), "n": n, "rounds": rounds}
            for op in OPS.values()}


def syscall_costs(ws: Path, size: int, n: int) -> dict[str, float]:
    """Median extra seconds, measured alternately on the pool's directory, of: O_NOFOLLOW |
    O_CLOEXEC on an open for reading; the same on a create; Python's call overhead on a stat
    (``os.stat`` of a missing name, timed in Python, against the kernel part of it: the
    difference between a Python and a C timer is not measurable from here, so this is the
    time of the whole Python call of the cheapest syscall, an upper bound)."""
    d = ws / "md" / "0_0"
    probe_file = d / "syscall-cost"
    probe_file.write_bytes(b"x" * size)
    clock = time.perf_counter_ns
    plain, flagged, cplain, cflagged, null = [], [], [], [], []
    content = b"y" * size
    try:
        for _ in range(n):
            for flags, out in ((os.O_RDONLY, plain),
                               (os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, flagged)):
                t0 = clock()
                fd = os.open(probe_file, flags)
                os.close(fd)
                out.append(clock() - t0)
            for flags, out in ((os.O_RDWR | os.O_CREAT, cplain),
                               (os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, cflagged)):
                name = d / "syscall-cost-new"
                t0 = clock()
                fd = os.open(name, flags, 0o644)
                os.write(fd, content)
                os.close(fd)
                out.append(clock() - t0)
                os.unlink(name)
            t0 = clock()
            os.getppid()  # the cheapest system call, through the same Python call path
            null.append(clock() - t0)
    finally:
        probe_file.unlink()
    med = statistics.median
    return {"open flags (read)": (med(flagged) - med(plain)) * 1e-9,
            "open flags (create)": (med(cflagged) - med(cplain)) * 1e-9,
            "python call of a syscall": med(null) * 1e-9}


def order_lines(result: dict[str, Any]) -> list[str]:
    """The one-per-second medians apart by which side went first in its pair, and the share
    of cold objects on each side."""
    out = ["", "One per second, by the order within a pair (ABBA: each order in half the "
           "pairs):", ""]
    for op, r in result["rows"].items():
        parts = []
        for name, label in (("ours_first", "ours first"),
                            ("md_workbench_first", "md-workbench first")):
            if name not in r["order"]:
                continue
            o = r["order"][name]
            parts.append(f"{label} ({o['pairs']} pairs) {o['ours'] * 1e6:,.1f} / "
                         f"{o['md_workbench'] * 1e6:,.1f} us = {o['ratio']:.3f}")
        out.append(f"- {op}: " + "; ".join(parts))
    cold = result["cold"]
    n = cold["objects"]
    per_op = ", ".join(f"{op} {count}" for op, count in cold["ours_ops"].items())
    out += ["", f"Cold objects (the step read blocks from storage: getrusage inblock), of {n} "
            f"per side: ours {cold['ours']} ({100 * cold['ours'] / n:.0f} %; by op: {per_op}), "
            f"md-workbench {cold['md_workbench']} ({100 * cold['md_workbench'] / n:.0f} %, "
            "its whole run); in the pairs ours went first: ours "
            f"{cold['ours_first']['ours']}, md-workbench {cold['ours_first']['md_workbench']}; "
            f"in the others: ours {cold['md_workbench_first']['ours']}, md-workbench "
            f"{cold['md_workbench_first']['md_workbench']}"]
    if "fuse" in result.get("filesystem", ""):
        out.append("(On FUSE the pool's reads from storage are the FUSE server's, a process "
                   "of its own, and counted to neither side: what md-workbench's count holds "
                   "there is its own start-up.)")
    return out


def md_table(result: dict[str, Any], costs: dict[str, float]) -> str:
    out = [MD_HEAD, "|" + "---|" * 7]
    for op, r in result["rows"].items():
        diff = r["ours"] - r["md_workbench"]
        met = abs(r["ratio"] - 1) <= GOAL
        out.append(f"| {op}, one per second, median of {r['n']} | {r['ours'] * 1e6:,.1f} us "
                   f"| {r['md_workbench'] * 1e6:,.1f} us | {diff * 1e6:+,.1f} us "
                   f"| {r['ratio']:.3f} | within 10% or explained | "
                   f"{'yes' if met else 'see costs'} |")
    for op, r in result.get("burst", {}).items():
        diff = r["ours"] - r["md_workbench"]
        out.append(f"| {op}, back to back, {r['rounds']} x {r['n']} | {r['ours'] * 1e6:,.1f} us "
                   f"| {r['md_workbench'] * 1e6:,.1f} us | {diff * 1e6:+,.1f} us "
                   f"| {r['ratio']:.3f} | (information) | - |")
    out += order_lines(result)
    out += ["", "Measured costs of the remaining differences (medians, same pool):", ""]
    out += [f"- {name}: {value * 1e6:+,.2f} us" for name, value in costs.items()]
    out += ["", f"md-workbench command of each step: `{result['command']}`"]
    return "\n".join(out)
