"""IOR, mdtest and md-workbench built by .ci/build-ior, for tests: from $SLOWDOWN_IOR_SRC (a
tarball or checkout of hpc/ior), else ../shared/vendor beside the project, else a clone of the
public repository."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def ior_bin() -> Path:
    """The directory holding ior, mdtest and md-workbench: $SLOWDOWN_IOR_BIN, or built once."""
    given = os.environ.get("SLOWDOWN_IOR_BIN")
    if given:
        return Path(given)
    done = subprocess.run(
        ["bash", str(ROOT / ".ci" / "build-ior")], capture_output=True, text=True
    )
    if done.returncode:
        raise AssertionError(f".ci/build-ior failed ({done.returncode}):\n{done.stderr}")
    return Path(done.stdout.strip().splitlines()[-1])


def md_workbench(ws: Path, dirs: int, per_dir: int, size: int, iterations: int,
                 *args: str, verify: bool = True) -> tuple[int, str]:
    """Run the real `md-workbench -2` (benchmark phase, one rank) on the pool of workspace
    `ws`, continuing from its status file; return (errors it counted, its output).

    -G is slowdown's seed (probe/layout/md_content.py), so -X verifies what slowdown wrote; the
    run-info file is written relative to the cwd, so it runs from inside the workspace.
    """
    from slowdown.probe.layout.md_content import SEED

    cmd = [str(ior_bin() / "md-workbench"), "-2", "-o", str(ws / "md"), f"-D={dirs}",
           f"-P={per_dir}", f"-S={size}", f"-I={iterations}", "-R=1", f"-G={SEED}",
           "--run-info-file=md-workbench.status", *(["-X"] if verify else []), *args]
    done = subprocess.run(cmd, cwd=ws, capture_output=True, text=True, timeout=120)
    out = done.stdout + done.stderr
    counts = re.findall(r"\((\d+) errs", out)
    if done.returncode != 0 or not counts:
        raise AssertionError(f"md-workbench failed ({done.returncode}): {out}")
    return sum(int(n) for n in counts), out


def sleep_until(t: float) -> None:
    time.sleep(max(0.0, t - time.time()))


def mdtest_hard(seconds: int, ranks: int = 2, directory: str = "load/mdt_hard") -> list[str]:
    """IO500's mdtest-hard write phase: 3,901-byte files in one shared directory, stopped
    after ``seconds`` (stonewall), from ``ranks`` processes; two loads at once need two
    directories (mdtest names its files by rank)."""
    return ["mpiexec", "--allow-run-as-root", "--oversubscribe", "-np", str(ranks),
            str(ior_bin() / "mdtest"), "-n", "1000000", "-t", "-w", "3901", "-e", "3901",
            "-P", "-N", "1", "-F", "-d", directory, "-C", "-W", str(seconds)]
