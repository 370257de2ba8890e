"""Target faults under one running service: it never exits, the faults show in the data.

Four targets probed at once by the real service (a subprocess):
- ``fuse`` (FUSE fault filesystem): an EIO storm on every operation, then ENOSPC on writes and
  creates, then every operation hung for 20 s (abandon_after 5 s: the stuck worker is
  abandoned, another takes over and hangs too, the pile-up stays bounded), then released;
- ``rofs``: an ext4 volume mounted errors=remount-ro that turns read-only under the probes;
- ``gone``: the target directory deleted, workspace and all, under the running service;
- ``healthy``: a plain directory that must not notice any of it.
tests/long/test_hang_long.py hangs a target for 10 minutes.
"""

from __future__ import annotations

import shutil
import time
from collections import Counter

import pytest

from slowdown.analysis.words import OPS
from tests.kit.faultfs import FaultFS
from tests.kit.fixtures_fs import require_root
from tests.kit.reliabilitykit import ext4_volume, snapshot
from tests.kit.servicekit import (
    TargetSpec,
    live,
    output,
    prepared,
    start_live,
    stop_service,
    wait_for,
)

HANG = 20.0
ABANDON_AFTER = 5.0


def totals(database) -> dict[str, dict[str, Counter]]:
    """target -> op -> count, errors, skipped, and the longest latency and stuck age."""
    snap = snapshot(database)
    out: dict[str, dict[str, Counter]] = {}
    for (sid, _), (count, errors, skipped, _, longest, _) in snap.minutes.items():
        _, target, op = snap.series[sid]
        c = out.setdefault(target, {}).setdefault(op, Counter())
        c["count"] += count
        c["errors"] += errors
        c["skipped"] += skipped
        c["longest"] = max(c["longest"], longest or 0)
    for (sid, _), stuck in snap.stuck.items():
        _, target, op = snap.series[sid]
        c = out[target][op]
        c["stuck"] = max(c["stuck"], stuck)
    return out


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_target_faults_never_stop_the_service(tmp_path):
    require_root("target faults")
    with FaultFS(tmp_path / "backing", tmp_path / "mnt") as fs, \
            ext4_volume(tmp_path / "ext4") as volume:
        targets = [
            TargetSpec("fuse", fs.mountpoint, data_size="4MiB", pool_files=20, pool_dirs=2),
            TargetSpec("rofs", volume.point / "probe", data_size="4MiB", pool_files=20,
                       pool_dirs=2),
            TargetSpec("gone", tmp_path / "gone", data_size="4MiB", pool_files=20, pool_dirs=2),
            TargetSpec("healthy", tmp_path / "healthy", data_size="4MiB", pool_files=20,
                       pool_dirs=2),
        ]
        for t in targets[1:]:
            t.path.mkdir()
        config, database = prepared(tmp_path, targets, abandon_after=f"{ABANDON_AFTER:g}s")
        proc = start_live(config, database)
        piled: list[int] = []
        try:
            started = live(database)["started"]
            time.sleep(2)
            fs.fail("*", "EIO")  # an EIO storm: every operation of the fuse target
            volume.fail()  # the rofs target's filesystem turns read-only
            shutil.rmtree(targets[2].path)  # the gone target's directory, workspace and all
            time.sleep(6)
            fs.clear()
            fs.fail(["write", "create"], "ENOSPC")
            time.sleep(5)
            fs.clear()
            time.sleep(2)
            fs.hang("*")
            hang_start = time.time()
            while time.time() - hang_start < HANG:
                state = live(database)["targets"]
                piled.append(state["fuse"]["abandoned_workers"])
                assert proc.poll() is None, output(proc)
                time.sleep(0.5)
            ages = [f["age"] for f in live(database)["targets"]["fuse"]["in_flight"]]
            assert max(ages) >= HANG - 2, ages  # the first hung op, still visible live
            fs.release()
            wait_for(lambda: not live(database)["targets"]["fuse"]["in_flight"], 15,
                     what="the hung target to recover")
            before = live(database)["targets"]["fuse"]["ticks"]
            time.sleep(3)
            state = live(database)["targets"]
            assert state["fuse"]["ticks"] > before and "lat" in state["fuse"]["last"]["md-read"]
            assert proc.poll() is None, output(proc)
            stopped_at = time.time()
            took, err = stop_service(proc)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            fs.clear()
    assert proc.returncode == 0, err
    assert took < 10
    seen = totals(database)
    for target, ops in seen.items():
        print(target, {op: dict(c) for op, c in ops.items()})
    # fuse: the EIO storm and ENOSPC are errors of the ops they hit; the hang is skipped ticks,
    # a stuck age, and the hung op recorded whole when it returned; the pile-up was bounded.
    fuse = seen["fuse"]
    assert all(fuse[op]["errors"] >= 3 for op in OPS), fuse
    assert fuse["data-write"]["errors"] >= 3 + 3 and fuse["md-write"]["errors"] >= 3 + 3, fuse
    assert sum(fuse[op]["skipped"] for op in OPS) >= len(OPS) * (HANG - 3 * ABANDON_AFTER - 3)
    assert max(fuse[op]["stuck"] for op in OPS) >= ABANDON_AFTER
    assert HANG - 2 <= max(fuse[op]["longest"] for op in OPS) <= HANG + 10, fuse
    assert 1 <= max(piled) <= 2, piled
    assert all(fuse[op]["count"] > 0 for op in OPS), fuse  # and it recovered
    assert "EIO" in err and "ENOSPC" in err
    # rofs: writes fail with EROFS, reads go on.
    rofs = seen["rofs"]
    for op in ("data-write", "md-delete", "md-write"):
        assert rofs[op]["errors"] >= 10, (op, rofs[op])
    for op in ("data-read", "md-stat"):
        assert rofs[op]["count"] >= 10, (op, rofs[op])
    assert "EROFS" in err
    # gone: the md probe's files are gone, and then the workspace: every op fails from then
    # on, the data ops too (the worker lets go of the unlinked data file it held open).
    gone = seen["gone"]
    for op in OPS:
        assert gone[op]["errors"] >= 20, (op, gone[op])
    assert gone["data-read"]["count"] <= 5, gone["data-read"]  # ticks before the deletion
    assert "ENOENT" in err
    # healthy: not one tick lost, no error, nothing skipped but for its own slow ops: one of
    # its ops over a second (the root disk busy with other jobs: a 1.7 s write seen) skips a
    # tick; a fault that reached it would skip most of the 20 s hang.
    healthy = seen["healthy"]
    assert all(healthy[op]["errors"] == 0 for op in OPS), healthy
    own_slow = max(healthy[op]["longest"] for op in OPS) > 1.0
    assert all(healthy[op]["skipped"] <= (HANG / 4 if own_slow else 0) for op in OPS), healthy
    expected = stopped_at - started - 2
    assert healthy["data-read"]["count"] >= 0.97 * expected, (healthy, expected)
