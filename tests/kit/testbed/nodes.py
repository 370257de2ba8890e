"""The client side of the testbed: nodes as namespaces, each with its own host name and mount;
probing nodes run the real service (``slowdown-probe run --prepare``) with a database of
their own; the load node runs one command (IOR, mdtest) and ends.

``Testbed`` puts server and nodes together and undoes everything on exit, even when the body
raised; ``leftovers()`` afterwards must be empty.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from tests.kit.testbed.gluster import Ledger, MachineLock, Server, leftovers, processes

ROOT = Path(__file__).resolve().parents[3]
TARGET = "gluster"


class NamespaceNode:
    """One ``nsrun`` in fresh UTS and mount namespaces."""

    def __init__(self, bed: Testbed, name: str) -> None:
        self.bed = bed
        self.name = name
        self.dir = bed.ledger.base / "nodes" / name
        self.dir.mkdir(parents=True)
        self.mount = bed.ledger.base / "mnt" / name
        self.mount.mkdir(parents=True)
        self.log = self.dir / "output.log"
        self.proc: subprocess.Popen | None = None

    def start(self, steps: list[list[str]], cwd: Path | None = None) -> None:
        ready = self.dir / "ready"
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                ["unshare", "--uts", "--mount", "--propagation", "private",
                 sys.executable, "-m", "tests.kit.testbed.nsrun",
                 "--hostname", self.name, *self.bed.mount_options(self),
                 "--mount", str(self.mount),
                 "--client-log", str(self.dir / "client.log"), "--ready", str(ready),
                 *(["--cwd", str(cwd)] if cwd else []), json.dumps(steps)],
                cwd=ROOT, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONPATH": str(ROOT)})
        deadline = time.monotonic() + 60
        while not ready.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"node {self.name} did not mount:\n{self.output()}")
            time.sleep(0.1)

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def stop(self, timeout: float = 60) -> int | None:
        """SIGTERM to the node; it ends its command and unmounts. Its exit status."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


class ProbeNode(NamespaceNode):
    """A node running the service on the volume, its database outside the volume."""

    def __init__(self, bed: Testbed, name: str, pool_files: int = 2000) -> None:
        super().__init__(bed, name)
        self.database = self.dir / "slowdown.db"
        self.config = self.dir / "slowdown.toml"
        self.config.write_text("\n".join([
            f'database = "{self.database}"',
            'windows = ["1m", "10m"]',
            'statistics = ["median", "q95"]',
            "[[target]]",
            f'name = "{bed.target}"',
            f'path = "{self.mount}/slowdown"',
            'data_file = "own"',
            'data_size = "64MiB"',
            f"pool_files = {pool_files}",
            "pool_dirs = 10",
            "[metrics]",  # a textfile only (no port): the per-server counters, last at the stop
            f'textfile = "{self.dir / "slowdown.prom"}"',
        ]) + "\n")

    def start_service(self) -> None:
        self.start([["slowdown-probe", "--config", str(self.config), "run", "--prepare"]],
                   cwd=self.dir)

    def workspace(self) -> Path:
        return self.mount / "slowdown" / ".slowdown" / self.name


def _terminated(_signum: int, _frame: object) -> None:
    raise SystemExit("terminated (SIGTERM): the testbed cleans up")


