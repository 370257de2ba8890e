"""Who the CephFS client of a mount is (its configuration, name, keyring, filesystem), and
read-only questions to the monitors asked as that client, bounded in time.

The mount says who it is: ceph-fuse's command line (``-c``/``--conf``, ``--id``/``-i``,
``--name``/``-n``, ``--keyring``/``-k``, ``--client_fs``; as ``mount.fuse.ceph`` passes
``ceph.id=`` options, ``--id=probe`` too), found as the ceph-fuse process of our mount
namespace whose mount point is the target's; the kernel client's mount options (``name=``,
``fs=``/``mds_namespace=``, or the ``name@fsid.fs=/`` source). What neither says comes from
``CEPH_ARGS`` and Ceph's defaults (/etc/ceph/ceph.conf, client.admin), as for the ``ceph``
command. The questions go through ``ceph_mon.py`` run by the ``ceph`` command's own
interpreter (no shell; argv lists; a timeout kills it).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

HELPER = Path(__file__).with_name("ceph_mon.py")
TIMEOUT = 5.0  # seconds for the monitors' connection and each command
OPTIONS = {"-c": "conf", "--conf": "conf", "-i": "id", "--id": "id", "--user": "id",
           "-n": "name", "--name": "name", "-k": "keyring", "--keyring": "keyring",
           "--client_fs": "fs", "--client-fs": "fs", "--client_mds_namespace": "fs"}


class CephError(Exception):
    """A question the cluster did not answer (no client, no monitor, a refusal)."""


@dataclass(frozen=True)
class CephClient:
    """The identity a mount's client uses: '' where Ceph's default applies."""

    conf: str = ""
    name: str = ""
    keyring: str = ""
    fs: str = ""

    def start(self, commands: list[dict], timeout: float = TIMEOUT) -> Pending:
        """Ask ``commands`` in a helper process and return at once; the answers come with
        ``Pending.result`` (its input and output in unlinked files, so no pipe fills)."""
        argv = [interpreter(), str(HELPER), self.conf, self.name, self.keyring,
                str(int(timeout))]
        # the files outlive this call: Pending.result closes them
        stdin, out, err = (tempfile.TemporaryFile("w+") for _ in range(3))  # noqa: SIM115
        stdin.write("".join(json.dumps(c) + "\n" for c in commands))
        stdin.seek(0)
        try:
            proc = subprocess.Popen(argv, stdin=stdin, stdout=out, stderr=err, text=True,
                                    env=os.environ.copy())
        except OSError as exc:
            for f in (stdin, out, err):
                f.close()
            raise CephError(f"cannot ask the monitors: {exc}") from None
        stdin.close()
        return Pending(proc, out, err, len(commands), time.monotonic(),
                       timeout * 2 + len(commands) * 0.05)

    def ask(self, commands: list[dict], timeout: float = TIMEOUT) -> list[tuple[int, str, str]]:
        """The monitors' answers to ``commands``, waiting for them."""
        pending = self.start(commands, timeout)
        pending.done(wait=pending.limit)
        return pending.result()


@dataclass
class Pending:
    """A helper process at work: ``done`` says whether it ended (killing it past ``limit``
    seconds), ``result`` gives its answers in order: (ret, output, status)."""

    proc: subprocess.Popen
    out: IO[str]
    err: IO[str]
    count: int
    started: float
    limit: float

    def done(self, wait: float = 0.0) -> bool:
        try:
            self.proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            if time.monotonic() - self.started < self.limit:
                return False
            self.proc.kill()  # a monitor that never answers: SIGKILL ends librados at once
            self.proc.wait()
        return True

    def result(self) -> list[tuple[int, str, str]]:
        """The answers; CephError when the helper failed or was killed."""
        try:
            self.out.seek(0)
            self.err.seek(0)
            lines, errors = self.out.read().splitlines(), self.err.read()
        finally:
            self.out.close()
            self.err.close()
        if self.proc.returncode != 0:
            last = (errors.strip().splitlines() or ["no message"])[-1]
            raise CephError(f"the monitors did not answer (exit {self.proc.returncode}): "
                            f"{last}")
        answers = [tuple(json.loads(line)) for line in lines if line]
        if len(answers) != self.count:
            raise CephError(f"{len(answers)} answers to {self.count} commands")
        return answers  # type: ignore[return-value]


