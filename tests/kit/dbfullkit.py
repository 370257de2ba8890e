"""The real service on a database volume that fills up or turns read-only, and what it says
about it in its log."""

from __future__ import annotations

import re
import time

from testdata.datakit import fill as fill_database
from testdata.datakit import lognormal
from tests.kit.reliabilitykit import offset_env, offset_to, snapshot
from tests.kit.servicekit import (
    TargetSpec,
    output,
    probe_cli,
    start_service,
    write_config,
)

WRITE_FAILED = re.compile(r"cannot write the database (\S+) \((.*?)\); probing goes on")


WRITABLE_AGAIN = re.compile(r"database writable again after \d+ s; (\d+) buffered minute "
                            r"records written")


def _service(tmp_path, name, volume, launch_at):
    target = TargetSpec(name, tmp_path / f"target-{name}", data_size="4MiB", pool_files=20,
                        pool_dirs=2)
    target.path.mkdir()
    database = volume / "slowdown.db"
    past = int(time.time()) // 60 * 60 - 86400
    fill_database(database, past, 30, lognormal(0.002), host="testhost", targets=("old",))
    config = write_config(tmp_path / f"{name}.toml", database, [target])
    done = probe_cli(config, "prepare", "--no-progress")
    assert done.returncode == 0, done.stderr
    offset = offset_to(launch_at)
    proc = start_service(config, env=offset_env(offset))
    return proc, database, offset, snapshot(database).minutes


def _said(procs, pattern: re.Pattern) -> list[tuple[list, object]]:
    """What each service, still running, said that matches ``pattern``."""
    found = []
    for proc in procs:
        assert proc.poll() is None, f"the service exited:\n{output(proc)}"
        found.append((pattern.findall(output(proc)), proc))
    return found
