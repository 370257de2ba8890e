"""What the numbers alone do not say, said on the line users read: a probed filesystem that is
full (its users' writes fail, while the probe only overwrites blocks it has and may read
healthy), one whose every op fails (ESHUTDOWN: an evicted CephFS client; the slowdown shows
"-" with no op returning), and, with the filesystem remounted read-only under the service,
that no file the probe holds made the remount fail.

One service, four targets: a tmpfs filled to its last byte, a FUSE filesystem that fails
every call with ESHUTDOWN, an ext4 volume remounted read-only while it runs, and a workspace
removed (``rm -rf``) under it; then a fifth, healthy until its client is "evicted" (every call
ESHUTDOWN from a moment on): said at once from the live state, before any minute holds it.
Run by tests/test_scenes.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from slowdown.analysis.units import format_clock
from tests.kit.faultfs import FaultFS
from tests.kit.faultfs.realfs import ext4_image, tmpfs
from tests.kit.servicekit import (
    TargetSpec,
    probe_cli,
    start_live,
    stop_service,
    write_config,
)


def _slowdown(config: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "slowdown.analysis.cli.main", "--config",
                           str(config), *args], capture_output=True, text=True, timeout=60)


def _fill(directory: Path) -> None:
    """Write zeros into a file until the filesystem is full (ENOSPC)."""
    with open(directory / "filler", "wb") as f:
        block = b"\0" * (1 << 16)
        try:
            while True:
                f.write(block)
                f.flush()
        except OSError:
            pass


def scene(tmp_path: Path) -> None:
    """One service, four targets, what each line and check says (AssertionError if not)."""
    with tmpfs(tmp_path / "full", 48 << 20) as full, \
            FaultFS(tmp_path / "backing", tmp_path / "mnt") as fs, \
            FaultFS(tmp_path / "backing2", tmp_path / "mnt2") as evicted, \
            ext4_image(tmp_path / "ext4") as ext4:
        database = tmp_path / "db" / "slowdown.db"
        targets = [TargetSpec("full", Path(full) / "t", data_size="4MiB", pool_files=20,
                              pool_dirs=2),
                   TargetSpec("failing", fs.mountpoint / "t", data_size="4MiB", pool_files=20,
                              pool_dirs=2),
                   TargetSpec("rofs", ext4 / "t", data_size="4MiB", pool_files=20,
                              pool_dirs=2),
                   TargetSpec("removed", tmp_path / "plain" / "t", data_size="4MiB",
                              pool_files=20, pool_dirs=2),
                   TargetSpec("evicted", evicted.mountpoint / "t", data_size="4MiB",
                              pool_files=20, pool_dirs=2)]
        for t in targets:
            t.path.mkdir(parents=True)
        config = write_config(tmp_path / "slowdown.toml", database, targets)
        done = probe_cli(config, "prepare", "--no-progress")
        assert done.returncode == 0, done.stderr
        _fill(Path(full))
        fs.fail("*", "ESHUTDOWN", path="t/*")
        if time.time() % 60 > 45:  # a few probes before the remount, in the same minute
            time.sleep(62 - time.time() % 60)
        proc = start_live(config, database)
        try:
            # Its first minute, not yet written: collecting, and every op of "failing" fails.
            first_check = _slowdown(config, "check", "--target", "failing")
            for _ in range(20):
                if first_check.returncode != 3 or time.time() % 60 > 57:
                    break
                time.sleep(0.5)
                first_check = _slowdown(config, "check", "--target", "failing")
            first_line = _slowdown(config, "--target", "failing").stdout
            time.sleep(3)
            # Nothing of the probe's is open for writing there: the remount is not refused.
            remount = subprocess.run(["mount", "-o", "remount,ro", str(ext4)],
                                     capture_output=True, text=True)
            assert remount.returncode == 0, remount.stderr
            workspace = tmp_path / "plain" / "t" / ".slowdown" / "testhost"
            shutil.rmtree(workspace)  # rm -rf of the workspace under the service
            time.sleep(60 - time.time() % 60 + 3)  # that minute written
            line = _slowdown(config).stdout
            verbose = _slowdown(config, "-v").stdout
            doc = json.loads(_slowdown(config, "--json").stdout)
            check = _slowdown(config, "check")
            check_full = _slowdown(config, "check", "--target", "full", "--full", "100%")
            watch = _slowdown(config, "watch", "--count", "1").stdout
            evicted.fail("*", "ESHUTDOWN", path="t/*")  # its minutes so far all healthy
            gone_at = time.time()
            time.sleep(4)
            gone_line = _slowdown(config, "--target", "evicted").stdout
            gone_check = _slowdown(config, "check", "--target", "evicted")
        finally:
            _, log = stop_service(proc)
            subprocess.run(["mount", "-o", "remount,rw", str(ext4)], check=False)
            fs.clear()
            evicted.clear()
    assert first_check.returncode == 2, first_check.stdout
    assert "collecting since" in first_check.stdout, first_check.stdout
    assert "failing: every op since" in first_check.stdout, first_check.stdout
    assert "collecting since" in first_line and "failing: every op since" in first_line, \
        first_line
    lines = {row.split()[2]: row for row in line.splitlines() if len(row.split()) > 2}
    assert "filesystem 100% full (0B free)" in lines["full"], line
    assert "failing: every op since " in lines["failing"], line  # each op fails now
    assert "(ESHUTDOWN)" in lines["failing"], line
    assert "1m -" in lines["failing"], line
    assert "failing:" in lines["rofs"] and "EROFS" in lines["rofs"], line
    assert "failing:" in lines["removed"] and "ENOENT" in lines["removed"], line
    assert not workspace.exists()  # nothing made again where it was removed
    notes = {t["target"]: t["notes"] for t in doc["targets"]}
    assert any(n.startswith("failing: every op since ") and n.endswith("(ESHUTDOWN)")
               for n in notes["failing"]), notes
    ops = {(t["target"], o["op"]): o for t in doc["targets"] for w in t["windows"]
           if w["window"] == 60 for o in w["ops"]}
    assert ops[("failing", "md-stat")]["error_rate"] == 1.0
    assert ops[("rofs", "data-write")]["errors"] > 0
    assert any("ESHUTDOWN" in row and "failing" in row for row in verbose.splitlines())
    assert check.returncode == 2 and "filesystem 100% full" in check.stdout, check.stdout
    assert "ESHUTDOWN" in check.stdout, check.stdout
    assert check_full.returncode == 2, check_full.stdout  # 100 % is at the level
    assert "failing: every op since " in watch and "100% full" in watch, watch
    # The evicted mount, 4 s after: no window holds a failure yet; the live state says it.
    assert "failing: every op since " in gone_line and "(ESHUTDOWN)" in gone_line, gone_line
    since = gone_line.split("every op since ")[1].split(" (")[0]
    now = time.time()  # the streak began at the first call that failed, within 3 s
    assert since in {format_clock(gone_at + d, now) for d in range(-1, 4)}, (since, gone_at)
    assert gone_check.returncode == 2, gone_check.stdout
    assert "failing: every op since" in gone_check.stdout, gone_check.stdout
    assert "Traceback" not in log, log
    assert os.path.exists(database)
