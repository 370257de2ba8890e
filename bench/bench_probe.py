"""Benchmark of the probes against the tools they imitate: the data probe against ioping (the
same 1 MiB O_DIRECT I/O on the same file), the md probe against md-workbench (bench_md.py).

Run from the repository root with the package importable (installed, or on PYTHONPATH)::

    python -m bench.bench_probe --loop           # the figures of docs/BENCHMARKS-probe.md
    python -m bench.bench_probe                  # the root disk only
    python -m bench.bench_probe --quick          # small file, few reads, seconds (smoke test)
    python -m bench.bench_probe --md-only --md-dir /mnt/gluster/x   # md, another filesystem

``slowdown-probe prepare`` makes a workspace whose data.bin (4 GiB by default) is the file both
sides use. Ours is ``DataProbe.read_block()`` / ``write_block()`` timed as the worker times it,
``time.perf_counter()`` around the call (so the random offset and Python's call overhead are
inside; the write's fresh bytes are made before, outside, as the worker does); the anchor is
``ioping -D -s 1m -c N+1 -i 0 -B -p 1`` on the same file (``-p 1`` makes ioping print its
batch line after every request, so each request's time is known and a median can be taken;
its final line is the plain ``-B`` summary). ioping ignores its first request (warm-up); ours
drops its first one too. Rounds alternate ours, ioping, ours, ioping, ... so that drift of a
shared machine falls on both; each round reports its median, and a run's figure is the median
of its round medians. ``--runs N`` (5) repeats every comparison N times, one run after another
(root disk, then the loop image, then again), and each reported figure is the median of the
runs' figures (the ratio: the median of the runs' ratios), every run's ratio shown beside it.

What each side times:

- read: ours ``preadv2`` of 1 MiB, flags 0 (O_DIRECT, page-aligned buffer, random
  1 MiB-aligned offset);
  ioping ``pread`` of 1 MiB (O_DIRECT via fcntl, page-aligned buffer, random 1 MiB-aligned
  offset); its ``posix_fadvise(DONTNEED)`` before each request is outside its timer.
- read, fadvised (for information, no goal): as read, but ours calls
  ``posix_fadvise(DONTNEED)`` on the chosen block before each read, outside the timer, as
  ioping does.
- write: ours ``pwritev2`` of 1 MiB O_DIRECT of fresh bytes, no fdatasync; ioping ``-WWW -C``:
  ``pwrite`` of 1 MiB O_DIRECT of fresh random bytes and nothing else (``-C`` drops the
  fdatasync that ``-W`` adds; ``-WWW`` is how ioping agrees to write into an existing file).
  The blocks ioping writes lose prepare's stamps, so the benchmark uses a workspace of its own
  and removes it afterwards (unless ``--keep``).
- write + fdatasync: ours ``write_block()`` of a probe opened with ``sync`` (the target's
  ``sync = true``); ioping ``-WWW`` without ``-C``, which times ``pwrite`` + ``fdatasync``.

After prepare the benchmark waits for the page cache's writeback to finish (``sync``, then
Dirty + Writeback below 16 MiB, then 5 s) before the first round. The md comparison follows
(bench_md.py), on a pool of its own.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.bench_md import compare_burst, compare_md, md_table, syscall_costs
from bench.workspaces import (
    GIB,
    MIB,
    BenchTarget,
    cleanup,
    filesystem_of,
    loop_ext4,
    machine,
    prepare,
    settle,
    write_config,
)
from slowdown.probe.probes.data import DataProbe

DEFAULT_DIR = Path("/var/tmp/slowdown-bench-probe")
GOAL_RATIO = 0.05  # ours within 5% of ioping's median ...
GOAL_ABS = 20e-6  # ... or within 20 us
TABLE_HEAD = ("| what | ours | ioping | difference | ratio | ratio of each run | goal "
              "| met? |")


# --- the two sides -----------------------------------------------------------------------


@dataclass(frozen=True)
class Kind:
    key: str
    what: str
    ioping_flags: tuple[str, ...]
    goal: bool


READ = Kind("read", "1 MiB O_DIRECT random read", (), True)
READ_FADVISE = Kind("read, fadvised", "1 MiB O_DIRECT random read, ours calling "
                   "posix_fadvise(DONTNEED) on the block before each read (outside the timer) "
                   "as ioping does", (), False)
WRITE = Kind("write", "1 MiB O_DIRECT random write of fresh bytes (no fdatasync)",
             ("-WWW", "-C"), True)
WRITE_SYNC = Kind("write+fdatasync", "1 MiB O_DIRECT random write of fresh bytes + fdatasync "
                  "(sync = true)", ("-WWW",), True)


def ours(probe: DataProbe, kind: Kind, n: int) -> list[float]:
    """``n`` latencies (seconds) timed as the worker times them; one warm-up op dropped."""
    clock = time.perf_counter
    prep = None
    if kind is READ:
        call = probe.read_block
    elif kind is READ_FADVISE:
        # The probe's own offset choice, run by hand so that the fadvise of ioping's loop
        # (outside its timer) comes between choosing the block and reading it.
        fd, bs, bufs, pick = probe.fileno(), probe.block_size, probe._bufs, probe._randbelow
        nblocks = probe.blocks
        offsets = [0]

        def prep(i: int) -> None:
            offsets[0] = pick(nblocks) * bs
            os.posix_fadvise(fd, offsets[0], bs, os.POSIX_FADV_DONTNEED)

        def call() -> None:
            if os.preadv(fd, bufs, offsets[0]) != bs:
                raise OSError("short read")
    else:  # a write (with fdatasync when the probe was opened with sync, as sync = true)
        call = probe.write_block

        def prep(i: int) -> None:
            probe.fresh_bytes()  # as the worker does, outside the timer

    out = []
    for i in range(n + 1):
        if prep is not None:
            prep(i)
        t0 = clock()
        call()
        out.append(clock() - t0)
    return out[1:]


def ioping_command(path: Path, kind: Kind, n: int) -> list[str]:
    return ["ioping", "-D", "-s", "1m", "-c", str(n + 1), "-i", "0", "-B", "-p", "1",
            *kind.ioping_flags, str(path)]


def ioping(path: Path, kind: Kind, n: int) -> tuple[list[float], float]:
    """``n`` per-request latencies (seconds) and ioping's own -B average (seconds)."""
    done = subprocess.run(ioping_command(path, kind, n), capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"ioping failed ({done.returncode}): {done.stderr.strip()}")
    lines = [line.split() for line in done.stdout.splitlines() if line.strip()]
    # Batch line: count sum_ns iops bps min avg max mdev total wall_ns; with -p 1 one per
    # request (count 1, avg = its time), then the run's summary.
    *per_request, summary = lines
    times = [int(f[5]) / 1e9 for f in per_request if f[0] == "1"]
    if len(times) != n or int(summary[0]) != n:
        raise SystemExit(f"ioping printed {len(times)} requests, expected {n}:\n{done.stdout}")
    return times, int(summary[5]) / 1e9


