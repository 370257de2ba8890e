"""The scenes of minutes (tests/kit/scenes), run side by side: one waits on its minute boundaries
while the others work, so together they take about as long as the longest (4.5 minutes, not
the 8 they would one after the other). Each is reported as a test of its own; a scene that
failed re-raises its own AssertionError here."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.kit.scenes import live_database, said_on_the_line, slow_minutes, writer_locks

pytestmark = [pytest.mark.root, pytest.mark.slow, pytest.mark.timeout(900)]

SCENES: dict[str, Callable[[Path], None]] = {
    "live_database": live_database.scene,
    "said_on_the_line": said_on_the_line.scene,
    "slow_minutes": slow_minutes.scene,
    "writer_locks": writer_locks.scene,
}


class _Run:
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


# Each test and its scene.
TESTS = {
    "test_what_admins_do_to_a_live_database_loses_no_minute_and_is_said": "live_database",
    "test_full_failing_and_read_only_filesystems_are_said": "said_on_the_line",
    "test_two_slow_minutes_in_ten_read_slow_at_q85_and_leave_the_hour_median": "slow_minutes",
    "test_the_service_never_opens_its_database_outside_sqlite": "writer_locks",
}


@pytest.fixture(scope="module")
def scenes(request, tmp_path_factory) -> dict[str, _Run]:
    """The scenes of the tests selected (``-k``), all started at once."""
    chosen = {TESTS[item.name] for item in request.session.items
              if item.module is request.module and item.name in TESTS}
    return {name: _Run(SCENES[name], tmp_path_factory.mktemp(name)) for name in sorted(chosen)}


def test_what_admins_do_to_a_live_database_loses_no_minute_and_is_said(scenes) -> None:
    scenes["live_database"].outcome(600)


def test_full_failing_and_read_only_filesystems_are_said(scenes) -> None:
    scenes["said_on_the_line"].outcome(600)


def test_two_slow_minutes_in_ten_read_slow_at_q85_and_leave_the_hour_median(scenes) -> None:
    scenes["slow_minutes"].outcome(600)


def test_the_service_never_opens_its_database_outside_sqlite(scenes) -> None:
    scenes["writer_locks"].outcome(600)
