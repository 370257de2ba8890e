"""How many nodes a target aggregate needs, from the measured variation (the Gluster method).

Every minute record of one host is one draw of what one node delivers: its per-minute
throughput is ``count / sum`` of the minute's latencies, the rate of a client that issues
the op back to back (1 / mean latency, ops/s; a data op moves 1 MiB, so MiB/s is the same
number). A minute without a completed op (only errors, skipped ticks or a stuck probe)
delivered nothing and counts as 0. Hour records are not used: their variation is averaged
away.

Given a goal ``G`` (ops/s, or bytes/s for ops of a known size) and a confidence ``c``:

- **best case**: ``ceil(G / x_max)`` nodes, every node as fast as the best minute measured;
- **with confidence c**: the smallest ``N`` with ``P(X_1 + ... + X_N >= G) >= c``, the ``X_i``
  drawn independently from the measured minutes (with replacement). It is found by Monte
  Carlo: each of ``trials`` runs adds draws until its sum reaches ``G``; ``N`` is the
  ``ceil(c * trials)``-th smallest number of draws, since a sum of non-negative draws only
  grows (``P(S_N >= G)`` is the fraction of runs that reached ``G`` within ``N`` draws).
  The draws come from ``numpy.random.default_rng(seed)``: the same data, goal, confidence,
  trials and seed give the same answer;
- **ratio**: nodes with confidence / nodes in the best case, the price of the variation.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

    from slowdown.analysis.store import Selection, Store

DATA_OP_BYTES = 1 << 20  # a data probe op reads or writes 1 MiB (SPEC section 3)
OP_BYTES = {"data-read": DATA_OP_BYTES, "data-write": DATA_OP_BYTES}
DEFAULT_TRIALS = 10_000
DEFAULT_SEED = 0
MAX_DRAWS = 200_000_000  # trials x nodes: beyond this the estimate would take minutes
_CHUNK = 4_000_000  # draws held in memory at once
_RELATIVE_SLACK = 1e-12  # a sum within this of the goal reaches it (float rounding)
_RATE = re.compile(r"\s*([0-9.]+(?:[eE][0-9]+)?)\s*(|/s|ops/s|iops)\s*", re.IGNORECASE)


@dataclass(frozen=True)
class Goal:
    """A target aggregate: ``value`` per second of ``unit`` (``"ops/s"`` or ``"B/s"``)."""

    value: float
    unit: str
    text: str

    def per_op(self, op: str) -> float | None:
        """Ops per second of ``op`` the goal means; None if the op moves no known bytes."""
        if self.unit == "ops/s":
            return self.value
        size = OP_BYTES.get(op)
        return None if size is None else self.value / size


def parse_goal(text: str) -> Goal:
    """``20000``, ``20000/s``, ``20000 IOPS`` (ops/s) or ``5GiB/s``, ``500MB/s`` (bytes/s)."""
    from slowdown.analysis.units import parse_size

    match = _RATE.fullmatch(text)
    if match is not None:
        try:
            value = float(match.group(1))
        except ValueError:
            value = math.nan
        if math.isfinite(value) and value > 0:
            return Goal(value, "ops/s", text.strip())
    body = text.strip()
    if body.lower().endswith("/s"):
        try:
            size = parse_size(body[:-2])
        except ValueError:
            size = 0
        if size > 0:
            return Goal(float(size), "B/s", body)
    raise ValueError(f"expected ops per second like 20000 or 20000/s, or bytes per second "
                     f"like 5GiB/s or 500MB/s; got {text!r}")


@dataclass(frozen=True)
class Estimate:
    """Nodes needed for a goal, from ``samples`` per-node figures (ops/s)."""

    goal: float  # ops/s
    confidence: float
    samples: int
    best: float  # best per-node figure
    mean: float
    nodes_best: int
    nodes: int  # with the confidence
    trials: int
    seed: int

    @property
    def ratio(self) -> float:
        return self.nodes / self.nodes_best


def _ceil(x: float) -> int:
    return max(1, math.ceil(round(x, 9)))


def estimate(values: Sequence[float] | np.ndarray, goal: float, confidence: float,
             trials: int = DEFAULT_TRIALS, seed: int = DEFAULT_SEED) -> Estimate:
    """Nodes needed to reach ``goal`` (see the module docstring); ValueError when impossible."""
    import numpy as np

    x = np.asarray(values, dtype=np.float64).ravel()
    if not x.size:
        raise ValueError("no minute records to draw from")
    if not (np.isfinite(x).all() and (x >= 0).all()):
        raise ValueError("per-node figures must be finite and non-negative")
    if not (goal > 0 and math.isfinite(goal)):
        raise ValueError(f"the goal must be positive, got {goal!r}")
    if not 0 < confidence < 1:
        raise ValueError(f"the confidence must be within (0, 1), got {confidence!r}")
    if trials < 1:
        raise ValueError(f"trials must be at least 1, got {trials!r}")
    best, mean = float(x.max()), float(x.mean())
    if best <= 0:
        raise ValueError("no op completed in the minutes measured: no throughput to add up")
    nodes_best = _ceil(goal / best)
    if trials * max(nodes_best, goal / mean) > MAX_DRAWS:
        raise ValueError(f"about {goal / mean:.3g} nodes per trial x {trials} trials is too "
                         f"many draws; lower the goal or the trials")
    rng = np.random.default_rng(seed)
    reach = goal * (1 - _RELATIVE_SLACK)
    crossing = np.zeros(trials, dtype=np.int64)
    sums = np.zeros(trials)
    active = np.arange(trials)
    drawn = 0
    per_round = max(1, math.ceil(goal / mean * 1.1))  # most runs finish within one round
    while active.size:
        width = max(1, min(per_round, _CHUNK // active.size))
        draws = x[rng.integers(0, x.size, size=(active.size, width))]
        running = sums[active, None] + np.cumsum(draws, axis=1)
        hit = running >= reach
        first = hit.argmax(axis=1)
        done = hit[np.arange(active.size), first]
        crossing[active[done]] = drawn + first[done] + 1
        sums[active] = running[:, -1]
        active = active[~done]
        drawn += width
        if active.size and active.size * drawn > MAX_DRAWS:
            raise ValueError(f"more than {drawn} nodes needed in some trials; lower the goal")
    crossing.sort()
    needed = int(crossing[_ceil(confidence * trials) - 1])
    return Estimate(goal, confidence, int(x.size), best, mean, nodes_best, max(needed, nodes_best),
                    trials, seed)


# -- per-node figures from the store ------------------------------------------------------------

def per_node_figures(stores: Sequence[Store], selection: Selection) -> dict[tuple[str, str],
                                                                             np.ndarray]:
    """Per (target, op): the throughput (ops/s) of every (host, minute) record selected."""
    import numpy as np

    from slowdown.analysis.stats import series

    out = {}
    for pair, rows in series.grouped(stores, selection, "r.count, r.sum", ("minutes",)):
        counts, sums = np.array(rows, dtype=np.float64).T  # a NULL sum (NaN) counts as 0 ops/s
        with np.errstate(divide="ignore", invalid="ignore"):
            out[pair] = np.where((counts > 0) & (sums > 0), counts / sums, 0.0)
    return out


@dataclass(frozen=True)
class OpProvision:
    target: str
    op: str
    estimate: Estimate | None
    note: str = ""  # why there is no estimate


def provision_ops(figures: dict[tuple[str, str], np.ndarray], goal: Goal, confidence: float,
                  trials: int = DEFAULT_TRIALS, seed: int = DEFAULT_SEED,
                  keys: Sequence[tuple[str, str]] | None = None) -> list[OpProvision]:
    """One estimate per (target, op); ops the goal does not apply to get a note instead."""
    out = []
    for target, op in (keys if keys is not None else list(figures)):
        per_op = goal.per_op(op)
        values = figures.get((target, op))
        if per_op is None:
            out.append(OpProvision(target, op, None, f"{goal.text} needs ops of a known size"))
        elif values is None or not len(values):
            out.append(OpProvision(target, op, None, "no minute records"))
        else:
            try:
                out.append(OpProvision(target, op, estimate(values, per_op, confidence, trials,
                                                            seed)))
            except ValueError as exc:
                out.append(OpProvision(target, op, None, str(exc)))
    return out


def provision_json(rows: Sequence[OpProvision], goal: Goal, confidence: float, trials: int,
                   seed: int) -> dict:
    return {
        "goal": goal.value, "unit": goal.unit, "text": goal.text, "confidence": confidence,
        "trials": trials, "seed": seed,
        "ops": [{
            "target": r.target, "op": r.op,
            **({"minutes": r.estimate.samples, "goal_ops": r.estimate.goal,
                "best_per_node": r.estimate.best, "mean_per_node": r.estimate.mean,
                "nodes_best_case": r.estimate.nodes_best, "nodes": r.estimate.nodes,
                "ratio": r.estimate.ratio} if r.estimate else {"note": r.note}),
        } for r in rows],
    }


def provision_table(rows: Sequence[OpProvision], confidence: float) -> tuple[list[list], list]:
    """Rows and headers of the text table (per-node figures in ops/s; MiB/s for data ops)."""
    pct = f"{confidence * 100:g}%"
    table = []
    for r in rows:
        e = r.estimate
        if e is None:
            table.append([r.target, r.op, "-", "-", "-", "-", "-", "-", r.note])
            continue
        table.append([r.target, r.op, e.samples, f"{e.best:.4g}", f"{e.mean:.4g}", e.nodes_best,
                      e.nodes, f"{e.ratio:.2f}", ""])
    return table, ["target", "op", "minutes", "best/node", "mean/node", "nodes best case",
                   f"nodes at {pct}", "ratio", "note"]


__all__ = [
    "Estimate",
    "Goal",
    "OpProvision",
    "estimate",
    "parse_goal",
    "per_node_figures",
    "provision_json",
    "provision_ops",
    "provision_table",
]
