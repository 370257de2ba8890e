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
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from tests.kit.testbed.ceph import CLIENT, LOCK_FILE, CephCluster, CephLedger, leftovers
from tests.kit.testbed.cpu_quota import CpuQuotas
from tests.kit.testbed.gluster import MachineLock
from tests.kit.testbed.nodes import NamespaceNode, ProbeNode, Testbed, _terminated


class CephTestbed(Testbed):
    """``with CephTestbed(nodes=2) as bed:``: a CephFS, ``bed.nodes`` probing."""

    __test__ = False
    target = "cephfs"

    def __init__(self, nodes: int = 2, osds: int = 1, osd_gib: int = 64, mdss: int = 2,
                 directory: Path | None = None, lock_wait: float = 600,
                 pool_files: int = 2000, node_config: list[str] | None = None) -> None:
        prefix = f"sdceph{os.getpid()}{secrets.token_hex(3)}"
        base = Path(tempfile.mkdtemp(prefix=f"{prefix}-", dir=directory or "/var/tmp"))
        base = base.rename(base.with_name(prefix))
        self.ledger = CephLedger(prefix, base)  # type: ignore[assignment]
        self.server = CephCluster(self.ledger, osds, osd_gib, mdss)  # type: ignore[assignment]
        self.lock = MachineLock(lock_wait, LOCK_FILE, "CephFS")
        self.node_count = nodes
        self.pool_files = pool_files
        self.node_config = node_config or []  # more lines for each probing node's TOML
        self.nodes: list[ProbeNode] = []
        self.others: list[NamespaceNode] = []
        self.times: dict[str, float] = {}
        self.remounts = 0
        self._quotas = CpuQuotas(self.ledger)

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

    def mount_options(self, node: NamespaceNode, again: int = 0) -> list[str]:
        tag = f"{node.name}-{again}" if again else node.name
        run = self.ledger.base / "run"
        cmd = ["ceph-fuse", "-c", str(self.ledger.conf), "--id", CLIENT,
               "--pid_file", str(run / f"fuse-{tag}.pid"),
               "--admin_socket", str(run / f"fuse-{tag}.asok"),
               "--log_file", str(node.dir / "client.log"), str(node.mount)]
        return ["--mount-cmd", json.dumps(cmd), "--fstype", "fuse.ceph-fuse",
                "--client", "ceph-fuse"]

    def fuse_pid(self, node: NamespaceNode) -> int:
        return int((self.ledger.base / "run" / f"fuse-{node.name}.pid").read_text())

    def client_pids(self, node: NamespaceNode) -> list[int]:
        """The processes of ``node``'s filesystem client: its ceph-fuse."""
        return [self.fuse_pid(node)]

    def active_mds(self) -> str | None:
        """The active MDS's name; None while there is none (a failover)."""
        active = self.server.mds_map()["active"]
        return active[0] if active else None

    def kill_active_mds(self) -> str:
        """SIGKILL to the active MDS (its standby takes over); its name."""
        name = self.active_mds()
        if name is None:
            raise RuntimeError("no active MDS to kill")
        os.kill(self.server.pid_of(f"mds.{name}"), signal.SIGKILL)
        return name

    def slow_down(self, pid: int, percent: float, busy: bool = False) -> Path:
        """Hold a daemon to ``percent`` of one CPU (``cpu_quota.py``), removed by ``clean``;
        ``busy``: with a busy loop beside it in the group that uses the quota up."""
        return self._quotas.slow_down(pid, percent, busy)

    def release(self, pid: int) -> None:
        """The daemon back at full speed, its busy loop ended."""
        self._quotas.release(pid)

    def evict(self, node: NamespaceNode) -> str:
        """Evict ``node``'s client from the active MDS, as an admin does
        (``ceph tell mds.0 client evict id=N``); the command's output."""
        sessions = json.loads(self.server.ceph("tell", "mds.0", "client", "ls", "-f", "json",
                                               timeout=30).stdout)
        ids = [str(s["id"]) for s in sessions
               if s.get("client_metadata", {}).get("hostname") == node.name]
        if not ids:
            raise LookupError(f"no session of {node.name}: {sessions}")
        return self.server.ceph("tell", "mds.0", "client", "evict", f"id={ids[0]}",
                                timeout=60).stdout

    def remount(self, node: NamespaceNode) -> float:
        """Unmount and mount ``node``'s ceph-fuse again inside its namespace (as a site does
        after an eviction); the seconds it took."""
        t0 = time.monotonic()
        ns = ["nsenter", "-t", str(node.proc.pid), "-m", "-u"]  # type: ignore[union-attr]
        subprocess.run([*ns, "umount", "-l", str(node.mount)], check=True, timeout=60)
        self.remounts += 1  # a pid file and socket of its own: the old client may linger
        cmd = json.loads(self.mount_options(node, self.remounts)[1])
        done = subprocess.run([*ns, *cmd], timeout=60, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"ceph-fuse again on {node.name} failed ({done.returncode}): "
                               f"{done.stdout}{done.stderr}")
        return time.monotonic() - t0

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
