"""The server side of the CephFS testbed: one mon and one mgr on 127.0.0.1, BlueStore OSDs on
loop devices backed by sparse files, an active and a standby MDS, cephx with a client key as a
site gives a login node (``ceph fs authorize``); everything under one directory whose name is
the testbed's unique prefix, so that what is ours is told apart by that name alone.

Facts behind the choices (Ceph 16.2, Debian 12):
- The mon's ports are fixed by the monmap; ours are not Ceph's defaults (3300, 6789), and the
  other daemons bind in a range of their own, so a cluster of Ceph's defaults can run beside.
  A process listening on our mon ports, or a Ceph daemon not ours in our range, makes the
  testbed refuse; a lock file makes a second testbed on the machine wait its turn.
- ``ms_bind_ipv4`` and ``public_network 127.0.0.0/8``: the daemons bind and announce loopback.
- Every key (mon., admin, mgr, OSDs, MDSs) is made here and given to the mon at its mkfs:
  no ``ceph auth`` round trips while coming up; only the client's key is made by
  ``ceph fs authorize``, as a site makes it.
- One host: replicas on OSDs (``osd_crush_chooseleaf_type 0``) and each OSD counted as a
  failure reporter (``mon_osd_reporter_subtree_level osd``; else a frozen OSD is marked down
  only after 900 s). With one OSD the pools have one copy.
- Down: the daemons are ours alone (their command lines name our configuration file) and the
  data is thrown away, so they are killed, not stopped politely (an active MDS ignores SIGTERM
  for 10 s); a failed MDS re-executes itself, so they are looked for until none is left.
"""

from __future__ import annotations

import base64
import json
import os
import re
import socket
import struct
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from tests.kit.testbed.gluster import (
    TestbedRefused,
    _detach,
    kill_all,
    pids_mentioning,
    prefix_leftovers,
    processes,
    sh,
)

LOCK_FILE = Path("/run/lock/slowdown-ceph-testbed.lock")
MON_PORTS = (3391, 6791)  # msgr v2, v1: not Ceph's defaults
BIND_RANGE = (7600, 7899)  # the OSDs', MDSs' and mgr's ports: beside Ceph's 6800-7568
FS = "cephfs"
CLIENT = "probe"
DAEMONS = ("ceph-mon", "ceph-mgr", "ceph-osd", "ceph-mds", "ceph-fuse")

CONF = """[global]
fsid = {fsid}
mon_initial_members = a
mon_host = [v2:127.0.0.1:{v2},v1:127.0.0.1:{v1}]
public_network = 127.0.0.0/8
cluster_network = 127.0.0.0/8
ms_bind_ipv4 = true
ms_bind_ipv6 = false
ms_bind_port_min = {pmin}
ms_bind_port_max = {pmax}
auth_cluster_required = cephx
auth_service_required = cephx
auth_client_required = cephx
auth_allow_insecure_global_id_reclaim = false
keyring = {base}/keys/$name.keyring
run_dir = {base}/run
crash_dir = {base}/crash
admin_socket = {base}/run/$name.asok
pid_file = {base}/run/$name.pid
log_file = {base}/log/$name.log
osd_pool_default_size = {size}
osd_pool_default_min_size = {min_size}
osd_pool_default_pg_autoscale_mode = off
mon_allow_pool_size_one = true
osd_crush_chooseleaf_type = 0
mon_osd_reporter_subtree_level = osd
mon_allow_pool_delete = true
mon_warn_on_pool_no_redundancy = false
mon_data_avail_warn = 5
[mon]
mon_data = {base}/mon/$cluster-$id
[mgr]
mgr_data = {base}/mgr/$cluster-$id
[osd]
osd_data = {base}/osd/$cluster-$id
osd_objectstore = bluestore
osd_memory_target = 939524096
bluestore_fsck_on_mkfs = false
[mds]
mds_data = {base}/mds/$cluster-$id
mds_cache_memory_limit = 268435456
"""

CAPS = {
    "mon.": {"mon": "allow *"},
    "client.admin": {"mon": "allow *", "osd": "allow *", "mds": "allow *", "mgr": "allow *"},
    "mgr.x": {"mon": "allow profile mgr", "osd": "allow *", "mds": "allow *"},
    "osd": {"mon": "allow profile osd", "mgr": "allow profile osd", "osd": "allow *"},
    "mds": {"mon": "allow profile mds", "osd": "allow rwx", "mds": "allow *",
            "mgr": "allow profile mds"},
}


def new_key() -> str:
    """A cephx secret as ceph-authtool --gen-key writes it (type AES, creation time, 16
    random bytes)."""
    now = time.time()
    raw = struct.pack("<HIIH", 1, int(now), int(now % 1 * 1e9), 16) + os.urandom(16)
    return base64.b64encode(raw).decode()


def keyring(name: str, key: str, caps: dict[str, str]) -> str:
    return f"[{name}]\n\tkey = {key}\n" + "".join(
        f'\tcaps {k} = "{v}"\n' for k, v in caps.items())


