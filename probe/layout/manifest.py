"""What a workspace holds, on disk: the MANIFEST (and the shared data file's), and why the md
rotation status file (``md_status.py``) has the form it has.

The MANIFEST is the proof that a workspace is ours. Cleanup removes only what it lists, and
prepare refuses any `.slowdown/<host>` directory without one (except an MD-Workbench pool it
recognises and adopts). It is JSON, written atomically (temp file, fsync, os.replace):

    {
      "format": "slowdown-workspace", "version": 1,
      "host": "node17", "target": "work", "uid": 1001,
      "created": 1732190000.5,          # unix seconds, when prepare first started here
      "completed": 1732190444.1,        # unix seconds, null until prepare finished
      "complete": true,
      "parents": [".slowdown"],         # dirs above the workspace prepare made (relative to
                                        # the target path, innermost last; "." is the target)
      "workspace_adopted": false,       # the workspace directory existed (an adopted pool)
      "data": {"file": "data.bin", "size": 68719476736, "block_size": 1048576},
      "pool": {
        "dir": "md", "layout": "md-workbench", "rank": 0,
        "dirs": ["0_0", "0_1", ...],    # every pool directory, in data-set order
        "files_per_dir": 10000, "object_size": 3901,
        "objects": "file-<i>",          # object i of data set d is md/0_<d>/file-<i>
        "first_index": 0,               # lowest object index the pool ever held; the rotation
                                        # only raises indices, so every object prepare or the
                                        # probe made is file-<i> with i >= first_index
        "position": 0,                  # rotation step when prepare finished (see below)
        "adopted": false                # the pool was precreated by md-workbench
      },
      "state_files": ["md-workbench.status", "md-workbench.status.tmp", "MANIFEST.tmp",
                      "service.lock"]
    }

That is version 1, the node's own data file (data_file = "own"). A workspace that reads the
target's shared data file (data_file = "shared", see workspaces/shared_data.py) is version 2: its
"data" names the node's write file and the file it reads, a fixed path that the probe checks,
never one it follows from the MANIFEST:

      "data": {"file": "write.bin", "size": 268435456, "block_size": 1048576,
               "read": "../shared/data.bin"},

Version 1 stays what it was, so a workspace prepared before shared data files keeps working
both ways (an older slowdown refuses a version 2 MANIFEST instead of misreading it).

The live rotation position is not kept in the MANIFEST (the probe would have to rewrite it):
it lives in `md-workbench.status` next to it, in MD-Workbench's own `--run-info-file` format
(`pos: <n>\\n`, read back with `fscanf("pos: %d")`, see IOR's src/md-workbench.c,
store_position/return_position). MD-Workbench counts whole rounds (one object in every data
set); the probe moves one object per tick, so a second line `slowdown-step: <k>` carries the
exact step, and `pos` is always a round md-workbench can continue from without an error: the
round of `k` between rounds, the next one mid-round (probes/md_resume.py). md-workbench ignores our
line and rewrites the file with `pos:` only; a loader then falls back to `pos * dirs` (and
knows md-workbench ran: `Status.ours` is false). Running `md-workbench -2 -o md -D=.. -P=..
-S=.. -G 0` from inside the workspace directory therefore continues where the probe stopped,
and the probe continues where md-workbench stopped.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, TypeVar

from slowdown.analysis.atomic_write import replace_whole
from slowdown.probe.layout.errors import ForeignWorkspaceError
from slowdown.probe.layout.names import (
    BLOCK_SIZE,
    DATA_NAME,
    MANIFEST_NAME,
    POOL_NAME,
    SHARED_READ,
    STATE_FILES,
    WRITE_NAME,
    tmp_name,
    tmp_path,
)

FORMAT = "slowdown-workspace"
VERSION = 1
SHARED_VERSION = 2  # a workspace that reads the shared data file


class ManifestError(Exception):
    """A MANIFEST or status file that is missing, unreadable or not ours; ``errno``: ENOENT
    where it is missing (the workspace removed), so that the error is named by it."""

    def __init__(self, message: str, errno: int | None = None) -> None:
        super().__init__(message)
        self.errno = errno


_Read = TypeVar("_Read")


def read_ours(read: Callable[..., _Read], path: Path, **kwargs: Any) -> _Read:
    """A MANIFEST read with ``read`` (``read_manifest``, ``read_shared_manifest``); one that
    cannot be read makes the directory foreign: never touched."""
    try:
        return read(path, **kwargs)
    except ManifestError as exc:
        raise ForeignWorkspaceError(f"{exc}; not touching {path}") from exc


def _parents(obj: dict, where: str) -> list[str]:
    """The directories prepare created above the one of the MANIFEST, relative names only."""
    parents = obj.get("parents", [])
    if not isinstance(parents, list) or not all(
        isinstance(p, str) and _relative_ok(p) for p in parents
    ):
        raise ManifestError(f"{where}: 'parents' must be relative directory names")
    return parents


def _common(obj: dict, data_obj: dict, where: str) -> dict[str, Any]:
    """The fields every MANIFEST has: who made it, when, how far, and its data file's size."""
    completed = obj.get("completed")
    return {
        "host": _str(obj, "host", where),
        "target": _str(obj, "target", where),
        "uid": _int(obj, "uid", where),
        "created": _num(obj, "created", where),
        "data_size": _int(data_obj, "size", where),
        "block_size": _int(data_obj, "block_size", where),
        "complete": bool(obj.get("complete", False)),
        "completed": None if completed is None else _num(obj, "completed", where),
        "parents": _parents(obj, where),
    }


