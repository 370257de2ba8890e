"""The writing process never opens its database outside SQLite (docs/DEVELOPERS.md).

Closing any descriptor of a file drops every POSIX lock the process holds on it, the writer
connection's among them; the next SQLite client to close then takes itself for the last one,
checkpoints and deletes the -wal and -shm under the running service, and every later minute
is lost (the service's own readers once read the file's header with open() and close()).

The real service runs with every reader it has in its own process (metrics, publishing, the
fleet's verdict, an alert rule), under an audit hook that notes every file Python opens
(``open`` events: ``open()``, ``os.open``, ``io.open``; SQLite's own opens are not Python's),
and the scene scrapes its metrics meanwhile. No open of the database, its -wal or its -shm
may come from the service's process. Run by tests/test_scenes.py.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from tests.kit.servicekit import probe_cli, wait_for

# Runs the service with an audit hook that writes each opened path, with the opening PID.
HOOKED = r"""
import os, sys
log = open(sys.argv[1], "a", buffering=1)
def hook(event, args):
    if event == "open" and args and isinstance(args[0], (str, bytes, os.PathLike)):
        log.write(f"{os.getpid()} {os.fsdecode(args[0])}\n")
sys.addaudithook(hook)
sys.argv = ["slowdown-probe", *sys.argv[2:]]
from slowdown.probe.command.main import main
sys.exit(main())
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scene(tmp_path: Path) -> None:
    """The service with all its readers under the hook; AssertionError naming any open."""
    port = _free_port()
    database = tmp_path / "db" / "slowdown.db"
    (tmp_path / "target").mkdir()
    pub = tmp_path / "pub"
    pub.mkdir()
    config = tmp_path / "slowdown.toml"
    config.write_text("\n".join([
        'host = "testhost"', f'database = "{database}"',
        "[[target]]", 'name = "t"', f'path = "{tmp_path / "target"}"', 'data_size = "4MiB"',
        "pool_files = 20", "pool_dirs = 2",
        "[metrics]", f'listen = "127.0.0.1:{port}"',
        "[publish]", f'dir = "{pub}"', 'every = "1m"',
        "[fleet]", f'databases = "{pub}/*.db"',
        "[[alert]]", 'name = "slow"', 'target = "t"', 'op = "*"', 'kind = "slowdown"',
        'statistic = "median"', 'window = "1m"', "above = 0.001", 'for = "0s"',
        'action = { type = "command", argv = ["/bin/true"] }']) + "\n")
    done = probe_cli(config, "prepare", "--no-progress")
    assert done.returncode == 0, done.stderr
    opened = tmp_path / "opened.txt"
    # Past the first flush by 20 s (an alert, a copy, a scrape), the service well started
    # before that minute boundary.
    seconds = 60 - time.time() % 60 + 20
    seconds += 60 if seconds < 35 else 0
    proc = subprocess.Popen([sys.executable, "-c", HOOKED, str(opened), "--config",
                             str(config), "run", "--duration", f"{seconds:.0f}"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        wait_for(lambda: _scrape(url), 20, what="the metrics endpoint")
        deadline = time.monotonic() + seconds - 3
        while time.monotonic() < deadline:
            _scrape(url)
            time.sleep(2)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, out
    assert list(pub.glob("*.db")), out  # a copy was published
    assert "alert slow" in out, out  # and the rule was evaluated (it fires at once)
    names = {str(database.resolve()) + suffix for suffix in ("", "-wal", "-shm")}
    lines = [line.split(" ", 1) for line in opened.read_text().splitlines()]
    assert any(path.endswith(".live.json") or "MANIFEST" in path for _, path in lines)
    mine = [path for pid, path in lines
            if int(pid) == proc.pid and str(Path(path).resolve()) in names]
    assert not mine, f"the service opened its database outside SQLite: {mine}"


def _scrape(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return b"slowdown_" in response.read()
    except OSError:
        return False
