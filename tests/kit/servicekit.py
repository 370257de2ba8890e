"""Helpers for tests that run the real service as a subprocess (never in the test process:
a probe stuck in a hung filesystem must not be able to wedge the test runner)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from slowdown.analysis.store import Selection, Store
from slowdown.analysis.store.live import read_live


@dataclass
class TargetSpec:
    name: str
    path: Path
    data_size: str = "16MiB"
    pool_files: int = 100
    pool_dirs: int = 10


def write_config(path: Path, database: Path, targets: Iterable[TargetSpec], **top: str) -> Path:
    lines = [f'database = "{database}"', 'host = "testhost"']
    lines += [f'{key} = "{value}"' for key, value in top.items()]
    for t in targets:
        lines += [
            "[[target]]",
            f'name = "{t.name}"',
            f'path = "{t.path}"',
            f'data_size = "{t.data_size}"',
            f"pool_files = {t.pool_files}",
            f"pool_dirs = {t.pool_dirs}",
        ]
    path.write_text("\n".join(lines) + "\n")
    return path


def probe_cli(config: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "slowdown.probe.command.main", "--config", str(config), *args],
        capture_output=True, text=True, timeout=timeout,
    )


def prepared(tmp_path: Path, targets: Iterable[TargetSpec], **top: str) -> tuple[Path, Path]:
    """The config (tmp_path/slowdown.toml) and database (tmp_path/db/slowdown.db) of
    ``targets``, their paths made and prepared by `slowdown-probe prepare`."""
    targets = list(targets)
    database = tmp_path / "db" / "slowdown.db"
    config = write_config(tmp_path / "slowdown.toml", database, targets, **top)
    for t in targets:
        t.path.mkdir(parents=True, exist_ok=True)
    done = probe_cli(config, "prepare", "--no-progress")
    assert done.returncode == 0, done.stderr
    return config, database


def start_service(config: Path, *args: str, env: dict | None = None,
                  wrap: list[str] | None = None, journal: bool = False) -> subprocess.Popen:
    """The service, its output in files: a worker stuck in a hung filesystem outlives the
    service and would keep a pipe open, so reading the service's output to EOF could block.
    ``wrap``: a command that runs it (``setpriv ... --``), without a shell. ``journal``: the
    file is named by $JOURNAL_STREAM, as systemd names the journal's socket (the service then
    writes the journal's lines, without a time)."""
    with tempfile.NamedTemporaryFile(prefix="slowdown-service-", suffix=".log",
                                     delete=False) as log:
        st = os.fstat(log.fileno())
        stream = {"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"} if journal else {}
        proc = subprocess.Popen(
            [*(wrap or []), sys.executable, "-m", "slowdown.probe.command.main", "--config",
             str(config), "run", *args],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {}), **stream},
        )
    proc.log_path = Path(log.name)  # type: ignore[attr-defined]
    return proc


def output(proc: subprocess.Popen) -> str:
    return proc.log_path.read_text()  # type: ignore[attr-defined]


def wait_service(proc: subprocess.Popen, timeout: float) -> str:
    """Wait for a bounded run to end by itself; returns its output."""
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise AssertionError(f"service still running after {timeout} s:\n{output(proc)}") from None
    return output(proc)


def stop_service(proc: subprocess.Popen, timeout: float = 15) -> tuple[float, str]:
    """SIGTERM; returns (seconds until exit, output)."""
    t0 = time.monotonic()
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise AssertionError(f"service did not exit within {timeout} s:\n{output(proc)}") \
            from None
    return time.monotonic() - t0, output(proc)


def unclean_stop(proc: subprocess.Popen, timeout: float = 15) -> str | None:
    """Stop a service that still runs, for a test's cleanup: what was wrong with its stop (a
    hang at exit, then killed; an exit status other than 0), or None for a clean one. The
    cleanup says it once the rest is cleaned up."""
    if proc.poll() is not None:
        return None
    try:
        _, out = stop_service(proc, timeout=timeout)
    except AssertionError as hang:
        return str(hang)
    return None if proc.returncode == 0 else f"exit status {proc.returncode}:\n{out}"


def live(database: Path) -> dict:
    """The live state (a torn read of the in-place file is read again)."""
    state = read_live(database, tries=20)
    if state is None:
        raise AssertionError(f"no readable live state beside {database}")
    return state


def wait_for(predicate, timeout: float, step: float = 0.2, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def wait_live(database: Path, timeout: float = 15) -> None:
    """Wait until the service's live state stands beside ``database``."""
    wait_for(lambda: database.with_name(database.name + ".live.json").exists(), timeout,
             what="the live state")


def start_live(config: Path, database: Path, env: dict | None = None) -> subprocess.Popen:
    """The service started and its live state written (its first tick done); stopped again
    if that never comes."""
    proc = start_service(config, env=env)
    try:
        wait_live(database)
    except BaseException:
        stop_service(proc)
        raise
    return proc


def wait_next_minute(margin: float = 2.0) -> None:
    """Sleep until ``margin`` seconds past the next minute boundary (after the flush)."""
    time.sleep(60 - time.time() % 60 + margin)


def records(database: Path, **selection) -> list:
    with Store(database, readonly=True) as store:
        return list(store.records(Selection(**selection)))


def seconds_of_minute() -> float:
    return time.time() % 60


def ops_by_minute(database: Path, target: str) -> dict[str, dict[int, object]]:
    result: dict[str, dict[int, object]] = {}
    for rec in records(database, targets=(target,)):
        result.setdefault(rec.op, {})[rec.start] = rec
    return result


def environ_without_notify() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("NOTIFY_SOCKET", "WATCHDOG_USEC")}


class NotifySocket:
    """A private $NOTIFY_SOCKET standing in for systemd's: each datagram's lines, stamped with
    the monotonic clock as they arrive."""

    def __init__(self, directory: Path | None = None) -> None:
        self.own = directory is None or len(str(directory)) > 80  # sun_path holds 108 bytes
        if self.own:
            directory = Path(tempfile.mkdtemp(prefix="sd-notify-"))
        self.directory = directory
        self.path = directory / "notify.sock"
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(self.path))
        self.messages: list[tuple[float, list[str]]] = []
        self._reader = threading.Thread(target=self._receive, daemon=True)
        self._reader.start()

    def _receive(self) -> None:
        while True:
            try:
                data = self.sock.recv(65536)
            except OSError:  # closed
                return
            if not data:
                return
            self.messages.append((time.monotonic(), data.decode().split("\n")))

    def times(self, field: str, start: float = 0.0, end: float = float("inf")) -> list[float]:
        """When ``field`` (such as WATCHDOG=1) came, between ``start`` and ``end``."""
        return [at for at, fields in list(self.messages)
                if field in fields and start <= at <= end]

    def wait(self, field: str, timeout: float) -> float:
        """The time ``field`` first came, waiting up to ``timeout``."""
        found = wait_for(lambda: self.times(field), timeout, step=0.05, what=field)
        return found[0]

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the reader
        self.sock.close()
        self._reader.join(timeout=5)
        self.path.unlink(missing_ok=True)
        if self.own:
            self.directory.rmdir()