def _common_json(manifest: Manifest | SharedManifest, form: str, version: int
                 ) -> dict[str, Any]:
    """The head every MANIFEST begins with, in its order (``_common`` reads it back)."""
    return {
        "format": form,
        "version": version,
        "host": manifest.host,
        "target": manifest.target,
        "uid": manifest.uid,
        "created": manifest.created,
        "completed": manifest.completed,
        "complete": manifest.complete,
        "parents": list(manifest.parents),
    }


def _dumps(obj: dict[str, Any]) -> bytes:
    """A MANIFEST's bytes as every version writes them: indented JSON, one final newline."""
    return (json.dumps(obj, indent=2) + "\n").encode()


def _json_of(data: bytes, where: str, form: str, what: str) -> dict:
    """A MANIFEST's JSON object, or ManifestError: not JSON, or not ``what`` (its format)."""
    try:
        obj = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ManifestError(f"{where}: not JSON: {exc}") from exc
    if not isinstance(obj, dict) or obj.get("format") != form:
        raise ManifestError(f"{where}: not {what}")
    return obj

@dataclass
class PoolEntry:
    """The file pool as the MANIFEST lists it (MD-Workbench layout, rank 0)."""

    dirs: int
    files_per_dir: int
    object_size: int
    first_index: int = 0
    position: int = 0
    adopted: bool = False
    rank: int = 0
    dir: str = POOL_NAME

    def dir_names(self) -> list[str]:
        return [f"{self.rank}_{d}" for d in range(self.dirs)]

    def to_json(self) -> dict[str, Any]:
        return {
            "dir": self.dir,
            "layout": "md-workbench",
            "rank": self.rank,
            "dirs": self.dir_names(),
            "files_per_dir": self.files_per_dir,
            "object_size": self.object_size,
            "objects": "file-<i>",
            "first_index": self.first_index,
            "position": self.position,
            "adopted": self.adopted,
        }

    @classmethod
    def from_json(cls, obj: Any, where: str) -> PoolEntry:
        if not isinstance(obj, dict):
            raise ManifestError(f"{where}: 'pool' is not an object")
        names = obj.get("dirs")
        if not isinstance(names, list):
            raise ManifestError(f"{where}: 'pool.dirs' must be a list")
        pool = cls(
            dirs=len(names),
            files_per_dir=_int(obj, "files_per_dir", where),
            object_size=_int(obj, "object_size", where),
            first_index=_int(obj, "first_index", where),
            position=_int(obj, "position", where),
            adopted=bool(obj.get("adopted", False)),
            rank=_int(obj, "rank", where),
            dir=_str(obj, "dir", where),
        )
        if obj.get("layout") != "md-workbench" or names != pool.dir_names():
            raise ManifestError(f"{where}: pool.dirs or pool.layout is not an md-workbench list")
        if pool.dir != POOL_NAME or pool.dirs < 1 or pool.files_per_dir < 1:
            raise ManifestError(f"{where}: pool.dir/dirs/files_per_dir out of range")
        return pool


@dataclass
class Manifest:
    """Everything prepare created in one workspace, and the settings it created it with."""

    host: str
    target: str
    uid: int
    created: float
    data_size: int
    pool: PoolEntry
    complete: bool = False
    completed: float | None = None
    parents: list[str] = field(default_factory=list)
    workspace_adopted: bool = False
    block_size: int = BLOCK_SIZE
    data_file: str = "own"  # "shared": data_size is write.bin's; reads go to SHARED_READ

    @property
    def data_name(self) -> str:
        """The file in the workspace that the probe writes (and, when own, reads)."""
        return WRITE_NAME if self.data_file == "shared" else DATA_NAME

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"file": self.data_name, "size": self.data_size,
                                "block_size": self.block_size}
        if self.data_file == "shared":
            data["read"] = SHARED_READ
        return {
            **_common_json(self, FORMAT,
                           SHARED_VERSION if self.data_file == "shared" else VERSION),
            "workspace_adopted": self.workspace_adopted,
            "data": data,
            "pool": self.pool.to_json(),
            "state_files": list(STATE_FILES),
        }

    def dumps(self) -> bytes:
        return _dumps(self.to_json())

    @classmethod
    def loads(cls, data: bytes, where: str) -> Manifest:
        obj = _json_of(data, where, FORMAT, "a slowdown workspace MANIFEST")
        version = obj.get("version")
        if version not in (VERSION, SHARED_VERSION) or isinstance(version, bool):
            raise ManifestError(f"{where}: unsupported MANIFEST version {version!r}")
        data_file = "shared" if version == SHARED_VERSION else "own"
        data_obj = obj.get("data")
        name = WRITE_NAME if data_file == "shared" else DATA_NAME
        if not isinstance(data_obj, dict) or data_obj.get("file") != name:
            raise ManifestError(f"{where}: 'data' must name {name}")
        if data_file == "shared" and data_obj.get("read") != SHARED_READ:
            raise ManifestError(f"{where}: 'data.read' must be {SHARED_READ}")
        return cls(
            **_common(obj, data_obj, where),
            pool=PoolEntry.from_json(obj.get("pool"), where),
            workspace_adopted=bool(obj.get("workspace_adopted", False)),
            data_file=data_file,
        )


