"""Ask the Ceph monitors many read-only commands over one connection, as the client's key.

Run as a script by the interpreter of the ``ceph`` command (which imports Ceph's ``rados``
binding: Debian's and RHEL's packages install it for the system Python only, where no
virtual environment sees it): ``python3 ceph_mon.py CONF NAME KEYRING TIMEOUT`` (an empty
argument: Ceph's default), then one JSON command a line on stdin; one JSON line
``[ret, output, status]`` on stdout for each. It imports nothing of slowdown.

Why not the ``ceph`` command: it validates each command against every command's signature,
~48 ms of CPU each (1000 ``osd map`` lines: 48 s of CPU here); librados's ``mon_command``
costs about 1 ms. Only read commands are sent (``osd map``, ``osd dump``, ``mds stat``):
the resolver builds them, no user string becomes one.
"""

from __future__ import annotations

import json
import sys

READ_ONLY = ("osd map", "osd dump", "osd stat", "mds stat", "fs dump")


def main(argv: list[str]) -> int:
    conf, name, keyring, timeout = ([*argv, "", "", "", "10"])[:4]
    import rados  # the system Python's binding (python3-rados)

    options = {"client_mount_timeout": timeout, "rados_mon_op_timeout": timeout,
               "rados_osd_op_timeout": timeout}
    if keyring:
        options["keyring"] = keyring
    cluster = rados.Rados(name=name or None, conffile=conf or None, conf=options)
    if not conf:
        cluster.conf_read_file()  # /etc/ceph/ceph.conf and Ceph's other default places
    cluster.conf_parse_env()  # CEPH_ARGS, as the ceph command honours it
    cluster.connect(timeout=int(float(timeout)))
    try:
        for line in sys.stdin:
            if not line.strip():
                continue
            command = json.loads(line)
            if command.get("prefix") not in READ_ONLY:
                answer = [-22, "", f"not a read command: {command.get('prefix')}"]
            else:
                ret, out, status = cluster.mon_command(json.dumps(command), b"",
                                                       timeout=int(float(timeout)))
                answer = [ret, out.decode(errors="replace"), status]
            sys.stdout.write(json.dumps(answer) + "\n")
            sys.stdout.flush()
    finally:
        cluster.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