class Testbed:
    """``with Testbed(nodes=2) as bed:``: a volume, ``bed.nodes`` probing, ``bed.load(...)``;
    ``bricks=4, replica=1``: a distribute volume of four bricks instead of replica 2."""

    __test__ = False  # not a test class, whatever its name
    target = TARGET

    def __init__(self, nodes: int = 2, directory: Path | None = None, brick_mib: int = 4096,
                 ping_timeout: int | None = None, lock_wait: float = 600,
                 pool_files: int = 2000, bricks: int = 2, replica: int = 2) -> None:
        prefix = f"sdtb{os.getpid()}{secrets.token_hex(3)}"
        base = Path(tempfile.mkdtemp(prefix=f"{prefix}-", dir=directory or "/var/tmp"))
        base = base.rename(base.with_name(prefix))  # the prefix alone names the directory
        self.ledger = Ledger(prefix, base)
        self.server = Server(self.ledger, brick_mib, bricks, replica)
        self.lock = MachineLock(lock_wait)
        self.ping_timeout = ping_timeout
        self.node_count = nodes
        self.pool_files = pool_files
        self.nodes: list[ProbeNode] = []
        self.others: list[NamespaceNode] = []

    def __enter__(self) -> Testbed:
        if threading.current_thread() is threading.main_thread():  # SIGTERM cleans up too
            self._sigterm = signal.signal(signal.SIGTERM, _terminated)
        try:
            self.lock.__enter__()
        except BaseException:
            self.ledger.base.rmdir()
            raise
        try:
            self.server.start(self.ping_timeout)
            for n in range(1, self.node_count + 1):
                node = ProbeNode(self, f"node{n}", self.pool_files)
                self.nodes.append(node)
                node.start_service()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def mount_options(self, node: NamespaceNode) -> list[str]:
        """nsrun's options that mount the volume in ``node``'s namespace."""
        return ["--source", f"{self.server.host}:/{self.server.volume}"]

    def load(self, argv: list[str], name: str = "load", timeout: float = 3600) -> int:
        """Run ``argv`` on a node that does not probe (its own namespace and mount), in the
        directory ``load`` on the volume; its exit status."""
        node = NamespaceNode(self, f"{name}-{len(self.others)}")
        self.others.append(node)
        work = node.mount / "load"
        node.start([["mkdir", "-p", str(work)], argv], cwd=node.mount)
        try:
            return node.proc.wait(timeout=timeout)  # type: ignore[union-attr]
        except subprocess.TimeoutExpired:
            node.stop()
            raise AssertionError(f"load {argv[:3]} still running after {timeout} s:\n"
                                 f"{node.output()[-3000:]}") from None

    def loads(self, argvs: list[list[str]], name: str = "load", timeout: float = 3600
              ) -> list[int | None]:
        """Run every one of ``argvs`` at once, each on a node of its own (its own client of
        the filesystem); their exit statuses in order, None for one that raised."""
        codes: list[int | None] = [None] * len(argvs)

        def run(i: int) -> None:
            codes[i] = self.load(argvs[i], f"{name}{i}", timeout)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(argvs))]
        for thread in threads:
            thread.start()
            time.sleep(0.5)  # each node's namespace made in turn
        for thread in threads:
            thread.join()
        return codes

    def client_pids(self, node: NamespaceNode) -> list[int]:
        """The processes of ``node``'s filesystem client: its glusterfs FUSE client."""
        return [pid for pid, (comm, _, cmd) in processes().items()
                if comm == "glusterfs" and str(node.mount) in cmd.split()]

    def stop_nodes(self) -> None:
        for node in [*self.nodes, *self.others]:
            node.stop()

    def __exit__(self, *exc: object) -> None:
        try:
            self.stop_nodes()
            self.problems = self.server.clean()
            self._remove_base()
        finally:
            self.lock.__exit__()
            if getattr(self, "_sigterm", None) is not None:
                signal.signal(signal.SIGTERM, self._sigterm)

    def _remove_base(self) -> None:
        """Our directory, unless something is still mounted in it (never remove through a
        mount)."""
        with open("/proc/self/mountinfo") as f:
            if any(self.ledger.prefix in line for line in f):
                self.problems.append("a mount is left under the testbed's directory")
                return
        keep = os.environ.get("SLOWDOWN_TESTBED_KEEP")  # copy databases and logs out first
        if keep:
            dest = Path(keep) / self.ledger.prefix
            subprocess.run(["cp", "-a", str(self.ledger.base / "nodes"), str(dest)],
                           check=False)
        subprocess.run(["rm", "-rf", "--one-file-system", str(self.ledger.base)], check=False)

    def leftovers(self) -> list[str]:
        return leftovers(self.ledger) + list(getattr(self, "problems", []))
