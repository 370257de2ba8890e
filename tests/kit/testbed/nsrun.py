"""One node, run inside its own UTS and mount namespaces (``unshare --uts --mount
--propagation private python -m tests.kit.testbed.nsrun ...``): set the host name, mount the
volume (GlusterFS with ``--source``, or any FUSE client's command with ``--mount-cmd``, such
as ceph-fuse), run the given commands one after the other, unmount, reap the client.

Why a program of its own: the FUSE client is a daemon inside the namespace; left mounted
it lives on after the last command (and keeps the namespace alive). So the mount is undone
here, whatever the commands did, and a client that survives the unmount is killed by PID.
SIGTERM and SIGINT go to the command running; the rest are then skipped.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time

from tests.kit.faultfs.mounts import mount_fstype

_stop = False
_child: subprocess.Popen | None = None


def _forward(signum: int, _frame: object) -> None:
    global _stop
    _stop = True
    if _child is not None and _child.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            _child.send_signal(signum)


def _client_pids(mount: str, client: bytes) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        with contextlib.suppress(OSError):
            with open(f"/proc/{name}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            if argv and argv[0].endswith(client) and mount.encode() in argv:
                found.append(int(name))
    return found


def _unmount(mount: str, client: bytes) -> None:
    for _ in range(20):
        if mount_fstype(mount) is None:
            break
        if subprocess.run(["umount", mount], capture_output=True).returncode == 0:
            break
        time.sleep(0.25)
    else:
        subprocess.run(["umount", "-l", mount], capture_output=True)
    deadline = time.monotonic() + 10
    while _client_pids(mount, client) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in _client_pids(mount, client):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
            os.kill(pid, signal.SIGKILL)


def main(argv: list[str]) -> int:
    global _child
    parser = argparse.ArgumentParser()
    parser.add_argument("--hostname", required=True)
    parser.add_argument("--source", help="HOST:/VOLUME of GlusterFS")
    parser.add_argument("--mount-cmd", help="JSON argv that mounts on --mount (else GlusterFS)")
    parser.add_argument("--fstype", default="fuse.glusterfs", help="the mount's type once made")
    parser.add_argument("--client", default="glusterfs", help="the FUSE client's program")
    parser.add_argument("--mount", required=True)
    parser.add_argument("--client-log", required=True)
    parser.add_argument("--ready", required=True, help="file written once mounted")
    parser.add_argument("--cwd")
    parser.add_argument("steps", help="JSON list of argv lists")
    args = parser.parse_args(argv)
    steps = json.loads(args.steps)

    signal.signal(signal.SIGTERM, _forward)
    signal.signal(signal.SIGINT, _forward)
    socket.sethostname(args.hostname)
    rc = 0
    try:
        mount = (json.loads(args.mount_cmd) if args.mount_cmd else
                 ["mount", "-t", "glusterfs", "-o", f"log-file={args.client_log}", args.source,
                  args.mount])
        subprocess.run(mount, check=True, capture_output=True)
        if mount_fstype(args.mount) != args.fstype:
            raise RuntimeError(f"{mount} did not mount {args.fstype} on {args.mount}")
        with open(args.ready, "w") as f:
            f.write(f"{os.getpid()}\n")
        for step in steps:
            if _stop:
                break
            _child = subprocess.Popen(step, cwd=args.cwd or args.mount)
            rc = _child.wait()
            if rc != 0:
                break
    finally:
        _unmount(args.mount, args.client.encode())
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
