"""Fault-injection filesystems for tests: a FUSE passthrough driven from the test.

    with FaultFS(tmp_path / "backing", tmp_path / "mnt") as fs:
        fs.delay(["read"], 0.05)          # every read through the mount takes 50 ms more
        fs.fail(["write"], "ENOSPC", path="pool/*")
        fs.hang(["getattr"], path="data.bin")
        fs.wait_hung()                    # a client is now blocked in the server
        fs.release()                      # ... and continues

The server (tests/kit/faultfs/server.py) runs in its own process started with
subprocess.Popen: never in a pytest thread (libfuse takes over SIGINT and SIGTERM) nor a
multiprocessing child (one stuck in the kernel keeps the runner from exiting). Faults
pass through a JSON control file that the driver replaces atomically; the server checks
it on every operation, so a new rule applies to the very next operation. Up to 64 calls
can hang at once while the others go on.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from .mounts import mount_fstype, run, wait_unmounted

__all__ = ["FaultFS", "mount_fstype"]

SERVER = Path(__file__).with_name("server.py")


def _validate(rules: list[dict[str, Any]]) -> None:
    # Imported here: importing the server module with the package would make
    # `python -m tests.kit.faultfs.server` warn that it runs an already imported module.
    from .server import parse_rules

    parse_rules(rules)


def _ops(ops: str | list[str]) -> list[str]:
    return [ops] if isinstance(ops, str) else list(ops)


class FaultFS:
    """A FUSE mount of `backing` on `mountpoint` whose operations can be slowed, failed or hung.

    Rules are dicts as documented in tests/kit/faultfs/server.py; `delay`, `fail` and `hang`
    add one and return it (pass it to `release` to remove just that one). `ops` is a
    list of operation names (or one name, or "*"); `path` a glob relative to the mount root.
    """

    def __init__(self, backing: Path, mountpoint: Path, start_timeout: float = 10.0, *,
                 subtype: str = "faultfs", statfs: dict[str, int] | None = None) -> None:
        """`subtype`: the mount shows as ``fuse.<subtype>`` in mountinfo (``ceph-fuse`` to
        look like a CephFS client); `statfs`: statvfs fields answered in place of the backing's
        (``{"f_favail": -1}`` as ceph-fuse says of free inodes)."""
        # Resolve now: resolving later could stat a hung mount from the test process.
        self.backing = Path(backing).resolve()
        self.subtype = subtype
        self.statfs = dict(statfs or {})
        self.mountpoint = Path(mountpoint).resolve()
        self.start_timeout = start_timeout
        self._rules: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._dir: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    # --- lifecycle ------------------------------------------------------------
    def __enter__(self) -> FaultFS:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def control(self) -> Path:
        """The control file (outside the mount, so the server never waits on itself)."""
        if self._dir is None:
            raise RuntimeError("FaultFS is not started")
        return self._dir / "rules.json"

    @property
    def log(self) -> str:
        """The server's stderr so far (for error messages)."""
        if self._dir is None:
            return ""
        with contextlib.suppress(OSError):
            return (self._dir / "server.log").read_text(errors="replace")
        return ""

    def start(self) -> FaultFS:
        """Mount; return once the mount is in /proc/self/mountinfo, else raise with the log."""
        if self._proc is not None:
            raise RuntimeError("FaultFS already started")
        if shutil.which("fusermount3") is None:
            raise RuntimeError("fusermount3 not found: apt-get install fuse3 "
                               "(see tests/kit/faultfs/REQUIREMENTS.txt)")
        if importlib.util.find_spec("mfusepy") is None:
            raise RuntimeError("mfusepy not installed: pip install mfusepy "
                               "(see tests/kit/faultfs/REQUIREMENTS.txt)")
        if mount_fstype(self.mountpoint) is not None:
            raise RuntimeError(f"{self.mountpoint} is already a mount point")
        self.backing.mkdir(parents=True, exist_ok=True)
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        self._dir = Path(tempfile.mkdtemp(prefix="faultfs-"))
        self._rules = []
        self._write()
        with open(self._dir / "server.log", "wb") as logf:
            self._proc = subprocess.Popen(
                [sys.executable, str(SERVER), str(self.backing), str(self.mountpoint),
                 str(self.control), "--subtype", self.subtype,
                 "--statfs", json.dumps(self.statfs)],
                stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                env=dict(os.environ, FUSE_LIBRARY_NAME="fuse3"),
                start_new_session=True,  # a Ctrl-C in the runner must not unmount under a test
            )
        deadline = time.monotonic() + self.start_timeout
        while mount_fstype(self.mountpoint) != f"fuse.{self.subtype}":
            rc = self._proc.poll()
            if rc is not None or time.monotonic() > deadline:
                log = self.log
                self.stop()
                why = f"exited with {rc}" if rc is not None else f"not up in {self.start_timeout} s"
                raise RuntimeError(f"faultfs server {why} mounting {self.mountpoint}:\n{log}")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        """Kill the server, unmount, and check the mount is gone. Safe to call twice.

        The server is killed before its rules are cleared: every client still blocked
        then fails at once with ECONNABORTED (later calls get ENOTCONN), whereas
        clearing first would race each hung call between completing and failing.
        """
        proc, self._proc = self._proc, None
        stuck = False
        if proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                stuck = True  # in the kernel on the backing fs; unmount all the same
        if self._dir is not None:
            self._rules = []  # releases the hung calls of a server that did not die
            with contextlib.suppress(OSError):
                self._write()
        try:
            if mount_fstype(self.mountpoint) is not None:
                try:
                    run(["fusermount3", "-u", "-z", str(self.mountpoint)])
                except RuntimeError:
                    run(["umount", "-l", str(self.mountpoint)])
                wait_unmounted(self.mountpoint)
        finally:
            if self._dir is not None and not stuck:
                shutil.rmtree(self._dir, ignore_errors=True)
                self._dir = None
        if stuck:
            raise RuntimeError(f"faultfs server {proc.pid} survived SIGKILL for 10 s")

    # --- faults ---------------------------------------------------------------
    def set_rules(self, rules: list[dict[str, Any]]) -> None:
        """Replace all rules (validated here, so a typo fails in the test, not the server)."""
        _validate(rules)
        with self._lock:
            self._rules = [dict(r) for r in rules]
            self._write()

    def add(self, rule: dict[str, Any]) -> dict[str, Any]:
        """Add one rule after the others; return it."""
        _validate([rule])
        with self._lock:
            self._rules.append(dict(rule))
            self._write()
        return rule

    def delay(self, ops: str | list[str], seconds: float, path: str | None = None
              ) -> dict[str, Any]:
        """Make matching operations `seconds` slower (per FUSE request, not per syscall)."""
        return self.add(self._rule(ops, path, delay=seconds))

    def fail(self, ops: str | list[str], errno_name: str, path: str | None = None
             ) -> dict[str, Any]:
        """Fail matching operations with `errno_name` ("EIO", "ENOSPC", ...)."""
        return self.add(self._rule(ops, path, error=errno_name))

    def hang(self, ops: str | list[str], path: str | None = None) -> dict[str, Any]:
        """Block matching operations until this rule is removed (release, clear, set_rules)."""
        return self.add(self._rule(ops, path, hang=True))

    def release(self, rule: dict[str, Any] | None = None) -> None:
        """Remove `rule`, or every rule; operations hung on a removed rule go on (~20 ms)."""
        with self._lock:
            self._rules = [] if rule is None else [r for r in self._rules if r != rule]
            self._write()

    def clear(self) -> None:
        """Remove every rule."""
        self.release()

    @property
    def rules(self) -> list[dict[str, Any]]:
        return [dict(r) for r in self._rules]

    def hung(self) -> list[dict[str, Any]]:
        """Operations blocked by a hang rule right now: [{"op", "path", "since"}]."""
        try:
            return json.loads(Path(f"{self.control}.hung").read_text())
        except (FileNotFoundError, ValueError):
            return []

    def wait_hung(self, count: int = 1, timeout: float = 5.0) -> list[dict[str, Any]]:
        """Wait until at least `count` operations hang in the server; return them."""
        deadline = time.monotonic() + timeout
        while len(ops := self.hung()) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(ops)} of {count} operations hung after {timeout:g} s")
            time.sleep(0.01)
        return ops

    @staticmethod
    def _rule(ops: str | list[str], path: str | None, **fault: Any) -> dict[str, Any]:
        rule: dict[str, Any] = {"ops": _ops(ops), **fault}
        if path is not None:
            rule["path"] = path
        return rule

    def _write(self) -> None:
        """Replace the control file atomically: the server must never read half a file."""
        tmp = self.control.with_suffix(".tmp")
        tmp.write_text(json.dumps(self._rules))
        os.replace(tmp, self.control)
