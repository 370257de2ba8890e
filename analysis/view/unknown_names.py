"""Names a read command is given (``--target``, ``--host``, ``--op``) that no file knows.

A name, or a glob, that matches nothing the files hold is a mistake to say, with the names
they do hold: left alone it read as "no data" (or, worse, as a service that stopped before
writing), and ``stats`` printed an empty table. Known are the names of the files' series,
those of the services probing now (a target still collecting its first minute), the targets
of the configuration and the six ops.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from fnmatch import fnmatchcase

from slowdown.analysis.words import OPS

KINDS = ("host", "target", "op")  # the order of a series' names: (host, target, op)


def unknown_names(patterns: Sequence[Sequence[str]], series: Iterable[tuple[str, str, str]],
                  live: Callable[[], Iterable[dict | None]], configured: Iterable[str],
                  where: str) -> str | None:
    """The one-line mistake, or None when every pattern of ``patterns`` (hosts, targets, ops)
    matches a known name. ``live``: the live states, read only when a name is not in a
    series (a target a running service probes before its first record). The names listed
    are those the files and services hold; a configured target and any of the six ops are
    accepted without records (they are not mistakes), but not listed as the files'."""
    held: list[set[str]] = [set(), set(), set()]
    for names in series:
        for i, name in enumerate(names):
            held[i].add(name)
    accepted = [set(), set(configured), set(OPS)]
    missing = _missing(patterns, held, accepted)
    if any(missing):
        for state in live():
            if state:
                held[0].add(state.get("host", ""))
                held[1].update(state.get("targets", {}))
        missing = _missing(patterns, held, accepted)
    said = [_said(kind, names, sorted(k - {""}), where)
            for kind, names, k in zip(KINDS, missing, held) if names]
    return "; ".join(said) or None


def _missing(patterns: Sequence[Sequence[str]], held: list[set[str]],
             accepted: list[set[str]]) -> list[list[str]]:
    return [[p for p in dict.fromkeys(given) if not any(fnmatchcase(n, p) for n in h | a)]
            for given, h, a in zip(patterns, held, accepted)]


def _said(kind: str, missing: list[str], known: list[str], where: str) -> str:
    """``no target "nosuch" in slowdown.db; its targets: home, work`` (``where``: one file,
    or "the 3 databases": then "their")."""
    named = " nor ".join(f'{"matching " if any(c in p for c in "*?[") else ""}"{p}"'
                         for p in missing)
    whose = "their" if where.startswith("the ") else "its"
    return (f"no {kind} {named} in {where}; {whose} {kind}s: "
            + (", ".join(known) if known else "none"))


__all__ = ["unknown_names"]
