"""The validation's short form, shared by the GlusterFS and CephFS testbeds: a baseline from a
quiet period, a quiet minute checked, then one whole minute of load read on every node.

The md ops are read as ``slowdown --op 'md-*'`` shows them: the worst op's 1m median slowdown.
A quiet minute must read < 1.5 on every node. Two FUSE clients, their servers and two probing
services share a 2-core machine with whatever else runs on it, and once in a while one node's
quiet minute reads higher (1.54 and 1.87 were seen, each on one node while the other read
1.0-1.2). The quiet minute is then taken again, once: two raised minutes in a row fail the test,
and every raised minute is printed with the run's output, so a run says how often it happened.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from slowdown.analysis.words import MD_OPS
from tests.kit.iorkit import sleep_until
from tests.kit.testbed.results import per_minute, rebaseline

QUIET_BELOW = 1.5  # the worst md op's 1m median slowdown in a quiet minute
BURST_AT_LEAST = 2.0  # ... and in the burst's minute
QUIET_TRIES = 2  # quiet minutes tried, one after the other, before the test fails
FLUSHED_WITHIN = 15.0  # seconds after a minute's end by which every node has written it

Reading = dict[str, float]  # md op -> its 1m median slowdown in one minute


class Node(Protocol):
    name: str
    config: Path


def read_minute(nodes: Sequence[Node], minute: int) -> dict[str, Reading]:
    """Each node's md ops in ``minute``, once every node has written all of them."""
    deadline = minute + 60 + FLUSHED_WITHIN
    sleep_until(minute + 60.5)  # the services flush at each minute's first second
    while True:
        readings = {}
        for node in nodes:
            found = per_minute(node.config, minute, minute + 60, "median")[0]
            readings[node.name] = {op: found[(op, minute)] for op in MD_OPS
                                   if (op, minute) in found}
        if all(len(r) == len(MD_OPS) for r in readings.values()) or time.time() > deadline:
            return readings
        time.sleep(0.5)


def quiet_minute(nodes: Sequence[Node], started: float, min_baseline: float,
                 reason: str) -> tuple[int, dict[str, Reading]]:
    """Rebaseline every node from [started, the first minute start at least ``min_baseline``
    later), then return the first of up to ``QUIET_TRIES`` minutes after it that reads quiet
    on every node, with its readings; raises AssertionError when none does."""
    quiet = (int(started + min_baseline) // 60 + 1) * 60
    sleep_until(quiet)
    for node in nodes:
        rebaseline(node.config, started, quiet, reason)
    raised = []
    for _ in range(QUIET_TRIES):
        readings = read_minute(nodes, quiet)
        assert all(len(r) == len(MD_OPS) for r in readings.values()), (quiet, readings)
        if all(max(r.values()) < QUIET_BELOW for r in readings.values()):
            for minute, seen in raised:
                print(f"\nquiet minute {minute} read raised, taken again: {seen}")
            return quiet, readings
        raised.append((quiet, readings))
        quiet += 60
    raise AssertionError(f"no quiet minute in {QUIET_TRIES}: {raised}")


def load_seconds(burst: int) -> int:
    """Seconds of load from now to one second past the end of the burst's minute (the quiet
    minute is read first, so the load starts a second or two into it)."""
    return int(burst + 61 - time.time())


def check(quiet: dict[str, Reading], burst: dict[str, Reading],
          outputs: dict[str, str]) -> None:
    """Every node read its quiet minute quiet and its burst minute at least 2x."""
    for name, during in burst.items():
        before = quiet[name]
        print(name, "quiet", before, "burst", during)
        assert len(during) == len(MD_OPS), (name, before, during, outputs[name][-2000:])
        assert max(before.values()) < QUIET_BELOW, (name, before, during)
        assert max(during.values()) >= BURST_AT_LEAST, (name, before, during,
                                                        outputs[name][-2000:])