def compare(path: Path, kind: Kind, rounds: int, n: int) -> dict[str, Any]:
    """Alternate ours and ioping ``rounds`` times, ``n`` ops each, on ``path``."""
    rows = []
    with DataProbe(path, sync=kind is WRITE_SYNC) as probe:
        if probe.mode != "direct":
            raise SystemExit(f"{path}: the filesystem refuses O_DIRECT; nothing to compare")
        for r in range(rounds):
            mine = ours(probe, kind, n)
            theirs, their_mean = ioping(path, kind, n)
            rows.append({"round": r + 1, "ours": statistics.median(mine),
                         "ioping": statistics.median(theirs),
                         "ours_mean": statistics.fmean(mine), "ioping_mean": their_mean})
    med_ours = statistics.median(r["ours"] for r in rows)
    med_theirs = statistics.median(r["ioping"] for r in rows)
    diff = med_ours - med_theirs
    ratio = med_ours / med_theirs
    paired = statistics.median(r["ours"] / r["ioping"] for r in rows)
    wins = sum(r["ours"] < r["ioping"] for r in rows)
    met = abs(diff) <= GOAL_ABS or abs(ratio - 1) <= GOAL_RATIO
    return {"kind": kind.key, "what": kind.what, "goal": kind.goal, "rounds": rows,
            "ours": med_ours, "ioping": med_theirs, "diff": diff, "ratio": ratio,
            "met": met, "n": n, "paired_ratio": paired, "ours_faster": wins,
            "command": " ".join(ioping_command(path, kind, n))}


# --- report ------------------------------------------------------------------------------


def us(seconds: float) -> str:
    return f"{seconds * 1e6:,.0f} us"


