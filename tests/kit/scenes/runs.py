"""The scenes of minutes, run beside the session's other tests (a plugin, tests/conftest.py).

A scene waits on minute boundaries far more than it works. Its test (marked ``scene(NAME)``:
those of tests/test_scenes.py, and one each in tests/test_service.py and
tests/test_first_run.py) moves to the end of the session, before the GlusterFS testbed's; the
scene starts where its test stood, runs beside the tests that followed it, and its test then
waits for what is left. Starting where it stood keeps what runs beside it much as it was: in
CI, the scenes of tests/test_scenes.py start after the other interpreters' suites have ended.
Each scene runs in a thread of its own with its own directory; its test re-raises the
scene's own AssertionError.

A session that ends before a scene's test ran (``-x``, an interrupt) still waits for the
scene, so that no service of it is left running.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.kit.scenes import (
    first_run,
    live_database,
    said_on_the_line,
    slow_minutes,
    whole_minutes,
    writer_locks,
)

SCENES: dict[str, Callable[[Path], None]] = {
    "first_run": first_run.scene,
    "live_database": live_database.scene,
    "said_on_the_line": said_on_the_line.scene,
    "slow_minutes": slow_minutes.scene,
    "whole_minutes": whole_minutes.scene,
    "writer_locks": writer_locks.scene,
}

# The longest a scene may take, from its start; its test waits at most that long.
LONGEST = 600.0


class Run:
    """One scene in a thread of its own; ``outcome`` waits for it and re-raises its error."""

    def __init__(self, scene: Callable[[Path], None], where: Path) -> None:
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(scene, where), daemon=True)
        self.thread.start()

    def _run(self, scene: Callable[[Path], None], where: Path) -> None:
        try:
            scene(where)
        except BaseException:
            self.error = sys.exc_info()[1]

    def outcome(self, timeout: float) -> None:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"the scene still runs after {timeout} s"
        if self.error is not None:
            raise self.error


_RUNS: dict[str, Run] = {}


def pytest_configure(config) -> None:
    config.addinivalue_line(
        "markers", "scene(name): the test of a scene of minutes (tests/kit/scenes/runs.py)")


def _chosen(items: list) -> set[str]:
    names = set()
    for item in items:
        marker = item.get_closest_marker("scene")
        if marker is not None:
            names.add(marker.args[0])
    unknown = names - set(SCENES)
    if unknown:
        raise pytest.UsageError(f"no such scene: {', '.join(sorted(unknown))}")
    return names


_START: dict[str, list[str]] = {}  # node id of a test: the scenes that start with it


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items: list) -> None:
    """The scene tests moved before the testbed's (sorted last by tests/conftest.py); each
    scene starts at the test that took its own test's place."""
    scenes = [item for item in items if item.get_closest_marker("scene") is not None]
    if not scenes:
        return
    _chosen(scenes)
    rest = [item for item in items if item.get_closest_marker("scene") is None]
    _START.clear()
    waiting: list[str] = []  # scenes whose tests stood before the test at hand
    for item in items:
        marker = item.get_closest_marker("scene")
        if marker is not None:
            waiting.append(marker.args[0])
        elif waiting:
            _START[item.nodeid], waiting = waiting, []
    end = next((i for i, item in enumerate(rest)
                if item.get_closest_marker("testbed") is not None), len(rest))
    items[:] = rest[:end] + scenes + rest[end:]


@pytest.fixture(autouse=True)
def _scenes_start_here(request, tmp_path_factory) -> None:
    """The scenes whose tests stood here start (a scene's own test starts it too, and every
    scene not yet started: the testbed's tests never run beside one)."""
    node = request.node
    names = set(_START.get(node.nodeid, ()))
    if node.get_closest_marker("scene") is not None:
        names |= _chosen(request.session.items)
    for name in sorted(names - set(_RUNS)):
        _RUNS[name] = Run(SCENES[name], tmp_path_factory.mktemp(name))


@pytest.fixture
def scene_outcome(request) -> Callable[[], None]:
    """Waits for this test's scene (its ``scene`` marker) and re-raises its error."""
    name = request.node.get_closest_marker("scene").args[0]
    return lambda: _RUNS[name].outcome(LONGEST)


def pytest_sessionfinish(session) -> None:
    for run in _RUNS.values():
        run.thread.join(LONGEST)
