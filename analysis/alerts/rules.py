"""Evaluation of alert rules: the value each rule watches, over its window, at one minute.

The numbers are the read side's: ``op_slowdown`` (window statistic raised to the longest
stuck age, over the baseline in force), the store's aggregates for error rates and stuck
ages. A window of ``w`` ending at the evaluation minute covers the whole minutes
``[minute - w, minute)``, as everywhere else.

A rule covers the targets and ops its globs match. Its subjects are:

- ``target/op`` when the rule covers a single op;
- ``target`` when it covers several: the value is the worst covered op's (the target's
  headline over those ops), so a filesystem that turns slow opens one incident, not six.

With a ``[fleet]``, a value above its level carries the target's verdict (filesystem or this
node, with its numbers) into the message; a rule with ``verdict = [...]`` counts as above only
while the verdict is one of those (``verdict = "node"``: the node's own trouble, for its
owner, while the filesystem's incidents go to the storage team by the fleet's rules).

A value above its level also reads the target's per-server records of the last ten minutes
(``stats/server_naming.py``, as ``slowdown -v`` reads them; once per target and evaluation,
and never while every rule is below): a slow server they name goes into the message, in the
verdict's words (``filesystem: h3:/bricks/b3 12x, the others 1.1x``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from fnmatch import fnmatchcase
from typing import Any

from slowdown.analysis.config import AlertRule, Config
from slowdown.analysis.stats.baseline import BaselineBook
from slowdown.analysis.stats.fleet_sources import fleet_verdicts
from slowdown.analysis.stats.server_naming import Named, named_servers
from slowdown.analysis.stats.slowdown import op_slowdown, window_selection
from slowdown.analysis.stats.verdict import FILESYSTEM, Verdict
from slowdown.analysis.store import Store, aggregate
from slowdown.analysis.store.records import Aggregate, minute_of
from slowdown.analysis.words import OPS

LiveStuck = Mapping[tuple[str, str], float]


@dataclass(frozen=True)
class Subject:
    """What one (rule, subject) state is about: a target and the rule's ops on it."""

    rule: AlertRule
    target: str
    ops: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"{self.target}/{self.ops[0]}" if len(self.ops) == 1 else self.target


@dataclass(frozen=True)
class Observation:
    """A rule's value for one subject at one evaluation minute."""

    rule: str
    subject: str
    target: str
    op: str | None  # the op, or the worst of the covered ops; None without data
    value: float | None  # None: no data (or no expected value) in the window
    level: str | None  # "critical", "warning" or None (below)
    threshold: float | None  # the level's threshold (the lowest one when below)
    minute: int  # the evaluation minute: the window ends there
    ops: dict[str, dict[str, Any]] = field(default_factory=dict)  # per-op numbers
    verdict: str | None = None  # the verdict on the target and its numbers, while above
    servers: Named | None = None  # the slow servers the per-server records name, while above


def rule_ops(rule: AlertRule) -> tuple[str, ...]:
    return tuple(op for op in OPS if any(fnmatchcase(op, p) for p in rule.ops))


def subjects(config: Config, rule: AlertRule) -> list[Subject]:
    ops = rule_ops(rule)
    if not ops:
        return []
    return [Subject(rule, t.name, ops) for t in config.targets
            if any(fnmatchcase(t.name, p) for p in rule.targets)]


def lowest_threshold(rule: AlertRule) -> float:
    return rule.above if rule.above is not None else rule.critical  # type: ignore[return-value]


def level_of(rule: AlertRule, value: float | None) -> tuple[str | None, float]:
    """``("critical", level)`` above critical, ``("warning", above)`` above ``above``, else
    ``(None, lowest threshold)``. Strictly above: a value at the threshold is fine."""
    if value is None or math.isnan(value):
        return None, lowest_threshold(rule)
    if rule.critical is not None and value > rule.critical:
        return "critical", rule.critical
    if rule.above is not None and value > rule.above:
        return "warning", rule.above
    return None, lowest_threshold(rule)


