"""Benchmark of ``slowdown import-fio`` against Debian's fiologparser_hist.py, and on 30 million
raw latency samples.

Run from the repository root with the package importable (installed, or on PYTHONPATH)::

    python -m bench.bench_fio --runs 5 --skip-latency     # docs/BENCHMARKS-fio.md's ladder
    python -m bench.bench_fio --quick                      # small sizes, a few seconds

1. Histogram logs, the same files and the same command line for both tools, at each of
   ``--sizes``: the real fio 3.33 sample of ../shared/data/fio (4 jobs, 20 s, 100 ms logs,
   4.3 MiB; ``--sample DIR`` names another) made 1, 2, 4, 8, 16 and 32 times as long (4.3 to
   137 MiB: each copy follows the one before, its times shifted); optionally the same logs
   as a cluster of ``--hosts`` hosts (a copy per host directory) in end mode. Both tools run
   with no options (both weighted) and with ``--noweight``. Every pair of outputs is checked
   to agree within one bin before its time counts.
2. Latency logs: ``--lat-files`` files of 30 million lines in all, written here in fio's exact
   format (``time, value, ddir, bs, prio``) with latencies drawn from a real fio run of this
   machine (``fio`` runs for 3 s; or ``--lat-source`` names an existing ``_clat`` log), at
   ``--iops`` per file and 1 ms time resolution; merged into 1 s intervals of exact
   percentiles, CSV to a file.

Each tool runs as a fresh process (interpreter start and imports included, as a user sees
it; import-fio through the ``slowdown`` command's entry point, its modules' bytecode cached
as an installed package's is, in ``DIR/pycache``): wall time, CPU time (user + system) and
peak resident memory from ``wait4``. The histogram cases run in interleaved rounds (each
round runs every case, both tools back to back) after one untimed run of each tool; a figure
is the median over ``--runs`` rounds. The load average is printed, since a shared machine's other
work shows in wall times.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import io
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT.parent / "shared" / "data" / "fio"
FIOLOGPARSER = Path("/usr/share/doc/fio/fiologparser_hist.py.gz")
SLOWDOWN = "import sys; from slowdown.analysis.cli.main import main; sys.exit(main())"
LAT_GOAL_S = 3.0
RATIO_GOAL = 10.0  # over fiologparser_hist.py ...
GOAL_FROM_MIB = 8.0  # ... from this much of logs up


@dataclass
class Run:
    wall: float
    cpu: float
    rss_mib: float


ENV = dict(os.environ)  # run() points PYTHONPYCACHEPREFIX into its directory


# Runs each measured command and reports wall time, CPU and peak RSS from wait4. A separate
# small process, because Linux counts in a child's peak RSS the peak of the memory it was
# started from (subprocess starts children with vfork, and exec keeps the old memory's peak):
# started from this benchmark, with numpy and the logs it reads, every tool would seem to
# need at least as much as the benchmark itself.
LAUNCHER = r"""
import json, os, subprocess, sys, time
for line in sys.stdin:
    job = json.loads(line)
    with open(job["stdout"], "wb") as out, open(job["stderr"], "wb") as err:
        start = time.perf_counter()
        process = subprocess.Popen(job["argv"], stdout=out, stderr=err, env=job["env"])
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - start
    print(json.dumps([wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss,
                      os.waitstatus_to_exitcode(status)]), flush=True)
