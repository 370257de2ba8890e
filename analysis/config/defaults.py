"""Where slowdown looks when the file says nothing: data directory, database, search paths,
the built-in configuration, and the directories that may never be a target.

Everything here follows the environment it is given (``$HOME``, ``$XDG_*``,
``$STATE_DIRECTORY``) and looks at no target, so it answers at once even while a target's
filesystem hangs.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from slowdown.analysis.config.model import (
    DEFAULT_INTERVAL,
    DEFAULT_RETENTION,
    DEFAULT_STATISTICS,
    DEFAULT_WINDOWS,
    MIB,
    BaselineConfig,
    Config,
    DataSize,
    Target,
)
from slowdown.analysis.histogram.mapping import DEFAULT_SCALE

SYSTEM_CONFIG_PATH = Path("/etc/slowdown/slowdown.toml")


# Never a target: the root, system directories, pseudo filesystems. What needs the filesystem
# to tell (a symlink on the way, a home directory under another name, a workspace of another
# user) is refused by prepare and by the service's workers (probe/pathsafety.py).
SYSTEM_DIRS = frozenset({
    "/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/opt",
    "/proc", "/root", "/run", "/sbin", "/srv", "/sys", "/tmp", "/usr", "/var",
})
PSEUDO_FS = ("/proc/", "/sys/", "/dev/")


def unsafe_target_path(path: Path | str, environ: Mapping[str, str] = os.environ) -> str | None:
    """Why ``path`` must not be a target, from its name alone (no filesystem access: a
    configuration must load even while a target's filesystem hangs); None when it may be."""
    text = os.path.normpath(str(path))
    if text in SYSTEM_DIRS or text.startswith(PSEUDO_FS):
        return (f"{text} is a system directory; give a directory of its own for the probes, "
                "e.g. /lustre/work/slowdown-probe")
    homes = {os.path.normpath(str(_home(environ)))}
    if environ.get("HOME"):
        homes.add(os.path.normpath(environ["HOME"]))
    if text in homes:
        return f"{text} is a home directory itself; give a subdirectory, e.g. ~/slowdown-probe"
    return None


def _home(environ: Mapping[str, str]) -> Path:
    home = environ.get("HOME")
    if home:
        return Path(home)
    try:
        import pwd

        return Path(pwd.getpwuid(os.getuid()).pw_dir)
    except (ImportError, KeyError):  # pragma: no cover - no passwd entry
        return Path("/")


def _xdg(environ: Mapping[str, str], variable: str, fallback: str) -> Path:
    value = environ.get(variable, "")
    # The XDG spec says relative values are invalid and to be ignored.
    if value and os.path.isabs(value):
        return Path(value)
    return _home(environ) / fallback


def data_dir(environ: Mapping[str, str] = os.environ) -> Path:
    """Where slowdown keeps its data: ``$STATE_DIRECTORY`` under systemd, else
    ``$XDG_DATA_HOME/slowdown`` (``~/.local/share/slowdown``)."""
    state = environ.get("STATE_DIRECTORY", "")
    if state:
        # systemd lists several directories separated by ':' when StateDirectory= has several.
        return Path(state.split(":")[0])
    return _xdg(environ, "XDG_DATA_HOME", ".local/share") / "slowdown"


def default_database(environ: Mapping[str, str] = os.environ) -> Path:
    """The database used when the file names none: ``data_dir()/slowdown.db``."""
    return data_dir(environ) / "slowdown.db"


def default_config_paths(
    environ: Mapping[str, str] = os.environ, *, system_path: Path = SYSTEM_CONFIG_PATH
) -> tuple[Path, Path]:
    """The two optional places searched after ``--config`` and ``$SLOWDOWN_CONFIG``."""
    user = _xdg(environ, "XDG_CONFIG_HOME", ".config") / "slowdown" / "slowdown.toml"
    return (user, system_path)


def default_config(environ: Mapping[str, str] = os.environ) -> Config:
    """A small local setup that works without any file: one target ``local`` in the data dir.

    Its workspace is small (64 MiB data file, 1000 objects) so that trying slowdown out
    costs nothing; a real deployment writes a file with ``data_size = "4xRAM"``.
    """
    base = data_dir(environ)
    local = Target(
        name="local",
        path=base / "workspace",
        data_size=DataSize(bytes=64 * MIB),
        pool_files=1000,
        pool_dirs=10,
        object_size=3901,
        create_parents=True,
    )
    return Config(
        source=None,
        host=os.uname().nodename,
        interval=DEFAULT_INTERVAL,
        database=base / "slowdown.db",
        windows=DEFAULT_WINDOWS,
        statistics=DEFAULT_STATISTICS,
        baseline=BaselineConfig(),
        targets=(local,),
        metrics=None,
        alerts=(),
        retention=DEFAULT_RETENTION,
        scale=DEFAULT_SCALE,
    )
