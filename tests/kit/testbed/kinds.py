"""The testbeds by the name of their filesystem, for the long tests that run on either:
``@pytest.mark.parametrize("fs", KINDS)`` and ``with open_testbed(fs, nodes=3, gib=6) as bed:``."""

from __future__ import annotations

from tests.kit.testbed.cephbed import CephTestbed
from tests.kit.testbed.nodes import Testbed

KINDS = ("glusterfs", "cephfs")
TITLES = {"glusterfs": "GlusterFS", "cephfs": "CephFS"}


def open_testbed(fs: str, nodes: int, gib: int, lock_wait: float = 600) -> Testbed:
    """A testbed of ``nodes`` probing nodes with room for ``gib`` GiB of load: GlusterFS's
    bricks of ``gib`` each (replica 2), or CephFS's one OSD (one copy) of at least 64 GiB,
    its sparse loop file."""
    if fs == "cephfs":
        return CephTestbed(nodes=nodes, osd_gib=max(64, gib), lock_wait=lock_wait)
    if fs == "glusterfs":
        return Testbed(nodes=nodes, brick_mib=gib * 1024, lock_wait=lock_wait)
    raise ValueError(f"no testbed for {fs!r}: {', '.join(KINDS)}")
