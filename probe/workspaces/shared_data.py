"""The shared data file of a target: `<target>/.slowdown/shared/` (data.bin, MANIFEST).

With data_file = "shared" (the default of a configured target) the nodes of a cluster read one
data file per target instead of each writing its own: the footprint of the large file does not
grow with the number of nodes, nor with their memory. It is written once, by the first node's
prepare, read at random by every node's data probe (read-only), and never written by a probe:
each node's writes go to the write.bin of its own workspace (manifest.py, probes/data.py).

One writer: a prepare that finds the file missing, unfinished or smaller than its data_size
takes the claim `.slowdown/shared.claim` (locks/shared_claim.py: an exclusive create; a stale claim
of a node that died is taken over) and writes the rest, resumable like a workspace
(workspaces/data_file.py: from the last whole stamped block). A prepare that finds the claim held by
a live node does not wait unless asked to: it prepares its own workspace and reports the shared file
as "busy", held by host X; the probes of that node start once the file is ready. The MANIFEST is
written before data.bin (complete = false) and names the host that created the file; its
`data.size` is what is ready to read, and it only grows. A directory `shared/` made before
the first prepare (to set its Lustre striping) is used and, at cleanup, left in place.
"""

from __future__ import annotations

import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from slowdown.probe.layout.errors import ForeignWorkspaceError, WorkspaceError
from slowdown.probe.layout.manifest import (
    SHARED_STATE_FILES,
    SharedManifest,
    read_ours,
    read_shared_manifest,
    write_shared_manifest,
)
from slowdown.probe.layout.names import DATA_NAME, SHARED_DIR
from slowdown.probe.layout.path_safety import lstat_or_none, require_dir, require_ours
from slowdown.probe.locks.shared_claim import ClaimHolder, try_claim
from slowdown.probe.workspaces.data_file import verified_length, write_data
from slowdown.probe.workspaces.progress_bar import progress_bar
from slowdown.probe.workspaces.space import check_space, estimate

if TYPE_CHECKING:
    from rich.console import Console

    from slowdown.analysis.config import Target

CLAIM_NAME = "shared.claim"  # in .slowdown/, beside the workspaces and shared/
WAIT_POLL = 5.0  # seconds between two looks at a shared file another node is writing


@dataclass
class SharedReport:
    """What prepare found or did to the shared data file."""

    path: Path  # the shared data.bin
    action: str  # "created", "resumed", "extended", "unchanged" (ready) or "busy"
    size: int = 0  # bytes ready to read
    written: int = 0
    creator: str | None = None  # the host whose prepare created it
    holder: ClaimHolder | None = None  # who is writing it, when busy

    @property
    def busy(self) -> bool:
        return self.action == "busy"

    def describe(self) -> str:
        from slowdown.analysis.units import format_size

        if self.busy:
            who = self.holder.describe() if self.holder else "another node"
            return (f"shared data file {self.path} is being prepared by {who}; this node's "
                    "probes start once it is ready: run prepare again later (or with --wait)")
        done = f", {format_size(self.written)} written" if self.written else ""
        by = f", created by host {self.creator}" if self.creator else ""
        return f"shared data file {self.path} {self.action} ({format_size(self.size)}{by}{done})"


def shared_paths(target: Target) -> tuple[Path, Path]:
    """(`.slowdown/`, `.slowdown/shared/`) of a target."""
    shared = Path(target.path) / ".slowdown" / SHARED_DIR
    return shared.parent, shared


def inspect_shared(shared: Path) -> SharedManifest | None:
    """The shared MANIFEST, None without one (no directory, or one made empty before the first
    prepare); ForeignWorkspaceError for a directory that is not ours or holds other things."""
    st = lstat_or_none(shared)
    if st is None:
        return None
    require_dir(shared, st)
    require_ours(shared, st)
    manifest = read_ours(read_shared_manifest, shared)
    if manifest is None:
        entries = sorted(set(os.listdir(shared)) - set(SHARED_STATE_FILES))
        if entries:
            raise ForeignWorkspaceError(f"{shared} exists without a slowdown MANIFEST (it holds "
                                        f"{entries[:3]}); not touching it")
    return manifest


def _ready(shared: Path, manifest: SharedManifest | None, need: int) -> bool:
    if manifest is None or not manifest.complete or manifest.data_size < need:
        return False
    data = shared / DATA_NAME
    st = lstat_or_none(data)
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise WorkspaceError(f"{data} is not a regular file")
    return st is not None and st.st_size >= manifest.data_size


def prepare_shared(target: Target, host: str, need: int, *, parents: list[str],
                   progress: bool = True, console: Console | None = None) -> SharedReport:
    """Make the target's shared data file at least `need` bytes, unless another node is
    writing it (then "busy"). `.slowdown/` exists; `parents` are the directories above it
    that this prepare made, for the MANIFEST."""
    sd, shared = shared_paths(target)
    data = shared / DATA_NAME
    manifest = inspect_shared(shared)
    if _ready(shared, manifest, need):
        return SharedReport(data, "unchanged", manifest.data_size, creator=manifest.host)
    got = try_claim(sd / CLAIM_NAME, host)
    if isinstance(got, ClaimHolder):
        ready = manifest.data_size if manifest is not None and manifest.complete else 0
        return SharedReport(data, "busy", ready, creator=manifest.host if manifest else None,
                            holder=got)
    with got as claim:
        created = False
        if lstat_or_none(shared) is None:
            need_bytes, need_inodes = estimate(sd, need, 0, 0, 1)
            check_space(sd, need_bytes, need_inodes)
            os.mkdir(shared, 0o755)
            created = True
        manifest = inspect_shared(shared)  # again: the last holder may have finished it
        if _ready(shared, manifest, need):
            return SharedReport(data, "unchanged", manifest.data_size, creator=manifest.host)
        if manifest is None:
            manifest = SharedManifest(host=host, target=target.name, uid=os.geteuid(),
                                      created=time.time(), data_size=0, parents=list(parents),
                                      dir_existed=not created)
            write_shared_manifest(shared, manifest)
        have = verified_length(data)
        if not created:
            need_bytes, need_inodes = estimate(shared, max(need - have, 0), 0, 0, 0)
            check_space(shared, need_bytes, need_inodes)
        action = "extended" if manifest.complete else "resumed" if have else "created"
        written = 0
        if have < need:
            with progress_bar("bytes", progress, console) as bar:
                written = write_data(data, have, need, bar, on_sync=claim.beat,
                                     label=f"{SHARED_DIR}/{DATA_NAME}")
        claim.beat(force=True)  # still ours: only the holder marks it complete
        manifest.data_size = max(need, have)
        manifest.complete = True
        manifest.completed = time.time()
        write_shared_manifest(shared, manifest)
        return SharedReport(data, action, manifest.data_size, written, creator=manifest.host)


def wait_shared(target: Target, host: str, need: int, seconds: float, *,
                parents: list[str], progress: bool = True,
                console: Console | None = None) -> SharedReport:
    """prepare_shared again every WAIT_POLL s for up to `seconds` while another node holds
    the claim; takes it over if that node dies (locks/shared_claim.py), returns once it is not
    busy."""
    deadline = time.monotonic() + seconds
    while True:
        report = prepare_shared(target, host, need, parents=parents, progress=progress,
                                console=console)
        left = deadline - time.monotonic()
        if not report.busy or left <= 0:
            return report
        time.sleep(min(WAIT_POLL, left))
