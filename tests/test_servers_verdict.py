"""The verdict and ``slowdown -v`` name the slow server where the per-server records say so;
the plain line stays as it was and loads no numpy to say it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from slowdown.analysis.histogram import Histogram
from slowdown.analysis.store import Store
from slowdown.analysis.store.server_records import ServerRecord
from tests.kit.verdictkit import AT, HOSTS, MINUTES, T0, host_db, n0_config, show

SLOW_TEN = T0 + (MINUTES - 10) * 60  # the last ten minutes of the kit's data, a whole ten
BRICKS = [f"h{i}:/bricks/b{i}" for i in range(1, 5)]


def add_servers(path: Path, host: str) -> None:
    """The host's data reads of the slow ten per brick: b3 12x the baseline (2 ms), the
    others 1.1x, 150 probes each."""
    rng = np.random.default_rng(sum(map(ord, host)) + 1)
    records = []
    for brick in BRICKS:
        h = Histogram()
        h.record_many(rng.lognormal(np.log(0.002 * (12.0 if brick.endswith("b3") else 1.1)),
                                    0.2, 150))
        records.append(ServerRecord(host, "work", "data-read", brick, SLOW_TEN, h))
    with Store(path) as store:
        store.write([], servers=records)


def fleet(tmp_path: Path, servers: bool) -> Path:
    """Every node ten times slower (a filesystem verdict), with or without per-server
    records; the configuration of n0, whose fleet is the shared directory."""
    shared = tmp_path / "shared"
    shared.mkdir(parents=True)
    for host in HOSTS:
        host_db(shared / f"{host}.db", host, 10.0)
        if servers:
            add_servers(shared / f"{host}.db", host)
    return n0_config(tmp_path, shared)


def test_the_filesystem_verdict_names_the_slow_brick(tmp_path):
    named, plain = fleet(tmp_path / "named", True), fleet(tmp_path / "plain", False)
    verbose = show(named, "-v")
    assert "verdict work (n0, median over 1m): filesystem: h3:/bricks/b3 12x, the others " \
           "1.1x; most other nodes are slow too; 5 of 5 other nodes slow" in verbose, verbose
    assert "slow servers work (medians over the last 10m, whole ten minutes): h3:/bricks/b3 " \
           "12x, the others 1.1x" in verbose
    verdict = json.loads(show(named, "--json"))["targets"][0]["verdict"]
    assert verdict["verdict"] == "filesystem"
    assert verdict["servers"] == "h3:/bricks/b3 12x, the others 1.1x"
    # Without per-server records: the text and JSON of before, no "servers" key.
    before = json.loads(show(plain, "--json"))["targets"][0]["verdict"]
    assert "servers" not in before and before["reason"] == verdict["reason"]
    assert "slow servers" not in show(plain, "-v")
    # The plain line is the same with or without them (its numbers are the minutes').
    assert show(named) == show(plain)


def test_the_plain_line_with_a_filesystem_verdict_loads_no_numpy(tmp_path):
    """The verdict says filesystem, so the per-server records are read: still no numpy."""
    config = fleet(tmp_path, True)
    code = ("import atexit, sys\n"
            "atexit.register(lambda: print(' '.join(sorted(sys.modules)), file=sys.stderr))\n"
            "from slowdown.analysis.cli.entry import main\n"
            "sys.argv[0] = 'slowdown'\nsys.exit(main())\n")
    done = subprocess.run([sys.executable, "-c", code, "--config", str(config), "--at",
                           f"@{AT}"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.split()[-1] == "filesystem", done.stdout
    loaded = set(done.stderr.split())
    assert "slowdown.analysis.store.server_reads" in loaded  # they were read
    assert not {m for m in loaded if m.split(".")[0] == "numpy"}


def test_an_alert_on_the_fleet_names_the_brick_in_its_verdict_and_summary(tmp_path):
    """A rule of n0 fires on a filesystem verdict: its message's verdict line is the
    verdict's text with the brick, its summary ends with it, the verdict's word not said
    twice; without per-server records, both as before."""
    from slowdown.analysis.alerts import Notification, evaluate
    from slowdown.analysis.config import loads

    rule = ('[[alert]]\nname = "any"\nstatistic = "median"\nwindow = "1m"\nabove = 3.0\n'
            'action = { type = "command", argv = ["/bin/true"] }\n')
    notes = {}
    for case in ("named", "plain"):
        path = fleet(tmp_path / case, case == "named")
        config = loads(path.read_text() + rule, path=path)
        with Store(config.database) as store:
            evaluate(config, store, AT)
            (message,) = store.conn.execute("SELECT message FROM alert_outbox").fetchone()
        notes[case] = Notification.from_json(message)
    named, plain = notes["named"], notes["plain"]
    brick = "h3:/bricks/b3 12x, the others 1.1x"
    assert named.details["verdict"].startswith(f"filesystem: {brick}; most other nodes")
    assert named.summary.endswith(f"(warning); filesystem: {brick}"), named.summary
    assert [s["server"] for s in named.document()["slowdown"]["servers"]] == [BRICKS[2]]
    assert plain.details["verdict"].startswith("filesystem: most other nodes")
    assert plain.summary.endswith("(warning, filesystem)"), plain.summary
    assert plain.document()["slowdown"]["servers"] == []
