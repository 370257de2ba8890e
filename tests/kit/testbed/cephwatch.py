"""What a probing node of the CephFS testbed shows while a fault lasts, read from its service's
live state as ``slowdown watch`` reads it: the oldest op in flight (stuck), errors, ticks; and
when its ops are back."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from slowdown.analysis.words import MD_OPS
from tests.kit.servicekit import live, wait_for
from tests.kit.testbed.nodes import ProbeNode

if TYPE_CHECKING:
    from tests.kit.testbed.cephbed import CephTestbed

TARGET = "cephfs"
DATA_OPS = ("data-read", "data-write")


def state(node: ProbeNode) -> dict:
    return live(node.database)["targets"][TARGET]


def stuck(node: ProbeNode, prefix: str = "") -> float:
    """The age of the oldest op in flight whose name starts with ``prefix`` (0: none)."""
    return max((f["age"] for f in state(node)["in_flight"] if f["op"].startswith(prefix)),
               default=0.0)


def back(node: ProbeNode, after: float, ops: tuple[str, ...] = (*MD_OPS, *DATA_OPS)) -> bool:
    """Every op of ``ops`` done again since ``after``, none in flight."""
    s = state(node)
    return not s["in_flight"] and all(
        "lat" in s["last"].get(op, {}) and s["last"][op]["at"] > after for op in ops)


def sample(node: ProbeNode, since: float) -> dict:
    s = state(node)
    return {"t": round(time.time() - since, 1), "errors": s["errors"], "ticks": s["ticks"],
            "in_flight": {f["op"]: round(f["age"], 1) for f in s["in_flight"]}}


def watch(node: ProbeNode, seconds: float, since: float, step: float = 2) -> list[dict]:
    """A sample every ``step`` seconds for ``seconds``."""
    samples, end = [], time.time() + seconds
    while time.time() < end:
        samples.append(sample(node, since))
        time.sleep(step)
    return samples


def worst(samples: list[dict]) -> float:
    """The longest any op was in flight over the samples."""
    return max((age for s in samples for age in s["in_flight"].values()), default=0.0)


def mds_failover(bed: CephTestbed) -> tuple[float, float, dict[str, float]]:
    """Kill the active MDS (a standby present) and watch the nodes until their md ops are back:
    (seconds until a standby was active, seconds until every node's md ops were back, each
    node's oldest md op in flight meanwhile)."""
    killed_at = time.time()
    killed = bed.kill_active_mds()
    stalled = {node.name: 0.0 for node in bed.nodes}
    while bed.active_mds() in (killed, None):
        for node in bed.nodes:
            stalled[node.name] = max(stalled[node.name], stuck(node, "md"))
        assert time.time() - killed_at < 90, "no standby took over in 90 s"
        time.sleep(0.5)
    failover = time.time() - killed_at
    for node in bed.nodes:
        wait_for(lambda n=node: back(n, killed_at + failover, MD_OPS), 90, step=0.5,
                 what=f"{node.name}'s md ops back after the failover")
    return failover, time.time() - killed_at, stalled
