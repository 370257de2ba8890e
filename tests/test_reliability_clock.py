"""Wall clock steps and the recorder: an hour forward, an hour back, 35 s back.

Here the recorder with a wall clock that a test steps and a monotonic one that never does: a
moment is never counted twice across steps, and a minute closed by a step back is written at
the next flush. The real service under libfaketime stepped an hour forward, an hour back and
35 s back (a minute of steps and waits): tests/long/test_clock_long.py.
"""

from __future__ import annotations

HOUR = 3600.0
DELAY = 0.3  # seconds added to every read through the FUSE target


class Clocks:
    """A wall clock that a test steps, and a monotonic one that never steps."""

    def __init__(self, start: float) -> None:
        self.mono = 1000.0
        self.offset = start - self.mono

    def wall(self) -> float:
        return self.mono + self.offset

    def monotonic(self) -> float:
        return self.mono

    def advance(self, seconds: float) -> None:
        self.mono += seconds


def test_the_recorder_never_counts_a_moment_twice_across_steps():
    """Unit level: a result a second for 3 minutes, with the wall clock stepped back 90 s
    and later forward 3600 s; no minute gets more results than seconds it was lived in."""
    from slowdown.probe.runtime.recorder import Recorder

    t0 = 1_800_000_000 // 60 * 60
    clocks = Clocks(t0)
    recorder = Recorder("n1", wall_clock=clocks.wall, monotonic=clocks.monotonic)
    written: list = []

    class Store:
        def write(self, records, nodes=(), state=None, servers=()):
            written.extend(records)

    def run(seconds: int) -> None:
        for _ in range(seconds):
            recorder.result("t", "md-stat", 0.001, clocks.wall())
            clocks.advance(1)
            if clocks.wall() % 60 < 1:
                recorder.flush(Store(), clocks.wall())

    run(100)  # t0 .. t0+100: minute 0 written, minute 1 at 40
    clocks.offset -= 90  # back to t0+10
    run(120)  # t0+10 .. t0+130: nothing before t0+100 again; then minute 1 goes on
    assert recorder.refused == 90
    clocks.offset += 3600  # forward: minute 2 ends at once; an hour later, new minutes
    run(30)
    recorder.flush(Store(), clocks.wall(), everything=True)
    counts: dict[int, int] = {}
    for rec in written:
        counts[rec.start - t0] = counts.get(rec.start - t0, 0) + rec.histogram.count
    assert counts == {0: 60, 60: 60, 120: 10, 3720: 30}, counts


def test_a_minute_closed_by_a_step_back_is_written_at_the_next_flush():
    from slowdown.probe.runtime.recorder import Recorder

    t0 = 1_800_000_000 // 60 * 60
    clocks = Clocks(t0 + 30)
    recorder = Recorder("n1", wall_clock=clocks.wall, monotonic=clocks.monotonic)
    written: list = []

    class Store:
        def write(self, records, nodes=(), state=None, servers=()):
            written.extend(records)

    recorder.result("t", "md-stat", 0.001, clocks.wall())
    clocks.offset -= 3600
    recorder.result("t", "md-stat", 0.001, clocks.wall())  # refused: time lived again
    recorder.result("t", "md-stat", 0.001, t0 + 29.5)  # closed up to where the clock was
    assert recorder.refused == 2
    assert recorder.flush(Store(), clocks.wall())  # an hour earlier; the minute goes out
    assert [(r.start, r.histogram.count) for r in written] == [(t0, 1)]
    recorder.result("t", "md-stat", 0.001, t0 + 30)  # from there on, recorded again
    assert recorder.refused == 2


def test_a_second_step_back_names_the_moment_recording_resumes(tmp_path, caplog):
    """Two steps back, the second to a moment before the first one's mark: nothing is
    recorded again before the furthest moment the clock had reached, and the log names that
    one (it named the second step's own moment, an hour and a half too early)."""
    import logging

    from slowdown.analysis.config import loads
    from slowdown.probe.daemon.service import Service
    from slowdown.probe.locks.lock_file import utc

    text = (f'database = "{tmp_path}/slowdown.db"\nhost = "n1"\n[[target]]\nname = "t"\n'
            f'path = "{tmp_path}/t"\n')
    service = Service(loads(text, tmp_path / "slowdown.toml"))
    service.scheduler.add_job(lambda: None, "interval", seconds=1, id="tick")
    service.scheduler.add_job(lambda: None, "cron", second=0, id="flush")
    caplog.set_level(logging.WARNING, logger="slowdown.probe.daemon.service")
    service._clock_offset += 2 * HOUR  # the clock ran two hours ahead, and steps back
    service._check_clock()
    furthest = service.recorder.floor
    service._clock_offset += HOUR / 2  # half an hour ahead again, and back once more
    service._check_clock()
    second = caplog.records[-1].getMessage()
    assert service.recorder.floor == furthest
    assert f"nothing is recorded before {utc(furthest)} again" in second, second
