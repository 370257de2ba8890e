"""What a probing node of the CephFS testbed shows while a fault lasts, read from its service's
live state as ``slowdown watch`` reads it: the oldest op in flight (stuck), errors, ticks; and
when its ops are back."""

from __future__ import annotations

import time

from slowdown.analysis.words import MD_OPS
from tests.kit.servicekit import live
from tests.kit.testbed.nodes import ProbeNode

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
