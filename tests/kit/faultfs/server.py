"""FUSE passthrough filesystem that injects faults, for tests.

    python -m tests.kit.faultfs.server BACKING MOUNTPOINT CONTROLFILE [--subtype NAME]
        [--statfs '{"f_favail": -1}']

Every operation on MOUNTPOINT is done on BACKING, after the fault rules in
CONTROLFILE that match it have been applied. CONTROLFILE is a JSON list of rules:

    {"ops": ["read", "write"] or ["*"], "path": "glob relative to the mount root",
     "delay": seconds, "error": "EIO", "hang": true}

Matching rules apply in file order: each sleeps `delay`, then fails the operation with
`error` if it has one. A `hang` rule (its delay and error are ignored) blocks the operation
until the rule is no longer in the file; the operation is then checked again against the
rules in force (so replacing a hang rule by an error rule turns the hang into that error).
`path` is matched with fnmatch (`*` also matches `/`); the mount root is ".". A rule
without `path` matches every path. Operations on two paths (rename, link) match if
either does; calls on an open file match its current path.

The file is reloaded whenever it is replaced (compared by inode, mtime, ctime and size:
the kernel's timestamps are only tick-accurate, so mtime alone can miss a quick second
replace); write it with os.replace. While an operation hangs, the server lists it in
CONTROLFILE.hung (JSON list of {"op", "path", "since"}), so a test can wait until its
client is really blocked instead of sleeping.

Mounted with attr_timeout=0, entry_timeout=0, negative_timeout=0 so the kernel caches
no attributes or names and every stat reaches the server (as a LOOKUP and a GETATTR, so
a getattr rule fires twice per stat). libfuse3 is required: it passes a 1 MiB O_DIRECT
read or write as one request (libfuse2 splits it in eight, multiplying per-op delays).
A file unlinked while still open shows in BACKING as .fuse_hiddenNNNN until it is
closed (libfuse's default, like NFS's silly rename).
"""

from __future__ import annotations

import argparse
import errno
import fnmatch
import json
import logging
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

#: Operation names a rule can name (FUSE operations; fsync covers fdatasync).
OPS = frozenset(
    {
        "access", "chmod", "chown", "create", "flush", "fsync", "getattr", "link",
        "mkdir", "open", "read", "readdir", "readlink", "release", "rename", "rmdir",
        "statfs", "symlink", "truncate", "unlink", "utimens", "write",
    }
)
MAX_THREADS = 64  # libfuse workers, so this many calls can hang while others still run
HANG_POLL = 0.02  # seconds between looks at the control file while an operation hangs
UTIME_NOW = (1 << 30) - 1
UTIME_OMIT = (1 << 30) - 2

log = logging.getLogger("faultfs")


class Rule:
    """One validated fault rule; `key` (its canonical JSON) identifies it across reloads."""

    def __init__(self, raw: Any) -> None:
        if not isinstance(raw, dict):
            raise ValueError(f"rule must be an object, got {raw!r}")
        unknown = set(raw) - {"ops", "path", "delay", "error", "hang"}
        if unknown:
            raise ValueError(f"rule {raw!r}: unknown keys {sorted(unknown)}")
        ops = raw.get("ops")
        if not isinstance(ops, list) or not ops or not all(isinstance(o, str) for o in ops):
            raise ValueError(f"rule {raw!r}: 'ops' must be a non-empty list of names")
        bad = set(ops) - OPS - {"*"}
        if bad:
            raise ValueError(f"rule {raw!r}: unknown ops {sorted(bad)}; known: {sorted(OPS)}")
        self.ops = frozenset(ops)
        self.path = raw.get("path")
        if self.path is not None and not isinstance(self.path, str):
            raise ValueError(f"rule {raw!r}: 'path' must be a string")
        self.delay = raw.get("delay", 0)
        if isinstance(self.delay, bool) or not isinstance(self.delay, (int, float)) or (
            self.delay < 0
        ):
            raise ValueError(f"rule {raw!r}: 'delay' must be seconds >= 0")
        name = raw.get("error")
        self.errno = 0
        if name is not None:
            code = getattr(errno, name, None) if isinstance(name, str) else None
            if not isinstance(code, int) or errno.errorcode.get(code) is None:
                raise ValueError(f"rule {raw!r}: 'error' must be an errno name like 'EIO'")
            self.errno = code
        self.hang = raw.get("hang", False)
        if not isinstance(self.hang, bool):
            raise ValueError(f"rule {raw!r}: 'hang' must be true or false")
        self.key = json.dumps(raw, sort_keys=True)

    def matches(self, op: str, paths: list[str]) -> bool:
        if op not in self.ops and "*" not in self.ops:
            return False
        return self.path is None or any(fnmatch.fnmatchcase(p, self.path) for p in paths)