"""
_launcher: list[subprocess.Popen] = []


def measure(argv: list[str], stdout: Path | None = None, env: dict | None = None) -> Run:
    """One process: wall time, user + system CPU and peak RSS (from wait4)."""
    if not _launcher:
        _launcher.append(subprocess.Popen([sys.executable, "-S", "-c", LAUNCHER],
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          text=True))
    launcher = _launcher[0]
    with tempfile.NamedTemporaryFile() as errors:
        job = {"argv": argv, "stdout": str(stdout or os.devnull), "stderr": errors.name,
               "env": {**ENV, **(env or {})}}
        launcher.stdin.write(json.dumps(job) + "\n")
        launcher.stdin.flush()
        wall, cpu, rss_kib, code = json.loads(launcher.stdout.readline())
        if code != 0:
            raise SystemExit(f"{' '.join(argv[:4])}... failed:\n"
                             f"{Path(errors.name).read_text()}")
    return Run(wall, cpu, rss_kib / 1024)


def median_run(argv: list[str], runs: int, stdout: Path | None = None,
               env: dict | None = None) -> Run:
    measure(argv, stdout, env)  # untimed: bytecode written, files in the page cache
    results = [measure(argv, stdout, env) for _ in range(runs)]
    return Run(statistics.median(r.wall for r in results),
               statistics.median(r.cpu for r in results),
               max(r.rss_mib for r in results))


def ours(*args: object) -> list[str]:
    return [sys.executable, "-c", SLOWDOWN, "import-fio", "--no-progress", *map(str, args)]


def load() -> str:
    try:
        return Path("/proc/loadavg").read_text().split()[0]
    except OSError:
        return "?"


# -- 1. histogram logs against fiologparser_hist.py ---------------------------------------------

def _rows(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(path.read_text()), skipinitialspace=True))


def same_within_a_bin(mine: Path, theirs: Path, bins: int) -> None:
    """Refuse to time two tools that do not compute the same thing."""
    from slowdown.analysis.fio.layout import Layout

    layout = Layout.from_bins(bins)
    a, b = _rows(mine), _rows(theirs)
    if not a or [r["end-time"] for r in a] != [r["end-time"] for r in b]:
        raise SystemExit(f"{mine} and {theirs} hold different intervals")
    for x, y in zip(a, b):
        for name in ("median", "90%", "95%", "99%"):
            value = float(y[name])
            width = layout.width[layout.index(np.array([int(value)]))[0]]
            if abs(float(x[name]) - value) > width:
                raise SystemExit(f"{name} at {x['end-time']}: {x[name]} against {value}")


def sample_logs(sample: Path) -> list[Path]:
    return sorted(sample.glob("h_clat_hist.*.log"))


def span_ms(log: Path) -> int:
    """A log's span in whole seconds (its last line's time, rounded up), in milliseconds."""
    lines = log.read_bytes().splitlines()
    return -(-int(lines[-1].split(b",", 1)[0]) // 1000) * 1000


def long_logs(work: Path, copies: int, sample: Path) -> list[Path]:
    """The sample's logs made ``copies`` times as long: copy ``k`` of each file follows the
    one before it, its times shifted by ``k`` times the sample's span (fio's exact format,
    only the time field rewritten). Reused when present."""
    directory = work / f"long{copies}"
    files = [directory / log.name for log in sample_logs(sample)]
    if (directory / "done").exists():
        return files
    directory.mkdir(parents=True, exist_ok=True)
    for source, target in zip(sample_logs(sample), files):
        lines = source.read_bytes().splitlines(keepends=True)
        span = span_ms(source)
        with open(target, "wb") as f:
            for k in range(copies):
                for line in lines:
                    time_ms, rest = line.split(b",", 1)
                    f.write(b"%d,%s" % (int(time_ms) + k * span, rest))
    (directory / "done").write_text("")
    return files


def cluster(work: Path, hosts: int, sample: Path) -> list[Path]:
    """The sample's 4 logs as ``hosts`` hosts' (a copy per host directory), all in the same
    20 s: fiologparser_hist.py's weighting grows with the square of the lines it holds at
    once, so its weighted mode is measured on long logs only."""
    files = []
    for host in range(1, hosts + 1):
        directory = work / "hosts" / f"n{host}"
        directory.mkdir(parents=True, exist_ok=True)
        for log in sample_logs(sample):
            if not (directory / log.name).exists():
                shutil.copy(log, directory / log.name)
            files.append(directory / log.name)
    return files


@dataclass
class Case:
    name: str
    mode: str  # "weighted" or "noweight"
    files: list[Path]
    ours: list[Run] = field(default_factory=list)
    theirs: list[Run] = field(default_factory=list)
    before: list[Run] = field(default_factory=list)

    @property
    def mib(self) -> float:
        return sum(f.stat().st_size for f in self.files) / 2**20

    def argv(self, script: Path) -> tuple[list[str], list[str]]:
        """The same command line for both tools: no options (both weighted), or --noweight."""
        options = [] if self.mode == "weighted" else ["--noweight"]
        files = list(map(str, self.files))
        return ours(*options, *files), [sys.executable, str(script), *options, *files]

    def before_argv(self, tree: Path) -> list[str]:
        """import-fio of an earlier source tree, whose default was end mode: ``--weighted``
        for fiologparser_hist.py's default, ``--offset-ms 10`` for its ``--noweight``."""
        options = ["--weighted"] if self.mode == "weighted" else ["--offset-ms", "10"]
        return ["env", f"PYTHONPATH={tree}", *ours(*options, *map(str, self.files))]