class Evaluator:
    """The values of every rule at one minute; aggregates shared between rules."""

    def __init__(self, config: Config, stores: Sequence[Store], now: float,
                 live_stuck: LiveStuck | None = None) -> None:
        self.config = config
        self.stores = list(stores)
        self.now = now
        self.minute = minute_of(now)
        self.live_stuck = dict(live_stuck or {})
        self.book = BaselineBook(self.stores, config.baseline.expected,
                                 zone=config.baseline.weekly())
        self._aggregates: dict[tuple[str, str, float], Aggregate] = {}
        self._verdicts: dict[str, Verdict] | None = None
        self._servers: dict[str, Named | None] = {}

    def servers(self, target: str) -> Named | None:
        """The slow servers of ``target`` the per-server records of the last ten minutes name
        (read once per target and evaluation, only when a rule is above its level)."""
        if target not in self._servers:
            try:
                found = named_servers(self.stores, self.book, [target], (), self.now)
            except Exception:  # naming a server adds to a message; it never stops one
                found = {}
            self._servers[target] = found.get(target)
        return self._servers[target]

    def verdict(self, target: str) -> Verdict | None:
        """This node's verdict on ``target`` from the [fleet] (read once per evaluation, and
        only when a rule is above its level); None without a [fleet]."""
        if self.config.fleet is None:
            return None
        if self._verdicts is None:
            ops = {t.name: list(OPS) for t in self.config.targets}
            self._verdicts = fleet_verdicts(self.config.fleet, self.stores, self.book, ops,
                                            self.now, self.config.host, self.live_stuck)
        return self._verdicts.get(target)

    def aggregate(self, target: str, op: str, window: float) -> Aggregate:
        key = (target, op, window)
        if key not in self._aggregates:
            self._aggregates[key] = aggregate(
                self.stores, window_selection(self.now, window, targets=(target,), ops=(op,)))
        return replace(self._aggregates[key])  # callers may raise its stuck age

    def op_value(self, rule: AlertRule, target: str, op: str) -> dict[str, Any]:
        """``value`` and the numbers behind it for one op."""
        agg = self.aggregate(target, op, rule.window)
        live = self.live_stuck.get((target, op), 0.0)
        count, errors = agg.samples, agg.errors
        info: dict[str, Any] = {"count": round(count), "errors": round(errors)}
        if rule.kind == "error_rate":
            info["value"] = agg.error_rate
        elif rule.kind == "stuck":
            stuck = max(agg.stuck_end, live)  # a hang that is over resolves
            info["value"] = stuck if (agg.records or live) else None
        else:
            o = op_slowdown(self.stores, self.book, target, op, rule.window, rule.statistic,
                            self.now, live_stuck=live, agg=agg)
            info.update(value=o.value, observed=_clean(o.observed.value),
                        expected=o.expected.value if o.expected else None,
                        provisional=bool(o.expected and o.expected.provisional),
                        stuck=o.observed.stuck, raised=o.observed.raised)
        return info

    def observe(self, subject: Subject) -> Observation:
        rule = subject.rule
        per_op = {op: self.op_value(rule, subject.target, op) for op in subject.ops}
        rated = [(info["value"], op) for op, info in per_op.items()
                 if info["value"] is not None and not math.isnan(info["value"])]
        value, worst = max(rated) if rated else (None, None)
        level, threshold = level_of(rule, value)
        verdict = self.verdict(subject.target) if level is not None else None
        if rule.verdicts and (verdict is None or verdict.word not in rule.verdicts):
            level, threshold = None, lowest_threshold(rule)  # not this rule's kind of incident
        servers = self.servers(subject.target) if level is not None else None
        if verdict is not None and verdict.word == FILESYSTEM:
            verdict.servers = servers.note if servers is not None else None
        return Observation(rule.name, subject.name, subject.target, worst, value, level,
                           threshold, self.minute, per_op,
                           verdict=verdict.text() if verdict is not None else None,
                           servers=servers)

    def observe_all(self, rules: Sequence[AlertRule] | None = None) -> list[Observation]:
        rules = self.config.alerts if rules is None else rules
        return [self.observe(s) for rule in rules for s in subjects(self.config, rule)]


def _clean(value: float) -> float | None:
    return None if value is None or math.isnan(value) else value
