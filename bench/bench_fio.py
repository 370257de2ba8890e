"""Benchmark of ``slowdown import-fio`` against Debian's fiologparser_hist.py, and on 30 million
raw latency samples.

Run from the repository root with the package importable (installed, or on PYTHONPATH)::

    python -m bench.bench_fio --runs 3            # the figures of docs/BENCHMARKS-fio.md
    python -m bench.bench_fio --quick             # small sizes, a few seconds

1. Histogram logs, the same files for both tools: the real fio 3.33 sample of
   ../shared/data/fio (4 jobs, 20 s, 100 ms logs), and the same logs as a cluster of
   ``--hosts`` hosts (a copy per host directory). fiologparser_hist.py runs in its default
   (weighted) mode against ``--weighted``, and with ``--noweight`` against the default end
   mode (``--offset-ms 10`` so that both cut intervals alike). Every pair of outputs is
   checked to agree within one bin before its time counts.
2. Latency logs: ``--lat-files`` files of 30 million lines in all, written here in fio's exact
   format (``time, value, ddir, bs, prio``) with latencies drawn from a real fio run of this
   machine (``fio`` runs for 3 s; or ``--lat-source`` names an existing ``_clat`` log), at
   ``--iops`` per file and 1 ms time resolution; merged into 1 s intervals of exact
   percentiles, CSV to a file.

Each tool runs as a fresh process (interpreter start and imports included, as a user sees
it; import-fio through the ``slowdown`` command's entry point, its modules' bytecode cached
as an installed package's is, in ``DIR/pycache``): wall time, CPU time (user + system) and
peak resident memory from ``wait4``. A figure is the median over ``--runs``, after one
untimed run of each command; the load average before each benchmark is printed, since a
shared machine's other work shows in wall times.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import io
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT.parent / "shared" / "data" / "fio"
FIOLOGPARSER = Path("/usr/share/doc/fio/fiologparser_hist.py.gz")
SLOWDOWN = "import sys; from slowdown.analysis.cli.main import main; sys.exit(main())"
LAT_GOAL_S = 3.0
RATIO_GOAL = 10.0


@dataclass
class Run:
    wall: float
    cpu: float
    rss_mib: float


ENV = dict(os.environ)  # run() points PYTHONPYCACHEPREFIX into its directory


def measure(argv: list[str], stdout: Path | None = None) -> Run:
    """One process: wall time, user + system CPU and peak RSS (from wait4)."""
    with tempfile.TemporaryFile() as errors, \
            open(stdout or os.devnull, "wb") as out:
        start = time.perf_counter()
        process = subprocess.Popen(argv, stdout=out, stderr=errors, env=ENV)
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - start
        process.returncode = os.waitstatus_to_exitcode(status)
        if process.returncode != 0:
            errors.seek(0)
            raise SystemExit(f"{' '.join(argv[:4])}... failed:\n{errors.read().decode()}")
    return Run(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024)


def median_run(argv: list[str], runs: int, stdout: Path | None = None) -> Run:
    measure(argv, stdout)  # untimed: bytecode written, files in the page cache
    results = [measure(argv, stdout) for _ in range(runs)]
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


def cluster(work: Path, hosts: int) -> list[Path]:
    files = []
    for host in range(1, hosts + 1):
        directory = work / "hosts" / f"n{host}"
        directory.mkdir(parents=True, exist_ok=True)
        for log in sorted(SAMPLES.glob("h_clat_hist.*.log")):
            shutil.copy(log, directory / log.name)
            files.append(directory / log.name)
    return files


def bench_histograms(work: Path, runs: int, hosts: int, weighted_hosts: int) -> list[dict]:
    script = work / "fiologparser_hist.py"
    script.write_bytes(gzip.decompress(FIOLOGPARSER.read_bytes()))
    theirs = [sys.executable, str(script)]
    sample = sorted(SAMPLES.glob("h_clat_hist.*.log"))
    many = cluster(work, hosts)
    cases = [
        ("sample, 4 jobs", sample, True),
        (f"{weighted_hosts} hosts x 4 jobs", many[:4 * weighted_hosts], True),
        ("sample, 4 jobs", sample, False),
        (f"{hosts} hosts x 4 jobs", many, False),
    ]
    results = []
    bins = len(sample[0].read_text().split("\n", 1)[0].split(",")) - 3
    for name, files, weighted in cases:
        size = sum(f.stat().st_size for f in files)
        mine, reference = work / "ours.csv", work / "theirs.csv"
        if weighted:
            our_args, their_args = ours("--weighted", *files), [*theirs, *map(str, files)]
        else:
            our_args = ours("--offset-ms", 10, *files)
            their_args = [*theirs, "--noweight", *map(str, files)]
        before = load()
        a = median_run(our_args, runs, mine)
        b = median_run(their_args, runs, reference)
        same_within_a_bin(mine, reference, bins)
        results.append({"case": name, "mode": "weighted" if weighted else "end / --noweight",
                        "files": len(files), "mib": size / 2**20, "ours": a, "theirs": b,
                        "load": before})
    return results


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
    """What each tool spends before it reads a line: the interpreter and its imports."""
    return {
        "import-fio": median_run([sys.executable, "-c", "import slowdown.analysis.cli.main, "
                                  "slowdown.analysis.cli.import_fio, numpy"], runs),
        "fiologparser_hist.py": median_run([sys.executable, "-c", "import pandas, numpy"],
                                           runs),
    }


def report(histograms: list[dict], latencies: dict | None, runs: int,
           floors: dict[str, Run]) -> str:
    lines = [
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}, numpy {np.__version__}; median of {runs} runs, each a "
        "fresh process (start and imports included).",
        "",
        "Start-up alone (interpreter and imports, no input): " + ", ".join(
            f"{tool} {run.wall:.3f} s" for tool, run in floors.items()) + ".",
        "",
        "| logs | mode | files | MiB | import-fio | fiologparser_hist.py | ratio (wall) | "
        "ratio (CPU) | goal | met? | load |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | ---: |",
    ]
    for r in histograms:
        a, b = r["ours"], r["theirs"]
        ratio = b.wall / a.wall
        lines.append(
            f"| {r['case']} | {r['mode']} | {r['files']} | {r['mib']:.1f} | "
            f"{a.wall:.2f} s ({a.rss_mib:.0f} MiB) | {b.wall:.2f} s ({b.rss_mib:.0f} MiB) | "
            f"{ratio:.1f}x | {b.cpu / a.cpu:.1f}x | >= {RATIO_GOAL:.0f}x | "
            f"{'yes' if ratio >= RATIO_GOAL else '**NO**'} | {r['load']} |")
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
    parser.add_argument("--hosts", type=int, default=32, help="hosts of the large end-mode case")
    parser.add_argument("--weighted-hosts", type=int, default=2,
                        help="hosts of the large weighted case (fiologparser_hist.py's "
                             "weighting grows with the square of the lines it holds)")
    parser.add_argument("--lat-lines", type=int, default=30_000_000)
    parser.add_argument("--lat-files", type=int, default=8)
    parser.add_argument("--iops", type=int, default=6250, help="latency-log lines per second")
    parser.add_argument("--lat-source", type=Path, default=None,
                        help="a real fio _clat log to draw latencies from")
    parser.add_argument("--dir", type=Path, default=None,
                        help="work directory (kept; the latency logs are reused from it)")
    parser.add_argument("--skip-latency", action="store_true")
    args = parser.parse_args(argv)
    if args.quick:
        args.runs, args.hosts, args.weighted_hosts, args.lat_lines = 1, 2, 1, 400_000
    work = args.dir or Path(tempfile.mkdtemp(prefix="bench-fio-"))
    work.mkdir(parents=True, exist_ok=True)
    ENV.pop("PYTHONDONTWRITEBYTECODE", None)
    ENV["PYTHONPYCACHEPREFIX"] = str(work / "pycache")
    try:
        histograms = bench_histograms(work, args.runs, args.hosts, args.weighted_hosts)
        latencies = None if args.skip_latency else bench_latencies(
            work, args.runs, args.lat_lines, args.lat_files, args.iops, args.lat_source)
        print(report(histograms, latencies, args.runs, start_floors(max(args.runs, 5))))
    finally:
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
