"""Where slowdown looks when the file says nothing: data directory, database, search paths,
the built-in configuration, and the directories that may never be a target.

Everything here follows the environment it is given (``$HOME``, ``$XDG_*``,
``$STATE_DIRECTORY``) and looks at no target, so it answers at once even while a target's
filesystem hangs. The default database looks at one directory: which filesystem the data
directory is on (``store.filesystem``), to keep the database off a shared home.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
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
from slowdown.analysis.store.filesystem import filesystem_of

SYSTEM_CONFIG_PATH = Path("/etc/slowdown/slowdown.toml")


# Never a target: the root, system directories, pseudo filesystems. What needs the filesystem
# to tell (a symlink on the way, a home directory under another name, a workspace of another
# user) is refused by prepare and by the service's workers (probe/layout/path_safety.py).
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


# Where the built-in default goes when the data directory is on a shared filesystem: a local
# directory that outlives a reboot (not /tmp, which systemd's PrivateTmp= may hide), one per
# user. The service creates it 0700 and refuses one that is not its user's own.
LOCAL_DATA_ROOT = Path("/var/tmp")


@dataclass(frozen=True)
class DefaultDatabase:
    """The default database and, when it was moved off a shared data directory, why."""

    path: Path
    moved_from: Path | None = None  # the data directory it would have been in
    filesystem: str | None = None  # what that directory is on, e.g. "nfs4 (a network filesystem)"

    def note(self) -> str | None:
        """One sentence for the log and check-config when the default was moved."""
        if self.moved_from is None:
            return None
        return (f"the built-in default, not in {self.moved_from}, which is on "
                f"{self.filesystem}; SQLite's WAL needs a local filesystem")


def local_data_dir() -> Path:
    """``/var/tmp/slowdown-<uid>``: the built-in default's place off a shared home."""
    return LOCAL_DATA_ROOT / f"slowdown-{os.getuid()}"


def default_database_place(environ: Mapping[str, str] = os.environ,
                           host: str | None = None) -> DefaultDatabase:
    """The database used when the file names none, one per host so that nodes sharing a home
    never write one file: ``$STATE_DIRECTORY/slowdown.db`` under systemd (a directory of this
    machine), else ``data_dir()/slowdown-<host>.db``, or ``/var/tmp/slowdown-<uid>/
    slowdown-<host>.db`` when the data directory is on a network or cluster filesystem."""
    state = environ.get("STATE_DIRECTORY", "")
    if state:
        return DefaultDatabase(Path(state.split(":")[0]) / "slowdown.db")
    name = f"slowdown-{host or os.uname().nodename}.db"
    base = data_dir(environ)
    filesystem = filesystem_of(base)
    if filesystem is None or not filesystem.shared:
        return DefaultDatabase(base / name)
    return DefaultDatabase(local_data_dir() / name, base, filesystem.describe())


def default_database(environ: Mapping[str, str] = os.environ, host: str | None = None) -> Path:
    """The database used when the file names none (see :func:`default_database_place`)."""
    return default_database_place(environ, host).path


def earlier_default_database(environ: Mapping[str, str] = os.environ) -> Path | None:
    """Where slowdown before per-host defaults kept its database (``data_dir()/slowdown.db``);
    None under systemd, where the default did not change."""
    if environ.get("STATE_DIRECTORY", ""):
        return None
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
    costs nothing; its data file is the node's own (``data_file = "own"``: one node, nothing to
    share). A real deployment writes a file, whose targets share one data file per filesystem.
    """
    base = data_dir(environ)
    host = os.uname().nodename
    local = Target(
        name="local",
        path=base / "workspace",
        data_size=DataSize(bytes=64 * MIB),
        pool_files=1000,
        pool_dirs=10,
        object_size=3901,
        create_parents=True,
        data_file="own",
    )
    return Config(
        source=None,
        host=host,
        interval=DEFAULT_INTERVAL,
        database=default_database(environ, host),
        windows=DEFAULT_WINDOWS,
        statistics=DEFAULT_STATISTICS,
        baseline=BaselineConfig(),
        targets=(local,),
        metrics=None,
        alerts=(),
        retention=DEFAULT_RETENTION,
        scale=DEFAULT_SCALE,
    )
