"""The scenes of minutes, run beside the session's other tests (a plugin, tests/conftest.py).

A scene waits on minute boundaries far more than it works. Their tests (tests/test_scenes.py,
one per scene, marked ``scene(NAME)``) move to the end of the session, before the GlusterFS
testbed's; the scenes start, side by side, where those tests stood, run beside the tests
that followed them, and their tests then wait for what is left. Starting where they stood
keeps what runs beside them as it was: in CI, the other interpreters' suites have ended by
then. Each scene runs in a thread of its own with its own directory; its test re-raises the
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

from tests.kit.scenes import live_database, said_on_the_line, slow_minutes, writer_locks

SCENES: dict[str, Callable[[Path], None]] = {
    "live_database": live_database.scene,
    "said_on_the_line": said_on_the_line.scene,
    "slow_minutes": slow_minutes.scene,
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


_START: list[str] = []  # the node id of the test where the scenes start


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items: list) -> None:
    """The scene tests moved before the testbed's (sorted last by tests/conftest.py); the
    scenes start at the test that took the first one's place."""
    scenes = [item for item in items if item.get_closest_marker("scene") is not None]
    if not scenes:
        return
    _chosen(scenes)
    first = items.index(scenes[0])
    rest = [item for item in items if item.get_closest_marker("scene") is None]
    _START[:] = [rest[first].nodeid] if first < len(rest) else []
    end = next((i for i, item in enumerate(rest)
                if item.get_closest_marker("testbed") is not None), len(rest))
    items[:] = rest[:end] + scenes + rest[end:]


@pytest.fixture(autouse=True)
def _scenes_start_here(request, tmp_path_factory) -> None:
    """The scenes of the tests selected (``-k``, ``-m``) start at the test where the first
    of them stood, or at the first of them."""
    node = request.node
    if node.nodeid not in _START and node.get_closest_marker("scene") is None:
        return
    for name in sorted(_chosen(request.session.items) - set(_RUNS)):
        _RUNS[name] = Run(SCENES[name], tmp_path_factory.mktemp(name))


@pytest.fixture
def scene_outcome(request) -> Callable[[], None]:
    """Waits for this test's scene (its ``scene`` marker) and re-raises its error."""
    name = request.node.get_closest_marker("scene").args[0]
    return lambda: _RUNS[name].outcome(LONGEST)


def pytest_sessionfinish(session) -> None:
    for run in _RUNS.values():
        run.thread.join(LONGEST)