def bench_histograms(work: Path, runs: int, sizes: list[int], hosts: int,
                     modes: list[str], before: Path | None = None, sample: Path = SAMPLES
                     ) -> tuple[list[Case], list[str]]:
    """Every case side by side, in interleaved rounds: in each round every case runs once,
    ours and theirs back to back (which goes first alternates), so that a change in the
    machine's load falls on both tools alike. Before: the files read once (page cache) and
    one untimed run of each tool and mode (bytecode). The first round's outputs are checked
    to agree within a bin."""
    script = work / "fiologparser_hist.py"
    script.write_bytes(gzip.decompress(FIOLOGPARSER.read_bytes()))
    logs = sample_logs(sample)
    seconds, jobs = span_ms(logs[0]) // 1000, len(logs)
    cases = [Case(f"{copies * seconds} s x {jobs} jobs", mode, long_logs(work, copies, sample))
             for copies in sizes for mode in modes]
    if hosts:
        cases.append(Case(f"{hosts} hosts x {jobs} jobs, {seconds} s", "noweight",
                          cluster(work, hosts, sample)))
    bins = len(cases[0].files[0].read_text().split("\n", 1)[0].split(",")) - 3
    for case in cases:  # files into the page cache; each tool's bytecode written
        for path in case.files:
            with open(path, "rb") as f:
                while f.read(1 << 20):
                    pass
    for mode in modes:
        first = next(c for c in cases if c.mode == mode)
        for argv in [*first.argv(script), *([first.before_argv(before)] if before else [])]:
            measure(argv)
    loads = [load()]
    for number in range(runs):
        for index, case in enumerate(cases):
            mine, theirs = case.argv(script)
            pair = [("ours", mine), ("theirs", theirs)]
            if (number + index) % 2:
                pair.reverse()
            for tool, argv in pair:
                getattr(case, tool).append(measure(argv, work / f"{tool}.csv"))
            if number == 0:
                same_within_a_bin(work / "ours.csv", work / "theirs.csv", bins)
            if before is not None:
                case.before.append(measure(case.before_argv(before), work / "before.csv"))
                if number == 0 and (work / "before.csv").read_bytes() != \
                        (work / "ours.csv").read_bytes():
                    raise SystemExit(f"{case.name}, {case.mode}: the output differs from the "
                                     "earlier tree's")
        loads.append(load())
    return cases, loads


# -- 2. 30 million raw latency samples ----------------------------------------------------------

def real_latencies(work: Path, source: Path | None) -> np.ndarray:
    """Latencies (ns) of a real fio run: ``source``, or fio run here for 3 s."""
    if source is None:
        if shutil.which("fio") is None:
            raise SystemExit("fio is missing (apt-get install fio), or give --lat-source")
        data, logs = work / "data", work / "lat-source"
        data.mkdir(exist_ok=True)
        logs.mkdir(exist_ok=True)
        subprocess.run(["fio", f"--directory={data}", "--size=16M", "--bs=4k", "--direct=1",
                        "--ioengine=psync", "--time_based", "--runtime=3",
                        f"--write_lat_log={logs}/l", "--log_avg_msec=0", "--name=rd",
                        "--rw=randrw", "--output=/dev/null"], check=True)
        source = logs / "l_clat.1.log"
    return np.loadtxt(source, delimiter=",", dtype=np.int64, usecols=(1, 2), ndmin=2)


