"""The README's first run for a new account: its main command, run as written with an empty
HOME and no configuration, gives `slowdown` a line of numbers for every target. It waits for
the first minute boundary after the service's start, so it runs as a scene beside other
tests. Run by tests/test_first_run.py.
"""

from __future__ import annotations

import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

README = Path(__file__).resolve().parents[3] / "README.md"


def first_run_block() -> list[str]:
    """The lines of the shell block that follows the first-run marker, comments removed."""
    lines = README.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("<!-- first-run"))
    opening = next(i for i in range(start, len(lines)) if lines[i].startswith("```sh"))
    closing = next(i for i in range(opening + 1, len(lines)) if lines[i].startswith("```"))
    return [line.split(" #")[0].strip() for line in lines[opening + 1:closing]]


def scene(tmp_path: Path) -> None:
    """The service of the block's last line, then `slowdown` (raises AssertionError naming
    what was not so)."""
    home = tmp_path / "home"
    home.mkdir()
    bin_dir = str(Path(sys.executable).parent)
    env = {"HOME": str(home), "PATH": f"{bin_dir}:/usr/bin:/bin", "LANG": "C.UTF-8"}
    argv = shlex.split(first_run_block()[-1])
    with open(tmp_path / "service.log", "wb") as log:
        service = subprocess.Popen(argv, cwd=home, env=env, stdin=subprocess.DEVNULL,
                                   stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 130  # the first minute is written after a minute boundary
        said = ""
        while time.monotonic() < deadline:
            assert service.poll() is None, (tmp_path / "service.log").read_text()
            done = subprocess.run(["slowdown"], cwd=home, env=env, capture_output=True,
                                  text=True, timeout=60)
            said = done.stdout + done.stderr
            if done.returncode == 0 and " 1m " in done.stdout:
                break
            time.sleep(2)
        lines = [line for line in said.splitlines() if " 1m " in line]
        assert len(lines) == 1 and "local" in lines[0].split(), said  # the default's one target
        assert not (home / ".config").exists()  # nothing but the data directory was made
        assert (home / ".local" / "share" / "slowdown").is_dir()
    finally:
        service.send_signal(signal.SIGTERM)
        service.wait(timeout=30)
        subprocess.run(["slowdown-probe", "cleanup", "-y"], cwd=home, env=env,
                       capture_output=True, timeout=60)
    assert service.returncode == 0, (tmp_path / "service.log").read_text()
    assert not list((home / ".local" / "share" / "slowdown").rglob("data.bin"))
