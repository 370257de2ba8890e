"""The metrics as a ``.prom`` file for node_exporter's textfile collector (``[metrics]
textfile``): no port of our own on the node.

The file holds what the HTTP endpoint serves (``exporters/metrics.py``), in the same text format,
with two differences that keep node_exporter's own series apart from ours: the process metrics
are ``slowdown_process_*`` (node_exporter exports its own ``process_*``), and there is no
``up`` of ours (node_exporter's scrape says whether the node answers; the age of the file is
``node_textfile_mtime_seconds``).

It is written whole into a temporary file of ours beside it (``.<name>.<pid>.tmp``, which
the collector ignores: it reads ``*.prom`` only) and renamed over the previous one, so a
scrape reads the previous file or the new one, never a part. A ``.prom`` file already there
that is not ours (no ``slowdown_service_info`` of this host in it) is never replaced: the
writer refuses, says so once, and the service probes on. A failed write (a directory
read-only or full) is said once with the path and errno, leaves the previous file whole, and
is tried again at the next interval.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import stat
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest

from slowdown.analysis.atomic_write import write_all
from slowdown.probe.locks.lock_file import alive

log = logging.getLogger(__name__)

SIGNATURE = "slowdown_service_info{"


class TextfileRefused(Exception):
    """The file is there and is not ours."""


def temp_path(path: Path, pid: int) -> Path:
    return path.with_name(f".{path.name}.{pid}.tmp")


class TextfileWriter:
    def __init__(self, path: Path, registry: CollectorRegistry, host: str) -> None:
        self.path = path
        self.registry = registry
        self.host = host
        self._failing: str | None = None  # the last failure said, until a write succeeds
        self._checked = False  # the file there was found ours (or absent) once

    def write(self) -> bool:
        """Write the file once; False (said once per kind of failure) when it could not be."""
        try:
            if not self._checked:
                self._check_own()
                self._clean_leftovers()
                self._checked = True
            self._replace(generate_latest(self.registry))
        except (OSError, TextfileRefused) as exc:
            text = str(exc) if isinstance(exc, TextfileRefused) else (
                f"cannot write {self.path}: {_describe(exc)}")
            if text != self._failing:
                log.error("metrics textfile: %s (retried every interval; probing goes on)",
                          text)
            self._failing = text
            return False
        if self._failing is not None:
            log.info("metrics textfile: %s written again", self.path)
            self._failing = None
        return True

    def _check_own(self) -> None:
        try:
            info = os.lstat(self.path)
        except FileNotFoundError:
            return
        if not stat.S_ISREG(info.st_mode):
            raise TextfileRefused(f"{self.path} exists and is not a regular file; not replaced")
        with open(self.path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        ours = re.compile(rf'^{re.escape(SIGNATURE)}[^}}\n]*\bhost="{re.escape(self.host)}"',
                          re.MULTILINE)  # the labels are written in sorted order
        if ours.search(text) is None:
            raise TextfileRefused(f"{self.path} exists and was not written by slowdown on host "
                                  f"{self.host}; not replaced (move it away or set another "
                                  "[metrics] textfile)")

    def _clean_leftovers(self) -> None:
        """Our temporary files left by a service that was killed while writing."""
        pattern = re.compile(rf"\.{re.escape(self.path.name)}\.(\d+)\.tmp")
        for name in os.listdir(self.path.parent):
            match = pattern.fullmatch(name)
            if match is None or _running(int(match.group(1))):
                continue
            leftover = self.path.parent / name
            info = os.lstat(leftover)
            if stat.S_ISREG(info.st_mode) and info.st_uid == os.getuid():
                os.unlink(leftover)
                log.info("metrics textfile: removed the leftover %s", leftover)

    def _replace(self, data: bytes) -> None:
        temp = temp_path(self.path, os.getpid())
        # O_EXCL: a file of that name is not ours (ours is removed after every failure).
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o644)
        try:
            try:
                write_all(fd, data)
            finally:
                os.close(fd)
            os.rename(temp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp)
            raise


def _running(pid: int) -> bool:
    """Whether the process that named a temporary file may still write it (this
    service's own may be writing it now)."""
    return pid == os.getpid() or alive(pid)


def _describe(exc: OSError) -> str:
    name = errno.errorcode.get(exc.errno or 0)
    return f"{exc.strerror or exc} ({name})" if name else str(exc)
