"""The CephFS testbed as a whole: the cluster (``ceph.py``) and nodes as namespaces with their
own host names, each with its own ``ceph-fuse`` mount under the client key (``nsrun``), the
probing ones running the real service; ``CephTestbed.leftovers()`` is empty after it ends,
also when the body raised.

    with CephTestbed(nodes=2) as bed:
        bed.load(mdtest_hard(60))
        bed.kill_active_mds()
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import tempfile
import threading
import time
from pathlib import Path

from tests.kit.testbed.ceph import CLIENT, LOCK_FILE, CephCluster, CephLedger, leftovers
from tests.kit.testbed.gluster import MachineLock
from tests.kit.testbed.nodes import NamespaceNode, ProbeNode, Testbed, _terminated


class CephTestbed(Testbed):
    """``with CephTestbed(nodes=2) as bed:``: a CephFS, ``bed.nodes`` probing."""

    __test__ = False
    target = "cephfs"

    def __init__(self, nodes: int = 2, osds: int = 1, osd_gib: int = 64,
                 directory: Path | None = None, lock_wait: float = 600,
                 pool_files: int = 2000, node_config: list[str] | None = None) -> None:
        prefix = f"sdceph{os.getpid()}{secrets.token_hex(3)}"
        base = Path(tempfile.mkdtemp(prefix=f"{prefix}-", dir=directory or "/var/tmp"))
        base = base.rename(base.with_name(prefix))
        self.ledger = CephLedger(prefix, base)  # type: ignore[assignment]
        self.server = CephCluster(self.ledger, osds, osd_gib)  # type: ignore[assignment]
        self.lock = MachineLock(lock_wait, LOCK_FILE, "CephFS")
        self.node_count = nodes
        self.pool_files = pool_files
        self.node_config = node_config or []  # more lines for each probing node's TOML
        self.nodes: list[ProbeNode] = []
        self.others: list[NamespaceNode] = []
        self.times: dict[str, float] = {}

    def __enter__(self) -> CephTestbed:
        if threading.current_thread() is threading.main_thread():
            self._sigterm = signal.signal(signal.SIGTERM, _terminated)
        try:
            self.lock.__enter__()
        except BaseException:
            self.ledger.base.rmdir()
            raise
        t0 = time.monotonic()
        try:
            self.server.start()
            self.times["cluster"] = time.monotonic() - t0
            for n in range(1, self.node_count + 1):
                node = ProbeNode(self, f"node{n}", self.pool_files)
                if self.node_config:
                    with open(node.config, "a") as f:
                        f.write("\n".join(self.node_config) + "\n")
                self.nodes.append(node)
                node.start_service()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        self.times["up"] = time.monotonic() - t0
        return self

    def __exit__(self, *exc: object) -> None:
        t0 = time.monotonic()
        super().__exit__(*exc)
        self.times["down"] = time.monotonic() - t0

    def mount_options(self, node: NamespaceNode) -> list[str]:
        tag = node.name
        run = self.ledger.base / "run"
        cmd = ["ceph-fuse", "-c", str(self.ledger.conf), "--id", CLIENT,
               "--pid_file", str(run / f"fuse-{tag}.pid"),
               "--admin_socket", str(run / f"fuse-{tag}.asok"),
               "--log_file", str(node.dir / "client.log"), str(node.mount)]
        return ["--mount-cmd", json.dumps(cmd), "--fstype", "fuse.ceph-fuse",
                "--client", "ceph-fuse"]

    def fuse_pid(self, node: NamespaceNode) -> int:
        return int((self.ledger.base / "run" / f"fuse-{node.name}.pid").read_text())

    def active_mds(self) -> str:
        return self.server.mds_map()["active"][0]

    def kill_active_mds(self) -> str:
        """SIGKILL to the active MDS (its standby takes over); its name."""
        name = self.active_mds()
        os.kill(self.server.pid_of(f"mds.{name}"), signal.SIGKILL)
        return name

    def rss_mib(self) -> float:
        """Resident memory of every process of the testbed (daemons, clients, services)."""
        from tests.kit.testbed.gluster import pids_mentioning
        total = 0
        for pid in pids_mentioning(self.ledger.prefix):
            try:
                with open(f"/proc/{pid}/statm") as f:
                    total += int(f.read().split()[1])
            except OSError:
                continue
        return total * os.sysconf("SC_PAGE_SIZE") / 2**20

    def leftovers(self) -> list[str]:
        return leftovers(self.ledger) + list(getattr(self, "problems", []))  # type: ignore