def write_latency_logs(work: Path, total: int, files: int, iops: int,
                       source: Path | None) -> list[Path]:
    """``files`` logs of ``total`` lines in all, in fio's exact format, reused when present."""
    per = total // files
    paths = [work / f"l_clat.{n}.log" for n in range(1, files + 1)]
    stamp = work / f"lat-{total}-{files}-{iops}.done"
    if stamp.exists() and all(p.exists() for p in paths):
        return paths
    real = real_latencies(work, source)
    rng = np.random.default_rng(7)
    seconds = per / iops
    for path in paths:
        times = np.sort(rng.integers(0, int(seconds * 1000), per))
        pick = rng.integers(0, real.shape[0], per)
        lines = map("%d, %d, %d, 4096, 0".__mod__,
                    zip(times.tolist(), real[pick, 0].tolist(), real[pick, 1].tolist()))
        with open(path, "w") as f:
            f.write("\n".join(lines))
            f.write("\n")
    stamp.write_text("")
    return paths


def bench_latencies(work: Path, runs: int, total: int, files: int, iops: int,
                    source: Path | None) -> dict:
    paths = write_latency_logs(work, total, files, iops, source)
    size = sum(p.stat().st_size for p in paths)
    out = work / "lat.csv"
    before = load()
    run = median_run(ours("-i", 1000, "-o", out, "--force", *paths), runs)
    rows = _rows(out)
    samples = sum(int(r["samples"]) for r in rows)
    if samples != total - total % files:
        raise SystemExit(f"import-fio counted {samples} samples of {total}")
    return {"lines": samples, "files": files, "mib": size / 2**20, "intervals": len(rows),
            "run": run, "load": before}


# -- report --------------------------------------------------------------------------------------

def start_floors(runs: int) -> dict[str, Run]:
    """What each tool spends before it reads a line: the interpreter and its imports; and
    what any Python tool built on click and numpy spends before it does anything."""
    blas = {"OPENBLAS_NUM_THREADS": "1"}  # as `slowdown` sets it
    return {
        "import-fio": median_run([sys.executable, "-c", "import slowdown.analysis.cli.main, "
                                  "slowdown.analysis.cli.import_fio, numpy"], runs),
        "fiologparser_hist.py": median_run([sys.executable, "-c", "import pandas, numpy"],
                                           runs),
        "python alone": median_run([sys.executable, "-c", "pass"], runs),
        "python, click and numpy": median_run(
            [sys.executable, "-c", "import click, numpy"], runs, env=blas),
    }


def _median(runs: list[Run]) -> Run:
    return Run(statistics.median(r.wall for r in runs), statistics.median(r.cpu for r in runs),
               max(r.rss_mib for r in runs))


