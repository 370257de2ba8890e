"""The paper's validation, long form: 2-4 probing nodes on a GlusterFS volume or a CephFS (the
test's parameter, ``-k glusterfs`` or ``-k cephfs``), a quiet period
(the baseline, then minutes that count false alarms), then every IO500 phase from a node that
does not probe, with quiet gaps. Writes the table of docs/VALIDATION.md, the report (HTML and
PNG) and the nodes' databases into $SLOWDOWN_IO500_OUT (default: the test's tmp_path).

    SLOWDOWN_IO500_NODES=2 SLOWDOWN_IO500_SECONDS=90 SLOWDOWN_IO500_GAP=60 \\
    SLOWDOWN_IO500_OUT=/var/tmp/io500 python -m pytest --long tests/long/test_io500_long.py \\
    -k glusterfs

$SLOWDOWN_IO500_PHASES (comma-separated names) runs only those phases; $SLOWDOWN_IO500_BASELINE_MIN
and $SLOWDOWN_IO500_QUIET_MIN set the quiet period (4 and 3 minutes).
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from slowdown.analysis.words import MD_OPS
from tests.kit.iorkit import ior_bin
from tests.kit.testbed.io500 import phases, run_phases
from tests.kit.testbed.kinds import KINDS, TITLES, open_testbed
from tests.kit.testbed.results import at, per_minute, rebaseline, slowdown
from tests.kit.testbed.table import agreement, false_alarms, minutes_of, phase_table

pytestmark = [pytest.mark.root, pytest.mark.timeout(4 * 3600)]


def knob(name: str, default: int) -> int:
    return int(os.environ.get(f"SLOWDOWN_IO500_{name}", default))


def sleep_until(t: float) -> None:
    time.sleep(max(0.0, t - time.time()))


def say(text: str) -> None:
    print(time.strftime("%H:%M:%S", time.gmtime()), text, flush=True)


def screenshot(html: Path, png: Path) -> None:
    """The report page as one picture (chromium headless)."""
    subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu",
                    "--hide-scrollbars", f"--screenshot={png}", "--window-size=1400,2200",
                    "--virtual-time-budget=5000", html.as_uri()],
                   capture_output=True, timeout=120, check=True)


@pytest.mark.parametrize("fs", KINDS)
def test_io500_phases_as_seen_by_the_nodes(fs: str, tmp_path: Path, root_only) -> None:
    nodes, seconds, gap = knob("NODES", 2), knob("SECONDS", 90), knob("GAP", 60)
    baseline_min, quiet_min = knob("BASELINE_MIN", 4), knob("QUIET_MIN", 3)
    out = Path(os.environ.get("SLOWDOWN_IO500_OUT", tmp_path))
    out.mkdir(parents=True, exist_ok=True)
    ior_bin()
    with open_testbed(fs, nodes, gib=10) as bed:
        b0 = (int(time.time() + 20) // 60 + 1) * 60  # after prepare and the first ticks
        b1 = b0 + baseline_min * 60
        q1 = b1 + quiet_min * 60
        say(f"baseline {at(b0)}..{at(b1)}, quiet until {at(q1)}")
        sleep_until(b1 + 3)
        for node in bed.nodes:
            rebaseline(node.config, b0, b1, "quiet volume before the IO500 phases")
        sleep_until(q1)
        chosen = os.environ.get("SLOWDOWN_IO500_PHASES")  # names, comma-separated
        plan = [p for p in phases(seconds) if chosen is None or p.name in chosen.split(",")]
        plan = run_phases(lambda argv, name: bed.load(argv, name, timeout=1800), plan, gap,
                          say)
        end = (int(time.time()) // 60 + 1) * 60
        sleep_until(end + 63)  # the last minute flushed
        seen = {node.name: (per_minute(node.config, b0, end + 60, "median")[0],
                            per_minute(node.config, b0, end + 60, "q95")[0])
                for node in bed.nodes}
        dbs = [arg for node in bed.nodes for arg in ("--db", str(node.database))]
        slowdown("report", *dbs, "--since", at(b0), "--until", at(end + 60), "-o",
                 str(out / "report.html"), "--png", str(out / "png"),
                 "--title", f"{TITLES[fs]}, {nodes} nodes, IO500 phases")
        for node in bed.nodes:  # a consistent copy of the live database (WAL and all)
            with sqlite3.connect(f"file:{node.database}?mode=ro", uri=True) as src, \
                    sqlite3.connect(out / f"{node.name}.db") as dst:
                src.backup(dst)
        loads = {n.name: n.output()[-4000:] for n in bed.others}
    screenshot(out / "report.html", out / "report.png")
    alarms, looked = false_alarms(seen, b1, q1)
    text = "\n\n".join([
        f"{TITLES[fs]}. Nodes: {nodes}; write phases stonewalled at {seconds} s; gaps {gap} s; "
        f"baseline {baseline_min} min; quiet {quiet_min} min.",
        phase_table(seen, plan, end + 60),
        f"False alarms: {alarms} of {looked} node-minutes of the quiet period (a 1m median "
        "slowdown >= 2 on any op).",
        agreement(seen, plan),
    ])
    (out / "table.md").write_text(text + "\n")
    (out / "phases.json").write_text(json.dumps(
        [{"name": p.name, "start": p.start, "end": p.end, "status": p.status,
          "argv": p.argv} for p in plan], indent=1))
    say("\n" + text)
    assert bed.leftovers() == []
    assert all(p.status == 0 for p in plan), loads
    hard = next((p for p in plan if p.name == "mdtest-hard-write"), None)
    for name, (median, _) in seen.items() if hard else ():
        span = minutes_of(hard.start, hard.end)
        peaks = {op: max((median.get((op, m), 0.0) for m in span), default=0.0)
                 for op in MD_OPS}
        assert max(peaks.values()) >= 2, (name, peaks)