def listeners() -> dict[int, list[tuple[int, str]]]:
    """TCP port -> [(pid, command)] of the processes listening on it."""
    out = sh("ss", "-Hltnp", check=False).stdout
    found: dict[int, list[tuple[int, str]]] = {}
    for line in out.splitlines():
        cols = line.split()
        if len(cols) < 4:
            continue
        port = int(cols[3].rsplit(":", 1)[1])
        for name, pid in re.findall(r'\("([^"]+)",pid=(\d+)', line):
            found.setdefault(port, []).append((int(pid), name))
    return found


@dataclass
class CephLedger:
    """What the testbed made; every path and command line of it holds ``prefix``."""

    prefix: str
    base: Path
    images: list[Path] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)
    cgroups: list[Path] = field(default_factory=list)  # made to slow a daemon down

    @property
    def conf(self) -> Path:
        return self.base / "ceph.conf"


class CephCluster:
    """One CephFS named ``cephfs`` on ``osds`` OSDs, two MDSs (one standby)."""

    def __init__(self, ledger: CephLedger, osds: int = 1, osd_gib: int = 64, mdss: int = 2
                 ) -> None:
        self.ledger = ledger
        self.osds = osds
        self.osd_gib = osd_gib
        self.mdss = [chr(ord("a") + i) for i in range(mdss)]
        self.times: dict[str, float] = {}

    @property
    def conf(self) -> Path:
        return self.ledger.conf

    def ceph(self, *args: str, timeout: float = 60, check: bool = True, client: str = "admin"
             ) -> subprocess.CompletedProcess:
        return sh("ceph", "-c", str(self.conf), "--id", client, "--connect-timeout", "20",
                  *args, timeout=timeout, check=check)

    def refuse_foreign(self) -> None:
        """A cluster not ours on our ports: refuse rather than join or disturb it."""
        ports = listeners()
        for port in MON_PORTS:
            for pid, name in ports.get(port, []):
                raise TestbedRefused(
                    f"port {port}, the CephFS testbed's mon port, is taken by {name} (pid {pid}"
                    f": {processes().get(pid, ('', '', ''))[2]}); stop it, or clean up an old "
                    "testbed with `python -m tests.kit.testbed.ceph DIR`")
        for port, owners in ports.items():
            if BIND_RANGE[0] <= port <= BIND_RANGE[1]:
                for pid, name in owners:
                    cmd = processes().get(pid, ("", "", ""))[2]
                    if name in DAEMONS and self.ledger.prefix not in cmd:
                        raise TestbedRefused(
                            f"a Ceph daemon this testbed did not start listens on port {port}"
                            f" of its range (pid {pid}: {cmd})")

    def start(self) -> None:
        t0 = time.monotonic()
        self.refuse_foreign()
        base = self.ledger.base
        for d in ("run", "log", "keys", "crash", "mon/ceph-a", "mgr/ceph-x"):
            (base / d).mkdir(parents=True)
        v2, v1 = MON_PORTS
        size = min(self.osds, 3)
        self.conf.write_text(CONF.format(
            fsid=uuid.uuid4(), v2=v2, v1=v1, pmin=BIND_RANGE[0], pmax=BIND_RANGE[1],
            base=base, size=size, min_size=max(1, size - 1)))
        self._keys()
        sh("monmaptool", "--create", "--addv", "a", f"[v2:127.0.0.1:{v2},v1:127.0.0.1:{v1}]",
           "--fsid", self._fsid(), str(base / "monmap"))
        sh("ceph-mon", "-c", str(self.conf), "--mkfs", "-i", "a", "--monmap",
           str(base / "monmap"), "--keyring", str(base / "keys" / "mon-all.keyring"))
        sh("ceph-mon", "-c", str(self.conf), "-i", "a")
        self._wait_port(v2, 30)
        sh("ceph-mgr", "-c", str(self.conf), "-i", "x")
        self.times["mon"] = time.monotonic() - t0
        self._osds()
        self.times["osds"] = time.monotonic() - t0
        self.ceph("osd", "pool", "create", f"{FS}_metadata", "8")
        self.ceph("osd", "pool", "create", f"{FS}_data", "16")
        self.ceph("fs", "new", FS, f"{FS}_metadata", f"{FS}_data")
        for m in self.mdss:
            sh("ceph-mds", "-c", str(self.conf), "-i", m)
        key = self.ceph("fs", "authorize", FS, f"client.{CLIENT}", "/", "rw").stdout
        (base / "keys" / f"client.{CLIENT}.keyring").write_text(key)
        self.wait_mds(active=1, standby=len(self.mdss) - 1, timeout=120)
        self.times["up"] = time.monotonic() - t0

    def _fsid(self) -> str:
        return re.search(r"fsid = (\S+)", self.conf.read_text()).group(1)  # type: ignore

    def _keys(self) -> None:
        keys = self.ledger.base / "keys"
        entities = {"mon.": CAPS["mon."], "client.admin": CAPS["client.admin"],
                    "mgr.x": CAPS["mgr.x"]}
        entities.update({f"osd.{i}": CAPS["osd"] for i in range(self.osds)})
        entities.update({f"mds.{m}": CAPS["mds"] for m in self.mdss})
        every = []
        for name, caps in entities.items():
            text = keyring(name, new_key(), caps)
            every.append(text)
            if name != "mon.":
                (keys / f"{name}.keyring").write_text(text)
        (keys / "mon-all.keyring").write_text("".join(every))

    def _osds(self) -> None:
        """``ceph osd new`` for each, then their mkfs side by side, then start them."""
        made = []
        for i in range(self.osds):
            u = str(uuid.uuid4())
            got = self.ceph("osd", "new", u).stdout.strip()
            if got != str(i):
                raise RuntimeError(f"ceph osd new gave id {got}, expected {i}")
            data = self.ledger.base / "osd" / f"ceph-{i}"
            data.mkdir(parents=True)
            image = self.ledger.base / f"osd{i}.img"
            sh("truncate", "-s", f"{self.osd_gib}G", str(image))
            self.ledger.images.append(image)
            dev = sh("losetup", "--find", "--show", str(image)).stdout.strip()
            (data / "block").symlink_to(dev)
            made.append(subprocess.Popen(
                ["ceph-osd", "-c", str(self.conf), "-i", str(i), "--mkfs", "--osd-uuid", u],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        for i, proc in enumerate(made):
            out, _ = proc.communicate(timeout=120)
            if proc.returncode != 0:
                raise RuntimeError(f"mkfs of osd.{i} failed: {out[-2000:]}")
        for i in range(self.osds):
            sh("ceph-osd", "-c", str(self.conf), "-i", str(i))
        deadline = time.monotonic() + 120
        while json.loads(self.ceph("osd", "stat", "-f", "json").stdout)["num_up_osds"] < \
                self.osds:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.osds} OSDs not up after 120 s")
            time.sleep(0.5)

    def _wait_port(self, port: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the mon does not listen on {port} after {timeout} s")
            time.sleep(0.1)

    def mds_map(self) -> dict:
        """``ceph fs dump``: {"active": [names], "standby": [names], "states": {name: state}}."""
        dump = json.loads(self.ceph("fs", "dump", "-f", "json", timeout=30).stdout)
        states = {}
        for fs in dump.get("filesystems", []):
            for info in fs["mdsmap"]["info"].values():
                states[info["name"]] = info["state"]
        standby = [s["name"] for s in dump.get("standbys", [])]
        return {"active": [n for n, s in states.items() if s == "up:active"],
                "standby": standby, "states": states}

    def wait_mds(self, active: int, standby: int, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            m = self.mds_map()
            if len(m["active"]) >= active and len(m["standby"]) >= standby:
                return m
            if time.monotonic() > deadline:
                raise RuntimeError(f"MDS not {active} active + {standby} standby after "
                                   f"{timeout} s: {m}")
            time.sleep(0.5)

    def pid_of(self, name: str) -> int:
        """The PID of our daemon ``name`` (mds.a, osd.0), checked against its command line."""
        kind, ident = name.split(".", 1)
        for pid, (comm, _, cmd) in processes().items():
            argv = cmd.split()
            if comm == f"ceph-{kind}" and str(self.conf) in argv and "-i" in argv and \
                    argv[argv.index("-i") + 1] == ident and "--mkfs" not in argv:
                return pid
        raise LookupError(f"{name} of this testbed is not running")

    def clean(self) -> list[str]:
        """Kill every process of ours (until none is left: a failed MDS re-executes itself),
        detach the loop devices; returns what could not be undone."""
        problems: list[str] = []
        deadline = time.monotonic() + 30
        while pids_mentioning(self.ledger.prefix):
            kill_all(pids_mentioning(self.ledger.prefix))
            if time.monotonic() > deadline:
                problems.append(f"processes left: {pids_mentioning(self.ledger.prefix)}")
                break
        for image in self.ledger.images:
            try:
                _detach(image)
            except Exception as exc:  # go on: the rest must still be undone
                problems.append(f"detach {image}: {exc}")
        for group in self.ledger.cgroups:  # empty once its processes are gone
            try:
                if group.exists():
                    group.rmdir()
            except OSError as exc:
                problems.append(f"cgroup {group}: {exc}")
        deadline = time.monotonic() + 10  # the kernel lets a loop device go a moment later
        while self.ledger.prefix in sh("losetup", "-a", check=False).stdout and \
                time.monotonic() < deadline:
            time.sleep(0.1)
        return problems


def leftovers(ledger: CephLedger) -> list[str]:
    """Anything of ours still there: processes, mounts, loop devices, files."""
    found = prefix_leftovers(ledger.prefix, ledger.files)
    found += [f"cgroup {g}" for g in ledger.cgroups if g.exists()]
    if ledger.base.exists():
        found.append(f"directory {ledger.base}")
    return found


if __name__ == "__main__":
    import shutil
    import sys

    for arg in sys.argv[1:]:  # the directory of a testbed whose process was killed
        base = Path(arg).resolve()
        gone = CephLedger(base.name, base, images=sorted(base.glob("osd*.img")))
        left = CephCluster(gone).clean()
        if not left and gone.prefix not in Path("/proc/self/mountinfo").read_text():
            shutil.rmtree(gone.base)
        print(arg, left or "cleaned", leftovers(gone))