def report(cases: list[Case], loads: list[str], latencies: dict | None, runs: int,
           floors: dict[str, Run]) -> str:
    before = all(case.before for case in cases)
    lines = [
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}, numpy {np.__version__}; median of {runs} runs, each a "
        "fresh process (start and imports included), in interleaved rounds; peak RSS is the "
        "largest of the runs.",
        "",
        "Start-up alone (no input): " + ", ".join(
            f"{tool} {run.wall:.3f} s" for tool, run in floors.items()) + ".",
        "",
        f"Load average before the rounds and after each: {', '.join(loads)}.",
        "",
        "| logs | mode | files | MiB | import-fio | fiologparser_hist.py | ratio (wall) | "
        "ratio (CPU) | goal | met? |" + (" before | ratio before |" if before else ""),
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |"
        + (" ---: | ---: |" if before else ""),
    ]
    for case in cases:
        a, b = _median(case.ours), _median(case.theirs)
        ratio = b.wall / a.wall
        counts = case.mib >= GOAL_FROM_MIB
        goal = f">= {RATIO_GOAL:.0f}x" if counts else "-"
        met = ("yes" if ratio >= RATIO_GOAL else "**NO**") if counts else "-"
        mode = "none (weighted)" if case.mode == "weighted" else "--noweight"
        lines.append(
            f"| {case.name} | {mode} | {len(case.files)} | {case.mib:.1f} | "
            f"{a.wall:.3f} s ({a.rss_mib:.0f} MiB) | {b.wall:.2f} s ({b.rss_mib:.0f} MiB) | "
            f"{ratio:.1f}x | {b.cpu / a.cpu:.1f}x | {goal} | {met} |"
            + (f" {_median(case.before).wall:.3f} s | {b.wall / _median(case.before).wall:.1f}x |"
               if before else ""))
    if latencies is not None:
        run = latencies["run"]
        lines += [
            "",
            "| latency logs | files | MiB | intervals | wall | CPU | peak RSS | lines/s | goal "
            "| met? | load |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | ---: |",
            f"| {latencies['lines'] / 1e6:g} M samples, 1 s intervals | {latencies['files']} | "
            f"{latencies['mib']:.0f} | {latencies['intervals']} | {run.wall:.2f} s | "
            f"{run.cpu:.2f} s | {run.rss_mib:.0f} MiB | {latencies['lines'] / run.wall / 1e6:.1f} M"
            f" | <= {LAT_GOAL_S:.0f} s | {'yes' if run.wall <= LAT_GOAL_S else '**NO**'} | "
            f"{latencies['load']} |",
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="small sizes, one run")
    parser.add_argument("--sizes", default="1,2,4,8,16,32",
                        help="lengths of the histogram logs, in copies of the 4.3 MiB sample "
                             "(20 s each)")
    parser.add_argument("--modes", default="weighted,noweight",
                        help="weighted (both tools with no options), noweight (both with "
                             "--noweight)")
    parser.add_argument("--hosts", type=int, default=0,
                        help="add an end-mode case of this many hosts' logs (0: none)")
    parser.add_argument("--lat-lines", type=int, default=30_000_000)
    parser.add_argument("--lat-files", type=int, default=8)
    parser.add_argument("--iops", type=int, default=6250, help="latency-log lines per second")
    parser.add_argument("--lat-source", type=Path, default=None,
                        help="a real fio _clat log to draw latencies from")
    parser.add_argument("--dir", type=Path, default=None,
                        help="work directory (kept; the logs are reused from it)")
    parser.add_argument("--sample", type=Path, default=SAMPLES,
                        help="the directory of the fio histogram logs h_clat_hist.N.log "
                             f"(default {SAMPLES}, the sample of docs/BENCHMARKS-fio.md)")
    parser.add_argument("--skip-latency", action="store_true")
    parser.add_argument("--floor-runs", type=int, default=5,
                        help="runs of each start-up floor (no input)")
    parser.add_argument("--before", type=Path, default=None, metavar="DIR",
                        help="also time import-fio of an earlier tree (DIR holds slowdown/"
                             "analysis, as PYTHONPATH) in the same rounds; it must print the "
                             "same bytes (e.g. commit 2bceea3, whose default was end mode)")
    args = parser.parse_args(argv)
    if args.quick:
        args.runs, args.sizes, args.hosts, args.lat_lines = 1, "1,2", 0, 400_000
    sizes = [int(n) for n in args.sizes.split(",")]
    modes = args.modes.split(",")
    if set(modes) - {"weighted", "noweight"}:
        parser.error(f"--modes: weighted and/or noweight, not {args.modes}")
    work = args.dir or Path(tempfile.mkdtemp(prefix="bench-fio-"))
    work.mkdir(parents=True, exist_ok=True)
    ENV.pop("PYTHONDONTWRITEBYTECODE", None)
    ENV["PYTHONPYCACHEPREFIX"] = str(work / "pycache")
    try:
        cases, loads = bench_histograms(work, args.runs, sizes, args.hosts, modes,
                                        args.before, args.sample)
        latencies = None if args.skip_latency else bench_latencies(
            work, args.runs, args.lat_lines, args.lat_files, args.iops, args.lat_source)
        print(report(cases, loads, latencies, args.runs, start_floors(args.floor_runs)))
    finally:
        for launcher in _launcher:
            launcher.stdin.close()
            launcher.wait()
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
