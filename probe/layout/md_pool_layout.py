"""The md pool's names and rotation arithmetic, as MD-Workbench lays out its objects.

Data set `d` of rank `r` is the directory `<pool>/<r>_<d>`, object `i` in it is
`<pool>/<r>_<d>/file-<i>` (IOR's src/md-workbench.c, def_dset_name and def_obj_name). Step `k`
of the rotation visits data set `k % D`: it takes the oldest object `k // D` and creates
`k // D + P` (probes/md.py).
"""

from __future__ import annotations

import re
from pathlib import Path

from slowdown.probe.layout.manifest import PoolEntry

OBJECT_RE = re.compile(r"file-(0|[1-9][0-9]*)")
"""An object name as md-workbench writes it (`file-%d`, no leading zeros)."""


def object_index(name: str) -> int | None:
    """The index of an object name, None for any other name."""
    match = OBJECT_RE.fullmatch(name)
    return int(match.group(1)) if match else None


class PoolLayout:
    """Names and rotation arithmetic of an MD-Workbench pool (one rank)."""

    __slots__ = ("dir_paths", "dirs", "object_size", "per_dir", "rank", "root")

    def __init__(self, root: Path, dirs: int, per_dir: int, object_size: int,
                 rank: int = 0) -> None:
        if dirs < 1 or per_dir < 1 or object_size < 0:
            raise ValueError("a pool needs dirs >= 1, per_dir >= 1, object_size >= 0")
        self.root = Path(root)
        self.dirs = dirs
        self.per_dir = per_dir
        self.object_size = object_size
        self.rank = rank
        self.dir_paths = tuple(f"{self.root}/{self.dir_name(d)}/" for d in range(dirs))

    @classmethod
    def from_entry(cls, workspace: Path, entry: PoolEntry) -> PoolLayout:
        return cls(Path(workspace) / entry.dir, entry.dirs, entry.files_per_dir,
                   entry.object_size, entry.rank)

    @property
    def files(self) -> int:
        return self.dirs * self.per_dir

    def dir_name(self, d: int) -> str:
        return f"{self.rank}_{d}"

    def object_path(self, d: int, i: int) -> str:
        return f"{self.dir_paths[d]}file-{i}"

    def oldest(self, step: int) -> tuple[int, int]:
        """(data set, object index) that step `step` stats, reads and deletes."""
        return step % self.dirs, step // self.dirs

    def window(self, step: int, d: int) -> range:
        """The object indices data set `d` holds before step `step` runs."""
        first = step // self.dirs + (1 if d < step % self.dirs else 0)
        return range(first, first + self.per_dir)