def parse_rules(raw: Any) -> list[Rule]:
    """Validate a control file's content (shared with the test-side driver)."""
    if not isinstance(raw, list):
        raise ValueError("the control file must hold a JSON list of rules")
    return [Rule(r) for r in raw]


class Control:
    """The rules in force, reloaded when the control file is replaced; the hung-op list."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._stamp: tuple[int, ...] | None = None
        self._rules: list[Rule] = []
        self._hung: dict[int, dict[str, Any]] = {}
        self._hung_path = Path(f"{path}.hung")

    def rules(self) -> list[Rule]:
        try:
            st = os.stat(self.path)
            stamp: tuple[int, ...] | None = (st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size)
        except FileNotFoundError:
            stamp = None  # no control file: no faults (the driver removes it at stop)
        with self._lock:
            if stamp != self._stamp:
                self._stamp = stamp
                self._rules = self._load() if stamp else []
            return self._rules

    def _load(self) -> list[Rule]:
        try:
            return parse_rules(json.loads(self.path.read_text()))
        except (OSError, ValueError) as exc:
            # Keep the old rules: a half-written file is a driver bug, not a reason to drop faults.
            log.error("control file %s ignored: %s", self.path, exc)
            return self._rules

    def hang_started(self, token: int, op: str, paths: list[str]) -> None:
        with self._lock:
            self._hung[token] = {"op": op, "path": paths[0] if paths else None,
                                 "since": time.time()}
            self._publish()

    def hang_ended(self, token: int) -> None:
        with self._lock:
            self._hung.pop(token, None)
            self._publish()

    def _publish(self) -> None:
        tmp = Path(f"{self._hung_path}.tmp")
        try:
            tmp.write_text(json.dumps(list(self._hung.values())))
            os.replace(tmp, self._hung_path)
        except OSError as exc:
            log.error("cannot write %s: %s", self._hung_path, exc)


class FaultOps:
    """mfusepy operations: a passthrough of `backing` with `control`'s faults in front."""

    use_ns = True  # times as integer nanoseconds (float seconds is deprecated in mfusepy)

    def __init__(self, backing: Path, control: Control,
                 statfs: dict[str, int] | None = None) -> None:
        self.backing = str(backing)
        self.control = control
        self.said_statvfs = dict(statfs or {})  # statvfs fields said in place of the backing's

    def _real(self, path: str) -> str:
        return self.backing + path  # FUSE paths are absolute within the mount: "/a/b"

    def _fault(self, op: str, *paths: str | None) -> None:
        rel = [p.lstrip("/") or "." for p in paths if p is not None]
        while True:
            for rule in self.control.rules():
                if not rule.matches(op, rel):
                    continue
                if rule.hang:
                    self._hang(rule, op, rel)
                    break  # re-check against the rules in force after the release
                if rule.delay:
                    time.sleep(rule.delay)
                if rule.errno:
                    raise OSError(rule.errno, os.strerror(rule.errno))
            else:
                return

    def _hang(self, rule: Rule, op: str, rel: list[str]) -> None:
        token = threading.get_ident()
        self.control.hang_started(token, op, rel)
        log.info("hang %s %s", op, rel)
        try:
            while any(r.key == rule.key for r in self.control.rules()):
                time.sleep(HANG_POLL)
        finally:
            self.control.hang_ended(token)
        log.info("released %s %s", op, rel)

    # --- metadata -------------------------------------------------------------
    def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
        self._fault("getattr", path)
        st = os.fstat(fh) if fh is not None else os.lstat(self._real(path))
        keys = ("st_mode", "st_ino", "st_nlink", "st_uid", "st_gid", "st_size",
                "st_blocks", "st_blksize", "st_rdev")
        attrs: dict[str, Any] = {k: getattr(st, k) for k in keys}
        attrs.update(st_atime=st.st_atime_ns, st_mtime=st.st_mtime_ns, st_ctime=st.st_ctime_ns)
        return attrs

    def access(self, path: str, amode: int) -> int:
        self._fault("access", path)
        if not os.access(self._real(path), amode):
            raise OSError(errno.EACCES, os.strerror(errno.EACCES))
        return 0

    def chmod(self, path: str, mode: int) -> int:
        self._fault("chmod", path)
        os.chmod(self._real(path), mode)
        return 0

    def chown(self, path: str, uid: int, gid: int) -> int:
        self._fault("chown", path)
        os.lchown(self._real(path), uid, gid)
        return 0

    def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
        self._fault("utimens", path)
        real = self._real(path)
        if times is None:
            os.utime(real, follow_symlinks=False)
            return 0
        # libfuse passes touch's "now" and "leave alone" as tv_sec 0 with a special tv_nsec.
        st = os.lstat(real)
        now = time.time_ns()
        atime, mtime = (
            now if t == UTIME_NOW else old if t == UTIME_OMIT else t
            for t, old in zip(times, (st.st_atime_ns, st.st_mtime_ns))
        )
        os.utime(real, ns=(atime, mtime), follow_symlinks=False)
        return 0

    def statfs(self, path: str) -> dict[str, int]:
        self._fault("statfs", path)
        sv = os.statvfs(self._real(path))
        keys = ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files",
                "f_ffree", "f_favail", "f_flag", "f_namemax")
        return {k: self.said_statvfs.get(k, getattr(sv, k)) for k in keys}

    # --- names ----------------------------------------------------------------
    def readdir(self, path: str, fh: int) -> list[str]:
        self._fault("readdir", path)
        return [".", "..", *os.listdir(self._real(path))]

    def mkdir(self, path: str, mode: int) -> int:
        self._fault("mkdir", path)
        os.mkdir(self._real(path), mode)
        return 0

    def rmdir(self, path: str) -> int:
        self._fault("rmdir", path)
        os.rmdir(self._real(path))
        return 0

    def unlink(self, path: str) -> int:
        self._fault("unlink", path)
        os.unlink(self._real(path))
        return 0

    def rename(self, old: str, new: str) -> int:
        self._fault("rename", old, new)
        os.rename(self._real(old), self._real(new))
        return 0

    def symlink(self, target: str, source: str) -> int:
        """Create the link `target` (a mount path) holding the text `source`."""
        self._fault("symlink", target)
        os.symlink(source, self._real(target))
        return 0

    def readlink(self, path: str) -> str:
        self._fault("readlink", path)
        return os.readlink(self._real(path))

    def link(self, target: str, source: str) -> int:
        """Create the hard link `target` to the existing `source` (both mount paths)."""
        self._fault("link", target, source)
        os.link(self._real(source), self._real(target))
        return 0

    # --- files ----------------------------------------------------------------
    def open(self, path: str, flags: int) -> int:
        self._fault("open", path)
        # FUSE does not check O_DIRECT alignment and the backing fs may refuse it: drop it.
        return os.open(self._real(path), flags & ~os.O_DIRECT)

    def create(self, path: str, mode: int, flags: int = os.O_WRONLY | os.O_CREAT) -> int:
        self._fault("create", path)
        return os.open(self._real(path), (flags | os.O_CREAT) & ~os.O_DIRECT, mode)

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        self._fault("read", path)
        return os.pread(fh, size, offset)

    def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
        self._fault("write", path)
        return os.pwrite(fh, data, offset)

    def truncate(self, path: str, length: int, fh: int | None = None) -> int:
        self._fault("truncate", path)
        if fh is not None:
            os.ftruncate(fh, length)
        else:
            os.truncate(self._real(path), length)
        return 0

    def fsync(self, path: str, datasync: int, fh: int) -> int:
        self._fault("fsync", path)
        if datasync:
            os.fdatasync(fh)
        else:
            os.fsync(fh)
        return 0

    def flush(self, path: str, fh: int) -> int:
        self._fault("flush", path)
        os.close(os.dup(fh))  # what close(2) does on the backing file, without losing fh
        return 0

    def release(self, path: str, fh: int) -> int:
        try:
            self._fault("release", path)
        finally:
            os.close(fh)  # never leak the backing descriptor, even when the fault says EIO
        return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.kit.faultfs.server", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("backing", type=Path)
    parser.add_argument("mountpoint", type=Path)
    parser.add_argument("control", type=Path)
    parser.add_argument("--subtype", default="faultfs", help="mountinfo shows fuse.SUBTYPE")
    parser.add_argument("--statfs", type=json.loads, default={},
                        help='statvfs fields answered in place of the backing\'s, JSON: '
                             '{"f_favail": -1}')
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="faultfs %(asctime)s %(levelname)s %(message)s")
    log.setLevel(logging.INFO)
    # mfusepy picks the library when imported: force libfuse3 (see the module docstring).
    os.environ["FUSE_LIBRARY_NAME"] = "fuse3"
    try:
        import mfusepy
    except ImportError as exc:
        sys.exit(f"faultfs: cannot import mfusepy ({exc}); pip install mfusepy")
    except OSError as exc:  # mfusepy raises "Unable to find libfuse" at import
        sys.exit(f"faultfs: {exc}; apt-get install fuse3")
    if mfusepy.fuse_version_major != 3:
        sys.exit(f"faultfs: libfuse {mfusepy.fuse_version_major} loaded, libfuse3 needed")
    backing = args.backing.resolve()
    if not backing.is_dir():
        sys.exit(f"faultfs: backing directory {backing} does not exist")
    control = Control(args.control.resolve())
    # Multi-threaded (no -s): a hung operation holds one libfuse worker, others go on.
    # libfuse 3.14 caps the workers at 10 unless told (then an 11th hung call stalls all).
    mfusepy.FUSE(
        FaultOps(backing, control, args.statfs), str(args.mountpoint), foreground=True,
        fsname=args.subtype, subtype=args.subtype, max_threads=MAX_THREADS,
        attr_timeout=0, entry_timeout=0, negative_timeout=0,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
