"""Whole minutes on real directories: the real service on two targets through one whole
minute (its wall clock started at second 50 by libfaketime; the monotonic clock is real),
stopped just after that minute is flushed. A sample per tick in each whole minute, no error,
and neither the data file nor the md pool changed size. Run by tests/test_service.py.
"""

from __future__ import annotations

import os
from pathlib import Path

from tests.kit.reliabilitykit import offset_env, offset_to
from tests.kit.servicekit import TargetSpec, prepared, records, start_service, wait_service

OPS = ("data-read", "data-write", "md-stat", "md-read", "md-delete", "md-write")


def _pool_files(target_path: Path) -> int:
    ws = target_path / ".slowdown" / "testhost" / "md"
    return sum(len(files) for _, _, files in os.walk(ws))


def scene(tmp_path: Path) -> None:
    """The run and its records (raises AssertionError naming what was not so)."""
    targets = [TargetSpec("one", tmp_path / "one"), TargetSpec("two", tmp_path / "two")]
    config, database = prepared(tmp_path, targets)
    data = [t.path / ".slowdown" / name for t in targets  # data_file = "shared", the default
            for name in ("shared/data.bin", "testhost/write.bin")]
    sizes = [p.stat().st_size for p in data]
    objects = [_pool_files(t.path) for t in targets]
    # Run through one whole minute, and stop just after it is flushed: the service's wall
    # clock (libfaketime; the monotonic clock is real) starts at second 50 of a minute, so
    # that a start-up slowed by the tests beside it still begins before the whole minute.
    duration = 10 + 63
    proc = start_service(config, "--duration", f"{duration}s", env=offset_env(offset_to(50)))
    err = wait_service(proc, duration + 30)
    assert proc.returncode == 0, err
    assert [p.stat().st_size for p in data] == sizes, "the data file grew"
    assert [_pool_files(t.path) for t in targets] == objects, "the md pool changed size"
    for t in targets:
        by_op: dict[str, list] = {}
        for rec in records(database, targets=(t.name,)):
            by_op.setdefault(rec.op, []).append(rec)
        assert sorted(by_op) == sorted(OPS)
        for op, recs in by_op.items():
            whole = sorted(recs, key=lambda r: r.start)[1:-1]  # the minutes run through
            assert len(whole) >= 1, (op, [r.start for r in recs])
            for rec in whole:
                # A sample per tick: a tick skipped on a loaded machine (a run that took more
                # than a second) counts too, as the wait it was (docs/WINDOWS.md).
                assert 58 <= rec.histogram.count <= 61, (t.name, op, rec)
                assert rec.errors == 0 and rec.skipped <= 2, (t.name, op, rec)
                assert 1e-7 < rec.histogram.min <= rec.histogram.max < 5.0, (t.name, op, rec)
    assert "data probe in direct mode" in err
