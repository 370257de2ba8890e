"""Places slowdown must never write to are refused, with a message that says why, by every
command that would write there: the configuration check, prepare, cleanup and the service.

- ``/``, a system directory, a pseudo filesystem, a home directory itself: refused when the
  configuration loads (by name only: loading never touches a target's filesystem), exit 2;
- a target path through a symlink, a workspace owned by another user: refused by prepare and
  cleanup (exit 1, one line) and by the service's workers (every op an error naming the
  reason, nothing written; the service itself goes on with its other targets).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.kit.fixtures_fs import require_root
from tests.kit.servicekit import TargetSpec, probe_cli, records, write_config

HOST = "testhost"


def tree(root: Path) -> dict[str, tuple[int, str]]:
    """Every file under ``root`` with its size and content hash, and every directory."""
    found: dict[str, tuple[int, str]] = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink():
            found[str(path.relative_to(root))] = (path.stat().st_size,
                                                  hashlib.sha256(path.read_bytes()).hexdigest())
        else:
            found[str(path.relative_to(root))] = (-1, "")
    return found


def probe(config: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "slowdown.probe.command.main", "--config", str(config), *args],
        capture_output=True, text=True, timeout=120, env={**os.environ, **(env or {})})


@pytest.mark.timeout(120)
@pytest.mark.parametrize("path", ["/", "/etc", "/usr/", "/proc/self", "/tmp", "~", "HOME"])
def test_system_and_home_directories_are_refused_by_the_configuration(tmp_path, path):
    home = tmp_path / "home" / "alice"
    home.mkdir(parents=True)
    env = {"HOME": str(home)}
    target = str(home) if path == "HOME" else path
    database = tmp_path / "db" / "slowdown.db"
    config = write_config(tmp_path / "slowdown.toml", database, [TargetSpec("t", Path("/x"))])
    config.write_text(config.read_text().replace('path = "/x"', f'path = "{target}"'))
    before = config.read_bytes()
    line = config.read_text().splitlines().index(f'path = "{target}"') + 1
    for args in (["check-config"], ["prepare", "--no-progress"], ["cleanup"],
                 ["run", "--duration", "2s"]):
        done = probe(config, *args, env=env)
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        assert f"{config}:{line}: target[1].path: " in done.stderr, done.stderr
        why = "home directory itself" if path in ("~", "HOME") else "system directory"
        assert why in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert config.read_bytes() == before
    assert not database.parent.exists()
    assert os.listdir(home) == []


def _prepared(tmp_path: Path, real: Path) -> tuple[Path, Path]:
    real.mkdir(parents=True)
    database = tmp_path / "db" / "slowdown.db"
    config = write_config(tmp_path / "real.toml", database, [
        TargetSpec("t", real, data_size="4MiB", pool_files=20, pool_dirs=2)])
    done = probe_cli(config, "prepare", "--no-progress")
    assert done.returncode == 0, done.stderr
    return config, database


def _run_refused(config: Path, database: Path, real: Path, why: str) -> None:
    """The service runs, its worker refuses the workspace: every op an error saying why,
    nothing in the workspace touched."""
    before = tree(real)
    done = probe(config, "run", "--duration", "4s")
    assert done.returncode == 0, done.stderr
    assert why in done.stderr, done.stderr
    assert tree(real) == before
    recs = records(database, targets=("t",))
    assert recs and all(r.histogram.count == 0 and r.errors > 0 for r in recs), recs


@pytest.mark.timeout(120)
def test_a_path_through_a_symlink_is_refused(tmp_path):
    real = tmp_path / "real" / "target"
    _, database = _prepared(tmp_path, real)
    (tmp_path / "link").symlink_to(tmp_path / "real")
    linked = write_config(tmp_path / "linked.toml", database, [
        TargetSpec("t", tmp_path / "link" / "target", data_size="4MiB", pool_files=20,
                   pool_dirs=2)])
    before = tree(tmp_path / "real")
    for args in (["prepare", "--no-progress"], ["cleanup", "--yes"]):
        done = probe(linked, *args)
        assert done.returncode == 1, (args, done.stderr)
        (line,) = done.stderr.splitlines()
        assert line.startswith(f"slowdown-probe {args[0]}: target t: ") and \
            f"{tmp_path / 'link'} is a symlink" in line, line
        assert tree(tmp_path / "real") == before
    _run_refused(linked, database, real, f"{tmp_path / 'link'} is a symlink")


@pytest.mark.timeout(120)
def test_a_workspace_owned_by_another_user_is_refused(tmp_path):
    require_root("chown")
    real = tmp_path / "target"
    config, database = _prepared(tmp_path, real)
    workspace = real / ".slowdown" / HOST
    os.chown(workspace, 4242, 4242)
    before = tree(real)
    for args in (["prepare", "--no-progress"], ["cleanup", "--yes"]):
        done = probe(config, *args)
        assert done.returncode == 1, (args, done.stderr)
        (line,) = done.stderr.splitlines()
        assert f"{workspace} belongs to uid 4242" in line, line
        assert tree(real) == before
    _run_refused(config, database, real, f"{workspace} belongs to uid 4242")
