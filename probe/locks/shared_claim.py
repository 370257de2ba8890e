"""An exclusive claim made on a shared filesystem: which node writes the shared data file.

Many nodes may run prepare at the same moment; one of them may write a target's shared data
file. The claim is a small file made with O_CREAT | O_EXCL, an exclusive create that every
filesystem slowdown probes keeps across clients (NFSv3 and later, Lustre, GPFS, CephFS);
flock and fcntl locks are not carried between nodes everywhere (Lustre without `-o flock`).
It says who holds it, as JSON: host, pid, boot id, since, a random token. The holder beats:
it touches the file (its mtime) while it works, at most every BEAT_EVERY seconds, and checks
at each beat that the claim is still its own.

A claim is stale, and another prepare may take it over, when its holder is known to be gone
(the same host: its pid no longer runs, or the host has booted since) or when it has not
beaten for STALE_AFTER seconds (another host cannot be asked; mtimes are read against this
host's clock, so a clock skew far below STALE_AFTER does not matter). A takeover replaces the
file atomically (rename) and reads it back: of two nodes taking over at once one keeps it,
and the former holder, should it come back, finds at its next beat that it has lost the
claim (ClaimLost) and stops. Releasing removes the file only while it is still ours.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from slowdown.analysis.atomic_write import replace_whole
from slowdown.analysis.machine import boot_id
from slowdown.probe.layout.errors import WorkspaceError
from slowdown.probe.layout.names import tmp_path

STALE_AFTER = 300.0  # seconds without a beat before another host may take a claim over
BEAT_EVERY = 5.0  # seconds between two beats of a holder

_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class ClaimLost(WorkspaceError):
    """Another prepare took the claim over (ours looked stale to it); stop writing."""


@dataclass(frozen=True)
class ClaimHolder:
    """Who holds a claim, as its file says, and when it last beat (the file's mtime)."""

    host: str
    pid: int
    boot: str
    since: float
    token: str
    beat: float

    def describe(self, now: float | None = None) -> str:
        now = time.time() if now is None else now
        since = time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(self.since))
        return (f"host {self.host} (pid {self.pid}, since {since}, last sign of life "
                f"{max(0, now - self.beat):.0f} s ago)")

    def stale(self, host: str, now: float | None = None) -> bool:
        """Whether the holder is gone: for certain on this host, by its silence elsewhere."""
        now = time.time() if now is None else now
        if host == self.host and self.pid > 0:
            if self.boot and self.boot != boot_id():
                return True  # this host has booted since
            try:
                os.kill(self.pid, 0)
            except ProcessLookupError:
                return True
            except PermissionError:
                pass  # runs, as another user
        return now - self.beat > STALE_AFTER


def holder_of(path: Path) -> ClaimHolder | None:
    """The holder of the claim at `path`, None when there is none. A file that cannot be
    read as a claim (a holder killed between creating and writing it) has an unknown holder
    that is stale once its mtime is STALE_AFTER old."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        st = os.fstat(fd)
        data = os.read(fd, 4096)
    finally:
        os.close(fd)
    try:
        obj = json.loads(data)
        return ClaimHolder(str(obj["host"]), int(obj["pid"]), str(obj.get("boot", "")),
                      float(obj["since"]), str(obj["token"]), st.st_mtime)
    except (ValueError, KeyError, TypeError):
        return ClaimHolder("(unknown)", 0, "", st.st_mtime, "", st.st_mtime)


class Claim:
    """A claim this process holds; `beat()` while working, `release()` when done."""

    def __init__(self, path: Path, host: str, token: str) -> None:
        self.path = path
        self.host = host
        self.token = token
        self._last_beat = time.monotonic()

    def beat(self, *, force: bool = False) -> None:
        """Show a sign of life (at most every BEAT_EVERY s unless forced); ClaimLost when
        the claim is no longer ours."""
        now = time.monotonic()
        if not force and now - self._last_beat < BEAT_EVERY:
            return
        holder = holder_of(self.path)
        if holder is None or holder.token != self.token:
            who = "nobody" if holder is None else holder.describe()
            raise ClaimLost(f"{self.path}: the claim was taken over by {who}; stopped")
        os.utime(self.path)
        self._last_beat = now

    def release(self) -> None:
        """Remove the claim file, if it is still ours."""
        holder = holder_of(self.path)
        if holder is not None and holder.token == self.token:
            os.unlink(self.path)

    def __enter__(self) -> Claim:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _content(host: str, token: str) -> bytes:
    return json.dumps({"host": host, "pid": os.getpid(), "boot": boot_id(),
                       "since": time.time(), "token": token}).encode() + b"\n"


def try_claim(path: Path, host: str) -> Claim | ClaimHolder:
    """Take the claim at `path` (creating it, or taking over a stale one): the Claim, or
    the live ClaimHolder of someone else's claim."""
    token = secrets.token_hex(16)
    try:
        fd = os.open(path, _CREATE, 0o644)
    except FileExistsError:
        holder = holder_of(path)
        if holder is not None and not holder.stale(host):
            return holder
        # Stale (or gone meanwhile): replace it whole, then see whose it is.
        with suppress(FileNotFoundError):  # another takeover renamed the same temporary file
            replace_whole(path, _content(host, token), 0o644, temp=tmp_path(path))
        now = holder_of(path)
        if now is None:
            return try_claim(path, host)
        return Claim(path, host, token) if now.token == token else now
    try:
        data = _content(host, token)
        while data:
            data = data[os.write(fd, data):]
        os.fsync(fd)
    finally:
        os.close(fd)
    return Claim(path, host, token)
