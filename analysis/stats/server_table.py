"""Each server's figures and word per target: what ``slowdown servers`` shows and what the
verdict names, from the merged per-server latencies (``store/server_reads.py``) and the
rule (``server_rule.py``).

A server may serve several ops of a target (a brick serves data reads and writes, an MDS
rank every metadata op); the rule judges each (target, op) apart, among the servers of that
op, and a server's row joins its ops: ``slow`` when any op of it is, ``ok`` when one is
judged and none is slow, ``few`` when none could be judged. Its ``slowdown`` is its median
over the op's expected value (the baseline, as every slowdown of the product), its
``against_others`` its median over the other servers' pooled median: the larger of its ops'.
A server alone in its op (``unknown`` aside: one MDS rank) is judged against the op's
expected value (``server_rule.judge_alone``), as nothing else is there to compare it with.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from slowdown.analysis.stats import server_rule
from slowdown.analysis.stats.server_rule import FEW, OK, SLOW, Judgment
from slowdown.analysis.store.server_records import UNKNOWN

WORD_RANK = {SLOW: 0, OK: 1, FEW: 2}


@dataclass(frozen=True)
class OpFigures:
    """One (target, op, server): the rule's judgment and its slowdown against expected."""

    op: str
    judgment: Judgment
    errors: int
    expected: float | None  # the op's expected median (None: no baseline yet)

    @property
    def slowdown(self) -> float:
        if not self.expected or math.isnan(self.judgment.median):
            return math.nan
        return self.judgment.median / self.expected


@dataclass
class ServerRow:
    """One (target, server): its ops' figures and its word."""

    target: str
    server: str
    ops: list[OpFigures] = field(default_factory=list)

    @property
    def probes(self) -> int:
        return sum(f.judgment.probes for f in self.ops)

    @property
    def errors(self) -> int:
        return sum(f.errors for f in self.ops)

    @property
    def word(self) -> str:
        return min((f.judgment.word for f in self.ops), key=WORD_RANK.__getitem__, default=FEW)

    @property
    def slowdown(self) -> float:
        return _largest(f.slowdown for f in self.ops)

    @property
    def against_others(self) -> float:
        return _largest(f.judgment.against_others for f in self.ops)

    def summary(self, number: Callable[[float], float | None]) -> dict:
        """The row's fields as scripts read them (``slowdown servers --json``, an alert's
        webhook), its ratios through ``number`` (NaN: None)."""
        return {"server": self.server, "ops": [f.op for f in self.ops], "probes": self.probes,
                "errors": self.errors, "slowdown": number(self.slowdown),
                "against_others": number(self.against_others), "word": self.word}


def _largest(values) -> float:
    known = [v for v in values if not math.isnan(v)]
    return max(known) if known else math.nan


def rows(latencies: Mapping[tuple, object], expected: Callable[[str, str], float | None],
         op_order: Sequence[str] = ()) -> list[ServerRow]:
    """The rows of ``latencies`` ((target, op, server) -> an object with ``histogram`` and
    ``errors``), by target, then word (slow first), then server."""
    by_op: dict[tuple[str, str], dict[str, object]] = {}
    for (target, op, server), found in latencies.items():
        by_op.setdefault((target, op), {})[server] = found
    rank = {op: i for i, op in enumerate(op_order)}
    table: dict[tuple[str, str], ServerRow] = {}
    for (target, op) in sorted(by_op, key=lambda k: (k[0], rank.get(k[1], 99), k[1])):
        servers = by_op[(target, op)]
        judged = server_rule.judge({s: f.histogram for s, f in servers.items()})
        value = expected(target, op)
        known = [s for s in servers if s != UNKNOWN]
        if len(known) == 1:  # no other server to stand above: against the expected value
            judged[known[0]] = server_rule.judge_alone(servers[known[0]].histogram, value)
        for server, judgment in judged.items():
            row = table.setdefault((target, server), ServerRow(target, server))
            row.ops.append(OpFigures(op, judgment, servers[server].errors, value))
    _lone_above_the_rest(table.values())
    return sorted(table.values(), key=lambda r: (r.target, WORD_RANK[r.word], r.server))


def _lone_above_the_rest(table_rows: Iterable[ServerRow]) -> None:
    """A lone server found slow against its op's expected value stays ``slow`` only when its
    slowdown also stands ``FACTOR`` times above the median slowdown of the target's servers
    judged against each other: a filesystem slow everywhere (every brick 3x) slows the one
    brick holding the data file 3x too, and that names no server. Without such servers (one
    rank, no other op placed) the word stands: it cannot tell the server from the way to it."""
    by_target: dict[str, list[ServerRow]] = {}
    for row in table_rows:
        by_target.setdefault(row.target, []).append(row)
    for rows_of_target in by_target.values():
        compared = [f.slowdown for r in rows_of_target if r.server != UNKNOWN for f in r.ops
                    if f.judgment.against == "others" and f.judgment.word == OK
                    and not math.isnan(f.slowdown)]
        rest = _median(compared)
        if rest is None:
            continue
        for row in rows_of_target:
            for i, f in enumerate(row.ops):
                if f.judgment.against == "expected" and f.judgment.word == SLOW \
                        and not f.slowdown > server_rule.FACTOR * rest:
                    row.ops[i] = replace(f, judgment=replace(f.judgment, word=OK))


def slow_note(rows_of_target: Sequence[ServerRow]) -> str | None:
    """``brick h2:/b3 12x, the others 1.1x``: the slow servers of one target, against the
    target's expected value, and the others' median slowdown; None when no server is slow."""
    slow = [r for r in rows_of_target if r.word == SLOW and r.server != "unknown"]
    if not slow:
        return None
    others = [r for r in rows_of_target if r.word != SLOW]
    named = ", ".join(f"{r.server} {_x(r.slowdown if not math.isnan(r.slowdown) else None, r)}"
                      for r in sorted(slow, key=lambda r: -_sort_key(r)))
    rest = _median([r.slowdown for r in others if not math.isnan(r.slowdown)])
    return named + (f", the others {rest:.1f}x" if rest is not None else "")


def _x(value: float | None, row: ServerRow) -> str:
    if value is None:  # no baseline yet: against the other servers
        return f"{row.against_others:.0f}x the others"
    return f"{value:.1f}x" if value < 10 else f"{value:.0f}x"


def _sort_key(row: ServerRow) -> float:
    value = row.slowdown if not math.isnan(row.slowdown) else row.against_others
    return 0.0 if math.isnan(value) else value


def _median(values: Sequence[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


__all__ = ["WORD_RANK", "OpFigures", "ServerRow", "rows", "slow_note"]
