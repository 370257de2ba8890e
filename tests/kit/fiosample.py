"""A fio sample made here with Debian's fio (``apt-get install fio``), once per test session, in
place of third-party logs: four jobs (two random readers, two random writers, 4 KiB psync,
O_DIRECT where the temporary directory's filesystem has it) for a few seconds with histogram
logs every 100 ms, fio's own json+ output of the same run, and a fifth job's log at
``--log_hist_coarseness=3``. The fixture ``fio_sample`` (registered in tests/conftest.py) gives
its paths."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

RUNTIME = 12  # seconds: over ten one-second intervals, inside one minute


@dataclass(frozen=True)
class FioSample:
    logs: Path
    hist: list[Path]  # h_clat_hist.{1..4}.log: jobs rd, rd, wr, wr
    coarse: Path  # a randread job's log at coarseness 3
    jsonplus: Path  # fio's --output-format=json+ of the run, the five jobs in order


def make_sample(base: Path) -> FioSample:
    assert shutil.which("fio"), \
        "fio is missing: apt-get install fio (tests/kit/fio_requirements.txt)"
    data, logs = base / "data", base / "logs"
    for d in (data, logs, logs / "coarse3"):
        d.mkdir(parents=True)
    for direct in ("1", "0"):  # O_DIRECT where the filesystem has it (not on tmpfs)
        done = subprocess.run(
            ["fio", f"--directory={data}", "--size=16M", "--bs=4k", f"--direct={direct}",
             "--ioengine=psync", "--time_based", f"--runtime={RUNTIME}",
             f"--write_hist_log={logs}/h", "--log_hist_msec=100", "--output-format=json+",
             f"--output={logs}/fio-output-jsonplus.json",
             "--name=rd", "--rw=randread", "--numjobs=2",
             "--name=wr", "--rw=randwrite", "--numjobs=2",
             "--name=coarse", "--rw=randread", "--log_hist_coarseness=3",
             f"--write_hist_log={logs}/coarse3/h"],
            capture_output=True, text=True, timeout=120 + RUNTIME)
        if done.returncode == 0 or "Invalid argument" not in done.stderr:
            break
    assert done.returncode == 0, done.stderr
    shutil.rmtree(data)
    sample = FioSample(logs, [logs / f"h_clat_hist.{n}.log" for n in range(1, 5)],
                       logs / "coarse3" / "h_clat_hist.5.log",
                       logs / "fio-output-jsonplus.json")
    assert all(p.stat().st_size for p in [*sample.hist, sample.coarse, sample.jsonplus])
    return sample


@pytest.fixture(scope="session")
def fio_sample(tmp_path_factory) -> FioSample:
    return make_sample(tmp_path_factory.mktemp("fio-sample"))
