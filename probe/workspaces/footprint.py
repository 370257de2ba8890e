"""What a target costs its filesystem, in bytes and inodes, for one node or a whole cluster.

Counted from the configuration alone (check-config answers while a target's filesystem hangs),
the way prepare lays the files out:

- once per target: `.slowdown/` (1 inode), and with data_file = "shared" the directory
  `shared/` with its MANIFEST and data.bin of data_size (3 inodes);
- per node: its workspace directory, `md/`, pool_dirs data-set directories, pool_files
  objects, MANIFEST, md-workbench.status and its data file: write.bin of write_size beside a
  shared data file, or data.bin of data_size (data_file = "own"). That is pool_files +
  pool_dirs + 5 inodes.

Data files count their size; every object, directory and small file counts whole blocks of
ALLOC bytes (4 KiB, the usual allocation unit; a filesystem that keeps small files inside the
inode spends less, a directory of many thousand entries somewhat more; CephFS 4 KiB more per
file, as prepare counts there: workspaces/space.py states the rule per filesystem). A
data_size given as a multiple of RAM is taken with this node's RAM. Not counted: what prepare
holds only while it runs (its claim, a MANIFEST.tmp).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from slowdown.analysis.units import format_size

if TYPE_CHECKING:
    from slowdown.analysis.config import Target

ALLOC = 4096
NODE_EXTRA_INODES = 5  # workspace dir, md/, MANIFEST, md-workbench.status, the data file
SHARED_INODES = 3  # shared/, its MANIFEST, data.bin


def _blocks(n: int) -> int:
    return -(-n // ALLOC) * ALLOC


@dataclass(frozen=True)
class Footprint:
    """A target's cost: `once` for the whole cluster plus `nodes` times `per node`."""

    nodes: int
    once_bytes: int
    once_inodes: int
    node_bytes: int
    node_inodes: int
    data_bytes: int  # the file the probe reads: shared (once) or each node's own
    node_data_bytes: int  # write.bin (shared) or data.bin (own), per node
    objects_bytes: int  # the pool's objects, per node

    @property
    def total_bytes(self) -> int:
        return self.once_bytes + self.nodes * self.node_bytes

    @property
    def total_inodes(self) -> int:
        return self.once_inodes + self.nodes * self.node_inodes


def footprint(target: Target, nodes: int = 1, ram_bytes: int | None = None) -> Footprint:
    """The footprint of `target` on `nodes` nodes."""
    data = target.data_size.resolve(ram_bytes)
    shared = target.data_file == "shared"
    objects = target.pool_files * _blocks(target.object_size)
    small = (target.pool_dirs + 4) * ALLOC  # data sets, workspace, md/, MANIFEST, status
    node_data = target.write_size if shared else data
    once_bytes = ALLOC + (data + 2 * ALLOC if shared else 0)
    return Footprint(
        nodes=nodes,
        once_bytes=once_bytes,
        once_inodes=1 + (SHARED_INODES if shared else 0),
        node_bytes=node_data + objects + small,
        node_inodes=target.pool_files + target.pool_dirs + NODE_EXTRA_INODES,
        data_bytes=data,
        node_data_bytes=node_data,
        objects_bytes=objects,
    )


def describe_footprint(target: Target, nodes: int = 1, ram_bytes: int | None = None
                       ) -> list[str]:
    """check-config's lines for one target (indented, after its other lines)."""
    fp = footprint(target, nodes, ram_bytes)
    shared = target.data_file == "shared"
    ram = " (this node's RAM)" if target.data_size.ram_factor is not None else ""
    who = "1 node" if nodes == 1 else f"{nodes:,} nodes"
    once = ".slowdown/" + (f", shared/data.bin {format_size(fp.data_bytes)}{ram} with its "
                           "MANIFEST" if shared else "")
    name = "write.bin" if shared else f"data.bin{ram}"
    return [
        f"  footprint    {who}: {format_size(fp.total_bytes)} and {fp.total_inodes:,} inodes"
        f" = {format_size(fp.once_bytes)}, {fp.once_inodes} inode"
        f"{'s' if fp.once_inodes > 1 else ''} once + {nodes:,} x "
        f"({format_size(fp.node_bytes)}, {fp.node_inodes:,} inodes)",
        f"               once: {once}",
        f"               per node: {name} {format_size(fp.node_data_bytes)}, "
        f"{target.pool_files:,} objects {format_size(fp.objects_bytes)} (in "
        f"{ALLOC // 1024} KiB blocks),",
        f"               {target.pool_dirs} + 2 directories, MANIFEST, md-workbench.status "
        "(inodes: pool_files + pool_dirs + 5)",
    ]