def _read_manifest_bytes(directory: Path, dir_fd: int | None) -> bytes | None:
    where = str(directory / MANIFEST_NAME)
    try:
        fd = os.open(MANIFEST_NAME if dir_fd is not None else where,
                     os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ManifestError(f"{where}: cannot open: {exc.strerror}") from exc
    try:
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks)


def read_manifest(workspace: Path, *, dir_fd: int | None = None) -> Manifest | None:
    """The workspace's MANIFEST, None when it has none; never follows a symlink."""
    data = _read_manifest_bytes(workspace, dir_fd)
    return None if data is None else Manifest.loads(data, str(workspace / MANIFEST_NAME))


def write_manifest(workspace: Path, manifest: Manifest) -> None:
    replace_whole(workspace / MANIFEST_NAME, manifest.dumps(), 0o644,
                  temp=tmp_path(workspace / MANIFEST_NAME))


# --- the shared data file's MANIFEST -----------------------------------------------------

SHARED_FORMAT = "slowdown-shared"
SHARED_FORMAT_VERSION = 1
SHARED_STATE_FILES = (tmp_name(MANIFEST_NAME),)


@dataclass
class SharedManifest:
    """`<target>/.slowdown/shared/MANIFEST`: the data file every node of a target reads.

        {"format": "slowdown-shared", "version": 1,
         "host": "node01",              # whose prepare created it (its claim,
         workspaces/shared_data.py) "target": "work", "uid": 990, "created": ..., "completed": ...,
         "complete": true, "parents": [".slowdown"],      # dirs above it that this prepare made (as
         a workspace) "dir_existed": false,          # shared/ was there before (made to set its
         striping) "data": {"file": "data.bin", "size": 68719476736, "block_size": 1048576},
         "state_files": ["MANIFEST.tmp"]}

    `data.size` is what is ready to read: whole blocks written and synced. It only grows (a
    prepare asking for a larger data_size extends the file); readers never read beyond it.
    """

    host: str
    target: str
    uid: int
    created: float
    data_size: int
    complete: bool = False
    completed: float | None = None
    parents: list[str] = field(default_factory=list)
    dir_existed: bool = False
    block_size: int = BLOCK_SIZE

    def to_json(self) -> dict[str, Any]:
        return {
            **_common_json(self, SHARED_FORMAT, SHARED_FORMAT_VERSION),
            "dir_existed": self.dir_existed,
            "data": {"file": DATA_NAME, "size": self.data_size, "block_size": self.block_size},
            "state_files": list(SHARED_STATE_FILES),
        }

    def dumps(self) -> bytes:
        return _dumps(self.to_json())

    @classmethod
    def loads(cls, data: bytes, where: str) -> SharedManifest:
        obj = _json_of(data, where, SHARED_FORMAT, "the MANIFEST of a slowdown shared data file")
        if obj.get("version") != SHARED_FORMAT_VERSION:
            raise ManifestError(f"{where}: unsupported MANIFEST version {obj.get('version')!r}")
        data_obj = obj.get("data")
        if not isinstance(data_obj, dict) or data_obj.get("file") != DATA_NAME:
            raise ManifestError(f"{where}: 'data' must name {DATA_NAME}")
        return cls(
            **_common(obj, data_obj, where),
            dir_existed=bool(obj.get("dir_existed", False)),
        )


def read_shared_manifest(directory: Path, *, dir_fd: int | None = None
                         ) -> SharedManifest | None:
    """The shared directory's MANIFEST, None when it has none; never follows a symlink."""
    data = _read_manifest_bytes(directory, dir_fd)
    return None if data is None else SharedManifest.loads(data, str(directory / MANIFEST_NAME))


def write_shared_manifest(directory: Path, manifest: SharedManifest) -> None:
    replace_whole(directory / MANIFEST_NAME, manifest.dumps(), 0o644,
                  temp=tmp_path(directory / MANIFEST_NAME))


def _relative_ok(p: str) -> bool:
    return p == "." or (not p.startswith("/") and ".." not in Path(p).parts and p != "")


def _int(obj: dict, key: str, where: str) -> int:
    value = obj.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ManifestError(f"{where}: '{key}' must be a non-negative integer")
    return value


def _num(obj: dict, key: str, where: str) -> float:
    value = obj.get(key)
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise ManifestError(f"{where}: '{key}' must be a number")
    return float(value)


def _str(obj: dict, key: str, where: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str) or not value:
        raise ManifestError(f"{where}: '{key}' must be a non-empty string")
    return value
