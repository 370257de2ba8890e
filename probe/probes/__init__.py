"""The probes, one interface, and the worker that runs every registered probe.

A probe (node_exporter's ``Collector`` is the model) names its ops, the parts of a workspace
that prepare must make for it and the files it writes beside the MANIFEST while it runs; its
``step`` does one round of timed calls and reports each op's ``Result`` as soon as the op
returns, with where it went (the file and the offset, or the object): a later reader can map
a result to a server without touching the timed calls. ``register`` adds a probe class (as
``registerCollector`` does); the worker, the runner, the metrics and cleanup iterate
``registered()`` and ``probe_ops()``, in registration order. Adding a probe is one module
(which names its class ``PROBE``) and one line in ``BUILTIN``; ``register`` adds one from
elsewhere, as a test does. The built-in probes' ops are the vocabulary the reading side knows
(``analysis/words.py``'s ``OPS``; tested equal). Imports ``locks`` and ``layout`` only.
"""

from __future__ import annotations

import errno
import importlib
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar, NamedTuple

# The modules of this release's probes, in the order their ops run in a tick.
BUILTIN = ("slowdown.probe.probes.data", "slowdown.probe.probes.md")

# The parts of a workspace that prepare knows how to make (``Probe.needs`` names them).
DATA_FILE = "data file"  # data.bin, or write.bin beside the shared data file
MD_POOL = "md pool"  # md/, MD-Workbench's data sets and objects


class Place(NamedTuple):
    """Where an op went: a file (or an object, which is a file) and the offset in it of the
    block read or written; None for an op on a whole object."""

    path: str
    offset: int | None = None


class Result(NamedTuple):
    """One op's outcome. ``lat``: seconds, also for an op that failed (how long it took to
    fail); None for an op not attempted, which is a skip unless it has an error. ``err``:
    the errno's name (or the exception's class), ``msg`` its words. ``missing``: the op found
    no file, so the worker looks whether the whole workspace is gone."""

    op: str
    lat: float | None
    err: str | None = None
    msg: str | None = None
    where: Place | None = None
    missing: bool = False


Report = Callable[[Result], None]
"""Hears of each op of a step as soon as it returns (so the service can tell which op is in
flight); it may raise to end the step there (the worker's ``Abandoned``)."""


class Probe:
    """One kind of probe over one workspace, opened by the worker in its own process.

    A subclass sets ``name``, ``ops`` (in the order ``step`` reports them), ``needs`` (the
    parts prepare makes for it: ``DATA_FILE``, ``MD_POOL``) and ``state_files`` (the files it
    writes in the workspace while it runs, for cleanup), and implements ``open`` and ``step``.
    The timed region of each op is the probe's own: the worker never adds to it.
    """

    name: ClassVar[str] = ""
    ops: ClassVar[tuple[str, ...]] = ()
    needs: ClassVar[tuple[str, ...]] = ()
    state_files: ClassVar[tuple[str, ...]] = ()
    mode: str | None = None  # how its I/O bypasses the cache, when that can differ

    @classmethod
    def open(cls, workspace: Path, *, sync: bool = False) -> Probe:
        """The probe over a prepared workspace; raises when it cannot probe it (every op of
        the tick then fails with that error). ``sync``: the target's ``sync = true``."""
        raise NotImplementedError

    def step(self, report: Report) -> None:
        """Do one round of ops, each timed on its own, and ``report`` each as it returns."""
        raise NotImplementedError

    def save(self, finish: bool = False) -> None:
        """Persist where the probe is (``finish``: end its round first, as a clean stop
        does); nothing by default."""

    def close(self) -> None:
        """Let go of what the probe holds open (its workspace may be gone)."""


_builtin: tuple[type[Probe], ...] | None = None
_added: list[type[Probe]] = []
_ops: tuple[str, ...] | None = None


def _builtin_probes() -> tuple[type[Probe], ...]:
    """The probe class each ``BUILTIN`` module names as its ``PROBE``, in that order."""
    global _builtin
    if _builtin is None:
        _builtin = tuple(importlib.import_module(module).PROBE for module in BUILTIN)
    return _builtin


def register(probe: type[Probe]) -> type[Probe]:
    """Add a probe class after those registered (again: nothing); its ops must be new."""
    global _ops
    if probe in registered():
        return probe
    taken = set(probe_ops())
    if not probe.ops or taken & set(probe.ops) or len(set(probe.ops)) != len(probe.ops):
        raise ValueError(f"probe {probe.name!r}: ops {probe.ops} empty or already named")
    _added.append(probe)
    _ops = None
    return probe


def unregister(probe: type[Probe]) -> None:
    """Take an added probe class out of the registry (a test's probe, when the test ends)."""
    global _ops
    if probe in _added:
        _added.remove(probe)
        _ops = None


def registered() -> tuple[type[Probe], ...]:
    """Every registered probe class, the built-in ones first, in the order they run."""
    return (*_builtin_probes(), *_added)


def probe_ops() -> tuple[str, ...]:
    """Every registered probe's ops, in the order a tick reports them."""
    global _ops
    if _ops is None:
        _ops = tuple(op for probe in registered() for op in probe.ops)
    return _ops


def probe_state_files() -> tuple[str, ...]:
    """The files the registered probes write in a workspace while they run."""
    return tuple(name for probe in registered() for name in probe.state_files)


def error_of(exc: BaseException) -> tuple[str, str]:
    """An error's name and words: by its errno when it has one (also one wrapped by a
    refusal: ENOTCONN is a filesystem that does not answer, whatever check met it), else by
    its class."""
    code = getattr(exc, "errno", None)
    if not isinstance(code, int):
        code = getattr(exc.__cause__, "errno", None)
    name = errno.errorcode.get(code, "ERROR") if isinstance(code, int) else type(exc).__name__
    return name, str(exc)