def interpreter() -> str:
    """The Python that runs the ``ceph`` command: the one with Ceph's ``rados`` binding."""
    ceph = shutil.which("ceph")
    if ceph is None:
        raise CephError("no ceph command (ceph-common) on this host")
    with open(ceph, "rb") as f:
        first = f.readline(200)
    if first.startswith(b"#!"):
        words = first[2:].decode(errors="replace").split()
        if words and words[0].endswith("/env") and len(words) > 1:
            return shutil.which(words[1]) or words[1]
        if words:
            return words[0]
    return "/usr/bin/python3"


def mount_of(target: Path, mountinfo: str | None = None) -> tuple[str, str, str, str] | None:
    """(mount point, fstype, source, super options) of the mount holding ``target``."""
    if mountinfo is None:
        mountinfo = Path("/proc/self/mountinfo").read_text()
    path = os.path.realpath(target)
    best = None
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        point = left.split()[4].replace("\\040", " ")
        fstype, source, options = ([*right.split(), "", "", ""])[:3]
        inside = path == point or path.startswith(point.rstrip("/") + "/")
        if inside and (best is None or len(point) >= len(best[0])):
            best = (point, fstype, source, options)
    return best


def from_argv(argv: list[str]) -> dict[str, str]:
    """The identity options of a ceph-fuse command line (both ``--id x`` and ``--id=x``)."""
    found: dict[str, str] = {}
    i = 1
    while i < len(argv):
        word = argv[i]
        key, sep, value = word.partition("=")
        if key in OPTIONS and sep:
            found[OPTIONS[key]] = value
        elif word in OPTIONS and i + 1 < len(argv):
            found[OPTIONS[word]] = argv[i + 1]
            i += 1
        i += 1
    return found


def _fuse_argv(point: str) -> list[str] | None:
    """The command line of the ceph-fuse process serving ``point`` in our mount namespace."""
    try:
        ours = os.readlink("/proc/self/ns/mnt")
    except OSError:
        ours = None
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip() != "ceph-fuse":
                continue
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
            words = [w for w in argv.split("\0") if w]
        except OSError:
            continue
        try:  # another user's namespace link is not ours to read: then the path alone tells
            theirs = os.readlink(f"/proc/{pid}/ns/mnt")
        except OSError:
            theirs = None
        if ours is not None and theirs is not None and theirs != ours:
            continue
        positional = [w for w in words[1:] if not w.startswith("-")]
        if any(os.path.realpath(w) == point for w in positional):
            return words
    return None


def client_of(target: Path) -> CephClient:
    """The identity of the client of the CephFS mount holding ``target``."""
    mount = mount_of(target)
    if mount is None:
        raise CephError(f"{target}: no mount holds it")
    point, fstype, source, options = mount
    if fstype != "ceph" and not fstype.startswith("fuse.ceph"):
        raise CephError(f"{target}: not on a CephFS mount ({fstype} at {point})")
    found: dict[str, str] = {}
    if fstype.startswith("fuse.ceph"):
        argv = _fuse_argv(point)
        if argv is not None:
            found = from_argv(argv)
    elif fstype == "ceph":
        for option in options.split(","):
            key, _, value = option.partition("=")
            if key == "name":
                found["id"] = value
            elif key in ("fs", "mds_namespace"):
                found["fs"] = value
        if "@" in source:  # name@fsid.fsname=/path (the new device syntax)
            user, _, rest = source.partition("@")
            found.setdefault("id", user)
            fs = rest.partition("=")[0].partition(".")[2]
            if fs:
                found.setdefault("fs", fs)
    for key, value in from_argv(["ceph", *shlex.split(os.environ.get("CEPH_ARGS", ""))]).items():
        found.setdefault(key, value)  # what the mount does not say, CEPH_ARGS may
    name = found.get("name", "")
    if not name and found.get("id"):
        name = f"client.{found['id']}"
    return CephClient(found.get("conf", ""), name, found.get("keyring", ""), found.get("fs", ""))


__all__ = ["CephClient", "CephError", "Pending", "client_of", "from_argv", "interpreter",
           "mount_of"]
