"""What the CephFS resolver's tests share: ceph-fuse mounts of the testbed's cluster in this
process's namespace (the probe's client key, and the admin's for what only an admin may do:
layouts, pins), unmounted at the end; where a byte of a file lies, worked out the long way
(the file laid out stripe unit by stripe unit), and what the cluster says of it as the admin
(``ceph osd map``, ``rados stat``, the object's bytes)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from slowdown.analysis.store.server_records import UNKNOWN
from slowdown.probe.servers.ceph import CephResolver
from tests.kit.testbed.cephbed import CephTestbed

POOL = "cephfs_data"


@contextlib.contextmanager
def fuse_mount(bed: CephTestbed, client: str, name: str) -> Iterator[Path]:
    """``ceph-fuse --id client`` at the testbed's ``name``; unmounted when done."""
    base = bed.ledger.base
    point = base / name
    point.mkdir()
    run = base / "run"
    subprocess.run(["ceph-fuse", "-c", str(bed.ledger.conf), "--id", client,
                    "--pid_file", str(run / f"fuse-{name}.pid"),
                    "--admin_socket", str(run / f"fuse-{name}.asok"),
                    "--log_file", str(base / "log" / f"fuse-{name}.log"), str(point)],
                   check=True, capture_output=True, timeout=60)
    try:
        assert os.path.ismount(point), f"ceph-fuse did not mount {point}"
        yield point
    finally:
        subprocess.run(["umount", "-l", str(point)], check=False, timeout=60)


def write_file(path: Path, mib: int) -> bytes:
    """``mib`` MiB of random bytes, written and synced; the bytes."""
    data = os.urandom(mib << 20)
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    return data


def place(layout: tuple[int, int, int], offset: int) -> tuple[int, int]:
    """(object number, offset in the object) of a byte, laying the file out unit by unit,
    round robin over each object set's objects (su, sc, object size)."""
    su, sc, size = layout
    unit, within = divmod(offset, su)
    object_set, k = divmod(unit, sc * (size // su))
    return object_set * sc + k % sc, (k // sc) * su + within


def admin_map(bed: CephTestbed, obj: str) -> dict:
    return json.loads(bed.server.ceph("osd", "map", POOL, obj, "-f", "json").stdout)


def object_bytes(bed: CephTestbed, obj: str, dest: Path) -> bytes:
    """The object as RADOS holds it (``rados get``, as the admin); raises if it is not."""
    subprocess.run(["rados", "-c", str(bed.ledger.conf), "--id", "admin", "-p", POOL,
                    "stat", obj], check=True, capture_output=True, timeout=60)
    subprocess.run(["rados", "-c", str(bed.ledger.conf), "--id", "admin", "-p", POOL,
                    "get", obj, str(dest)], check=True, capture_output=True, timeout=60)
    return dest.read_bytes()


def wait_subtree(bed: CephTestbed, rank: int, path: str, timeout: float = 60) -> float:
    """Seconds until MDS rank ``rank`` is the authority of the subtree at ``path`` (a pin
    moves it a moment after it is set)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        done = bed.server.ceph("tell", f"mds.{rank}", "get", "subtrees", check=False,
                               timeout=30)
        if done.returncode == 0 and any(
                s["dir"]["path"] == path and s["auth_first"] == rank
                for s in json.loads(done.stdout)):
            return time.monotonic() - t0
        time.sleep(1)
    raise AssertionError(f"rank {rank} is not the authority of {path} after {timeout} s")


def as_nobody(call: Callable[[], str]) -> str:
    """``call()`` in a forked child that runs as ``nobody`` (as the service runs as its own
    user, not root); its result, or the error it raised."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into the test
        try:
            os.close(read)
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            out = call()
        except BaseException as exc:  # said to the parent, who asserts on it
            out = f"error {exc!r}"
        os.write(write, out.encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        out = f.read()
    os.waitpid(pid, 0)
    return out


def settled(resolver: CephResolver, op: str, path: str, offset: int | None,
            timeout: float = 30.0) -> str:
    """What the resolver names once its questions to the monitors are answered (it never
    waits for them itself: ``unknown`` until then); ``unknown`` if still so at ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        got = resolver.server(op, path, offset)
        if got != UNKNOWN or time.monotonic() > deadline:
            return got
        if resolver.wait(1.0):
            time.sleep(0.05)  # nothing in flight: a back-off, or the next step to start
