"""Publishing on a real shared filesystem: a node's live database (its service probing a
GlusterFS volume) published again and again into a directory on the volume by one client
node, while another client node (its own namespace, host name and GlusterFS mount, as another
machine would have) reads the copies with ``slowdown --db`` and checks each one whole. No
read fails, every copy the reader meets passes ``PRAGMA integrity_check``, and no ``-wal``,
``-shm`` or ``-journal`` file ever appears in the shared directory (docs/FLEET.md).

    python -m pytest tests/long/test_publish_gluster.py --long
"""

from __future__ import annotations

import json
import sys
import time

import pytest

from tests.kit.testbed.nodes import NamespaceNode, Testbed

pytestmark = [pytest.mark.root, pytest.mark.timeout(900)]

SECONDS = 90  # of publishing and reading side by side

PUBLISHER = """
import sys, time
from pathlib import Path
from slowdown.probe.exporters.publish import PublishError, publish
database, directory = Path(sys.argv[1]), Path(sys.argv[2])
host, seconds = sys.argv[3], float(sys.argv[4])
directory.mkdir(exist_ok=True)
end, done, failed = time.monotonic() + seconds, 0, []
while time.monotonic() < end:
    try:
        publish(database, directory, host)
        done += 1
    except PublishError as exc:
        failed.append(str(exc))
    time.sleep(0.2)
print("PUBLISHED", done, failed[:3], flush=True)
"""

READER = """
import json, os, sqlite3, subprocess, sys, time
from pathlib import Path
from slowdown.analysis.store.open_files import read_only_uri
directory, seconds = Path(sys.argv[1]), float(sys.argv[2])
while not (directory / "node1.db").exists():
    time.sleep(0.2)
end = time.monotonic() + seconds
reads, failures, torn, strays = 0, [], [], set()
while time.monotonic() < end:
    shown = subprocess.run(["slowdown", "--db", str(directory / "*.db"), "--json"],
                           capture_output=True, text=True, timeout=120)
    if shown.returncode != 0 or json.loads(shown.stdout)["merged"]["skipped"]:
        failures.append(shown.stderr[-500:] or shown.stdout[-500:])
    conn = sqlite3.connect(read_only_uri(directory / "node1.db"), uri=True)
    try:
        check = conn.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        conn.close()
    if check != "ok":
        torn.append(check)
    strays |= {n for n in os.listdir(directory) if n.endswith(("-wal", "-shm", "-journal"))}
    reads += 1
print("READ " + json.dumps({"reads": reads, "failures": failures[:3], "torn": torn[:3],
                            "strays": sorted(strays)}), flush=True)
"""


def test_copies_published_on_glusterfs_are_read_whole_from_another_node(root_only) -> None:
    with Testbed(nodes=1, brick_mib=1024) as bed:
        node = bed.nodes[0]
        time.sleep(65)  # a minute of records written by the service
        publisher = NamespaceNode(bed, "publisher")
        bed.others.append(publisher)
        publisher.start([[sys.executable, "-c", PUBLISHER, str(node.database), "shared",
                          "node1", str(SECONDS)]], cwd=publisher.mount)
        rc = bed.load([sys.executable, "-c", READER, "shared", str(SECONDS - 10)],
                      name="reader", timeout=SECONDS + 300)
        reader_out = bed.others[-1].output()
        assert publisher.proc.wait(timeout=SECONDS + 120) == 0, publisher.output()[-3000:]
        published = publisher.output()
    assert bed.leftovers() == []
    assert rc == 0, reader_out[-3000:]
    line = next(x for x in published.splitlines() if x.startswith("PUBLISHED"))
    count = int(line.split()[1])
    result = json.loads(next(x for x in reader_out.splitlines()
                             if x.startswith("READ "))[len("READ "):])
    print(f"\n{line}\nREAD {json.dumps(result)}")
    assert count >= 50 and "[]" in line, line
    assert result["reads"] >= 10, result
    assert result["failures"] == [] and result["torn"] == [] and result["strays"] == [], result
