"""The names of what a workspace holds on disk, in one place: every file and directory that
prepare makes, the probes open, the service locks and cleanup removes is named here."""

from __future__ import annotations

from pathlib import Path

MANIFEST_NAME = "MANIFEST"
DATA_NAME = "data.bin"
WRITE_NAME = "write.bin"  # the node's write file beside a shared data file
SHARED_DIR = "shared"  # <target>/.slowdown/shared/: the data file every node reads
SHARED_READ = f"../{SHARED_DIR}/{DATA_NAME}"  # as a workspace's MANIFEST names it
POOL_NAME = "md"
STATUS_NAME = "md-workbench.status"  # md-workbench's default --run-info-file name
BLOCK_SIZE = 1 << 20


def tmp_name(name: str) -> str:
    """The fixed temporary name used while `name` is replaced atomically."""
    return name + ".tmp"


def tmp_path(path: Path) -> Path:
    """The fixed temporary file beside ``path`` while it is replaced whole."""
    return path.with_name(tmp_name(path.name))


LOCK_NAME = "service.lock"  # held by the service probing the workspace (locks/workspace_lock.py)
# Files a workspace holds beside the MANIFEST while it is used: the md probe's status file
# (and its temporary name) and the workspace's own (its MANIFEST's temporary name, the lock).
# A MANIFEST lists all of them; cleanup takes the probes' from their registry.
WORKSPACE_FILES = (tmp_name(MANIFEST_NAME), LOCK_NAME)
STATE_FILES = (STATUS_NAME, tmp_name(STATUS_NAME), *WORKSPACE_FILES)
