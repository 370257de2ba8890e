"""The service's jobs that hand its data to others: the copy of its database published to a
shared directory (``[publish]``) and the ``.prom`` file for node_exporter (``[metrics]
textfile``). Neither may hold the service:

- each publish runs in a child process (``python -m slowdown.probe.exporters.publish``): a hung
  shared volume holds that child, in D state perhaps, never a thread of the service (a
  thread stuck in a filesystem call keeps a process from exiting; an unwaited child does
  not). A publish still running at the next schedule is waited for, not doubled; one still
  running when the service stops is killed (the copy in place stays whole: exporters/publish.py);
- the textfile goes to a local directory (node_exporter's), written by the scheduler's pool.

Failures are logged with the path and errno (an error when they begin or change, a warning
at most once an hour while they last, an info line when they end); probing goes on.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import threading
import time
import zlib

from apscheduler.triggers.interval import IntervalTrigger

from slowdown.analysis.config import Config
from slowdown.analysis.units import format_duration, format_size
from slowdown.probe.exporters.textfile import TextfileWriter

log = logging.getLogger(__name__)

FIRST_AFTER = 5.0  # seconds after the start (the database opened, migrated if need be)
REPEAT_FAILURE = 3600.0  # a failure that lasts is said again at most this often


class PublishJob:
    """Publishes the database every ``[publish] every``, each time in a child process."""

    def __init__(self, config: Config, deadline: float | None = None) -> None:
        assert config.publish is not None
        self.config = config
        self.publish = config.publish
        # How long a publish is waited for (then left running, and waited for next time).
        self.deadline = self.publish.every * 0.9 if deadline is None else deadline
        self._child: subprocess.Popen | None = None
        self._since = 0.0  # when the running child began
        self._failing: str | None = None
        self._failing_since = 0.0
        self._failures = 0
        self._said = 0.0  # when the failure was last logged
        self.published = 0  # copies made since the start
        self._stopping = threading.Event()

    def first(self, now: float) -> float:
        """The first publish: soon after the start (what the database holds already, so a
        restarted node's copy is fresh at once), at a per-host phase within ``every`` so that
        a thousand nodes do not write the shared directory at once."""
        every = self.publish.every
        phase = (zlib.crc32(self.config.host.encode()) % 1000) / 1000.0 * every
        return now + FIRST_AFTER + phase

    def run(self) -> None:
        if self._stopping.is_set():
            return
        if self._child is not None and self._child.poll() is None:
            self._failed(f"the publish begun {format_duration(round(time.time() - self._since))} "
                         f"ago to {self.publish.dir} has not ended (a hung shared volume?); "
                         "waited for, not started again")
            return
        if self._child is not None:  # one that ended late: what it did is said now
            late, self._child = self._child, None
            out, err = late.communicate()
            self._outcome(late.returncode, out, err)
        command = [sys.executable, "-m", "slowdown.probe.exporters.publish",
                   str(self.config.database), str(self.publish.dir), self.config.host,
                   repr(float(self.publish.every))]
        self._since = time.time()
        try:
            child = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, close_fds=True)
        except OSError as exc:
            self._failed(f"cannot start the publish: {exc}")
            return
        self._child = child
        # Waited for a second at a time: the service's stop ends the wait at once (a pool
        # thread still waiting would hold the process at its exit).
        end = time.monotonic() + self.deadline
        while True:
            try:
                out, err = child.communicate(timeout=max(0.0, min(1.0, end - time.monotonic())))
                break
            except subprocess.TimeoutExpired:
                if self._stopping.is_set():
                    return
                if time.monotonic() >= end:
                    self._failed(f"the publish to {self.publish.dir} has not ended after "
                                 f"{format_duration(self.deadline)} (a hung shared volume?)")
                    return
        self._child = None
        self._outcome(child.returncode, out, err)

    def _outcome(self, status: int, out: bytes, err: bytes) -> None:
        lines = out.decode(errors="replace").strip().splitlines()
        try:
            result = json.loads(lines[-1])
        except (IndexError, ValueError):
            tail = err.decode(errors="replace").strip().splitlines()[-1:] or [f"exit {status}"]
            self._failed(f"the publish failed: {tail[0]}")
            return
        if not result.get("ok"):
            self._failed(str(result.get("error")))
            return
        self.published += 1
        said = (f"published {result['path']} ({format_size(int(result['bytes']))}, "
                f"{result['seconds']:.2f} s)")
        if self._failing is not None:
            log.info("%s, again after %d failed attempts since %s", said, self._failures,
                     time.strftime("%H:%M:%S", time.localtime(self._failing_since)))
            self._failing, self._failures = None, 0
        elif self.published == 1:
            log.info("%s; every %s from now", said, format_duration(self.publish.every))
        else:
            log.debug("%s", said)

    def _failed(self, text: str) -> None:
        now = time.time()
        self._failures += 1
        if text != self._failing:
            if self._failing is None:
                self._failing_since = now
            log.error("publish: %s; the previous copy stays, tried again in %s", text,
                      format_duration(self.publish.every))
            self._failing, self._said = text, now
        elif now - self._said >= REPEAT_FAILURE:
            log.warning("publish: still failing (%d attempts since %s): %s", self._failures,
                        time.strftime("%H:%M:%S", time.localtime(self._failing_since)), text)
            self._said = now

    def stop(self) -> None:
        """A publish still running is killed, not waited for (the copy in place is whole);
        a run waiting for it returns within a second."""
        self._stopping.set()
        child, self._child = self._child, None
        if child is not None and child.poll() is None:
            child.kill()


class ExportJobs:
    """The published copy and the textfile, as scheduler jobs of the service."""

    def __init__(self, config: Config, metrics) -> None:
        self.config = config
        self.publisher = PublishJob(config) if config.publish is not None else None
        self.textfile: TextfileWriter | None = None
        if metrics is not None and config.metrics is not None and config.metrics.textfile:
            self.textfile = TextfileWriter(config.metrics.textfile, metrics.file_registry,
                                           config.host)

    def add_jobs(self, scheduler, now: float) -> None:
        for job_id, name, func, trigger in self._jobs(now):
            scheduler.add_job(func, trigger, id=job_id, name=name)

    def reschedule(self, scheduler, now: float) -> None:
        """Put the jobs on the wall clock as it is now (after a clock step)."""
        for job_id, _, _, trigger in self._jobs(now):
            scheduler.reschedule_job(job_id, trigger=trigger)

    def _jobs(self, now: float) -> list:
        import datetime as dt

        def at(when: float) -> dt.datetime:
            return dt.datetime.fromtimestamp(when, dt.timezone.utc)

        jobs = []
        if self.publisher is not None:
            every = self.config.publish.every
            jobs.append(("publish", "publish the database", self.publisher.run,
                         IntervalTrigger(seconds=every, start_date=at(self.publisher.first(now)))))
        if self.textfile is not None:
            every = self.config.metrics.textfile_every
            jobs.append(("textfile", "metrics textfile", self.textfile.write,
                         IntervalTrigger(seconds=every, start_date=at(now + 1.0))))
        return jobs

    def stop(self) -> None:
        """At the service's stop: the last textfile (its final counts), no publish left."""
        if self.publisher is not None:
            self.publisher.stop()
        if self.textfile is not None:
            self.textfile.write()
