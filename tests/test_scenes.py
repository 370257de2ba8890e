"""The scenes of minutes (tests/kit/scenes), run side by side and beside the session's other
tests: each waits on its minute boundaries far more than it works, so they start where these
tests stand in the session, these tests move to its end (before the GlusterFS testbed's) and
wait for what is left (tests/kit/scenes/runs.py). Together they take about as long as the
longest (4.5 minutes), and that time is spent beside the tests that follow them. Each is
reported as a test of its own; a scene that failed re-raises its own AssertionError here."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.root, pytest.mark.slow, pytest.mark.timeout(900)]


@pytest.mark.scene("live_database")
def test_what_admins_do_to_a_live_database_loses_no_minute_and_is_said(scene_outcome) -> None:
    scene_outcome()


@pytest.mark.scene("said_on_the_line")
def test_full_failing_and_read_only_filesystems_are_said(scene_outcome) -> None:
    scene_outcome()


@pytest.mark.scene("slow_minutes")
def test_two_slow_minutes_in_ten_read_slow_at_q85_and_leave_the_hour_median(
        scene_outcome) -> None:
    scene_outcome()


@pytest.mark.scene("writer_locks")
def test_the_service_never_opens_its_database_outside_sqlite(scene_outcome) -> None:
    scene_outcome()