def summarise(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (file, kind) over the runs: medians of the runs' figures."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in results:
        groups.setdefault((r["where"], r["kind"]), []).append(r)
    rows = []
    for runs in groups.values():
        first = runs[0]
        ours_med = statistics.median(r["ours"] for r in runs)
        theirs_med = statistics.median(r["ioping"] for r in runs)
        ratio = statistics.median(r["ratio"] for r in runs)
        diff = ours_med - theirs_med
        rows.append({"where": first["where"], "kind": first["kind"], "what": first["what"],
                     "goal": first["goal"], "runs": runs, "ours": ours_med,
                     "ioping": theirs_med, "diff": diff, "ratio": ratio,
                     "met": abs(diff) <= GOAL_ABS or abs(ratio - 1) <= GOAL_RATIO})
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    out = [TABLE_HEAD, "|" + "---|" * 8]
    for r in rows:
        runs = r["runs"]
        goal = "within 5% or 20 us" if r["goal"] else "(information)"
        met = ("yes" if r["met"] else "**NO**") if r["goal"] else "-"
        of = (f"median of {len(runs)} runs' medians of {len(runs[0]['rounds'])} round medians"
              if len(runs) > 1 else f"median of {len(runs[0]['rounds'])} round medians")
        each = ", ".join(f"{x['ratio']:.3f}" for x in runs)
        out.append(f"| {r['where']}: {r['what']}, {of} | {us(r['ours'])} | {us(r['ioping'])} "
                   f"| {r['diff'] * 1e6:+,.0f} us | {r['ratio']:.3f} | {each} | {goal} | {met} |")
    return "\n".join(out)


def runs_table(rows: list[dict[str, Any]]) -> str:
    n = max(len(r["runs"]) for r in rows)
    out = ["Each run: ours / ioping, median of the round medians (ours had the lower median in "
           "k of the rounds):", "", "| what | " + " | ".join(f"run {i + 1}" for i in range(n))
           + " |", "|---|" + "---|" * n]
    for r in rows:
        cells = [f"{us(x['ours'])} / {us(x['ioping'])} ({x['ours_faster']}/{len(x['rounds'])})"
                 for x in r["runs"]]
        out.append(f"| {r['where']}: {r['kind']} | " + " | ".join(cells) + " |")
    out.append("\nioping command of each round: `"
               + "`, `".join(dict.fromkeys(x["command"] for r in rows for x in r["runs"])) + "`")
    return "\n".join(out)


def report(results: list[dict[str, Any]], header: list[str]) -> str:
    rows = summarise(results)
    return "\n".join([*header, "", table(rows), "", runs_table(rows), ""])


# --- main --------------------------------------------------------------------------------


def bench_file(where: str, path: Path, kinds: Sequence[Kind], rounds: int, n: int,
               progress: Callable[[str], None],
               done: Callable[[dict[str, Any]], None], run: int = 1) -> None:
    for kind in kinds:
        progress(f"run {run}, {where}: {kind.key}, {rounds} rounds of {n} ops per side")
        result = compare(path, kind, rounds, n)
        result["where"], result["run"] = where, run
        done(result)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="64 MiB file, 1 run of 3 rounds of 20 ops (smoke test)")
    parser.add_argument("--dir", type=Path, default=None,
                        help=f"where the workspaces go (default {DEFAULT_DIR}; the root disk)")
    parser.add_argument("--size", default=None, help="data.bin size in GiB (default 4)")
    parser.add_argument("--runs", type=int, default=None,
                        help="runs of every comparison, one after another (5)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds per comparison (25)")
    parser.add_argument("--ops", type=int, default=None, help="ops per side and round (200)")
    parser.add_argument("--loop", action="store_true",
                        help="also on a loop-mounted ext4 image in --dir (needs root)")
    parser.add_argument("--keep", action="store_true",
                        help="keep the workspaces (and image) for the next run")
    parser.add_argument("--json", type=Path, default=None, help="also write results here")
    parser.add_argument("--md-dir", type=Path, default=None,
                        help="where the md pool goes (default: DIR/md, the root disk)")
    parser.add_argument("--md-objects", type=int, default=None,
                        help="md objects per side (120; --quick 4)")
    parser.add_argument("--md-only", action="store_true",
                        help="only the md probe against md-workbench")
    args = parser.parse_args(argv)
    if shutil.which("ioping") is None:
        raise SystemExit("ioping is not installed (apt-get install -y ioping)")
    size = int(float(args.size) * GIB) if args.size else (64 * MIB if args.quick else 4 * GIB)
    size -= size % MIB
    runs = args.runs or (1 if args.quick else 5)
    rounds = args.rounds or (3 if args.quick else 25)
    n = args.ops or (20 if args.quick else 200)
    base = (args.dir or DEFAULT_DIR).resolve()
    made_base = not base.exists()
    base.mkdir(parents=True, exist_ok=True)

    def progress(text: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)

    kinds = () if args.md_only else (READ, READ_FADVISE, WRITE, WRITE_SYNC)
    targets = [BenchTarget("root", base / "root", size)]
    config = write_config(base / "bench-probe.toml", base / "bench-probe.db", targets)
    header = machine()
    results: list[dict[str, Any]] = []
    md: dict[str, Any] = {}
    md_target = BenchTarget("md", (args.md_dir or base / "md").resolve(), MIB,
                            pool_files=2000, pool_dirs=1)
    md_config = write_config(base / "bench-probe-md.toml", base / "bench-probe.db",
                             [md_target])

    def done(result: dict[str, Any]) -> None:
        """Keep each comparison as it ends: a later failure (the loop mount) loses nothing."""
        results.append(result)
        if args.json:
            args.json.write_text(json.dumps({"header": header, "results": results, "md": md},
                                            indent=1))
        progress(f"  ours {us(result['ours'])}, ioping {us(result['ioping'])}, "
                 f"ratio {result['ratio']:.3f}")

    try:
        with contextlib.ExitStack() as stack:
            files = []
            if kinds:
                progress(f"preparing {size / GIB:.2f} GiB data.bin in {targets[0].path}")
                took = prepare(config)
                settle(1.0 if args.quick else 5.0)
                files.append(("root disk", targets[0].data))
                header.append(f"root disk: {files[0][1]} on {filesystem_of(files[0][1])}, "
                              f"{files[0][1].stat().st_size / GIB:.2f} GiB (prepared in "
                              f"{took:.0f} s)")
            if args.loop and kinds:
                image, mnt = base / "ext4.img", base / "mnt"
                stack.enter_context(loop_ext4(image, mnt, size + size // 8 + 256 * MIB,
                                              args.keep))
                loop_target = BenchTarget("loop", mnt / "loop", size)
                loop_config = write_config(base / "bench-probe-loop.toml",
                                           base / "bench-probe.db", [loop_target])
                stack.callback(loop_config.unlink, missing_ok=True)
                if not args.keep:
                    stack.callback(cleanup, loop_config)
                progress(f"preparing {size / GIB:.2f} GiB data.bin in {loop_target.path}")
                took = prepare(loop_config)
                settle(1.0 if args.quick else 5.0)
                files.append(("loop ext4", loop_target.data))
                header.append(f"loop ext4: {loop_target.data} on "
                              f"{filesystem_of(loop_target.data)} (image {image} on "
                              f"{filesystem_of(base)}; prepared in {took:.0f} s)")
            for run in range(1, runs + 1):
                for where, data in files:
                    bench_file(where, data, kinds, rounds, n, progress, done, run)
            stack.callback(md_config.unlink, missing_ok=True)
            if not args.keep:
                stack.callback(cleanup, md_config)
            prepare(md_config)
            settle(1.0 if args.quick else 5.0)  # every object written out: what a delete finds
            ws = md_target.data.parent
            objects = args.md_objects or (4 if args.quick else 120)
            progress(f"md probe and md-workbench alternately on {ws / 'md'}")
            md.update(compare_md(ws, md_target.pool_files, 3901, objects,
                                 0.2 if args.quick else 1.0, progress))
            md["burst"] = compare_burst(ws, md_target.pool_files, 3901,
                                        20 if args.quick else 150, 2 if args.quick else 5)
            md["costs"] = syscall_costs(ws, 3901, 50 if args.quick else 2000)
            header.append(f"md pool: {ws / 'md'} on {filesystem_of(ws)}, 1 data set of "
                          f"{md_target.pool_files} objects of 3901 bytes")
    finally:
        if not args.keep:
            if kinds:
                cleanup(config)
            config.unlink(missing_ok=True)
            if made_base:
                with contextlib.suppress(OSError):
                    base.rmdir()
    with open("/proc/loadavg") as f:
        header.append(f"load average at end: {' '.join(f.read().split()[:3])}")
    version = subprocess.run(["ioping", "-v"], capture_output=True, text=True)
    header.append(f"anchor: {(version.stdout + version.stderr).strip()}")
    if args.json:
        args.json.write_text(json.dumps({"header": header, "results": results, "md": md},
                                        indent=1))
    print(report(results, header) if results else "\n".join(header))
    print(md_table(md, md["costs"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
