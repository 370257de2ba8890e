"""The configuration: one TOML file, validated whole, every mistake reported with file, line, key.

The file is found by ``--config``, ``$SLOWDOWN_CONFIG``, ``~/.config/slowdown/slowdown.toml``
(``$XDG_CONFIG_HOME``) and ``/etc/slowdown/slowdown.toml``, in that order; with none of
them, :func:`default_config` gives a small local setup. Validation collects every error
instead of stopping at the first, so ``slowdown-probe check-config`` can list them all.

tomllib reports no line for a semantic error, so :class:`_Locator` scans the source text
once and maps key paths such as ``("target", 2, "data_size")`` to the line that wrote them.
Key paths count array entries from 1, as a user does, and render as ``target[2].data_size``.
"""

from __future__ import annotations

import ipaddress
import json
import math
import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, time
from fnmatch import fnmatchcase
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Union
from urllib.parse import urlsplit

from slowdown.analysis.units import (
    DURATION_EXAMPLE,
    format_duration,
    format_size,
    parse_duration,
    parse_size,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python < 3.11 only
    import tomli as tomllib

__all__ = [
    "ACTION_TYPES",
    "ALERT_KINDS",
    "OPS",
    "STATISTICS",
    "SYSTEM_CONFIG_PATH",
    "ActionConfig",
    "AlertRule",
    "BaselineConfig",
    "Config",
    "ConfigError",
    "ConfigErrors",
    "DataSize",
    "MetricsConfig",
    "Target",
    "data_dir",
    "default_config",
    "default_config_paths",
    "default_database",
    "find_config_path",
    "format_key",
    "is_statistic",
    "load",
    "load_config",
    "loads",
    "statistic_quantile",
    "validate",
]

OPS = ("data-read", "data-write", "md-stat", "md-read", "md-delete", "md-write")
STATISTICS = ("median", "mean", "max", "q90", "q95", "q99")
ALERT_KINDS = ("slowdown", "error_rate", "stuck")
ACTION_TYPES = ("command", "webhook", "email")
SYSTEM_CONFIG_PATH = Path("/etc/slowdown/slowdown.toml")

MIB = 1 << 20
_QUANTILE_NAME = re.compile(r"q\d{1,2}(?:\.\d)?")
_NAME = re.compile(r"[A-Za-z0-9_.-]+")
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_HOSTNAME = re.compile(
    r"[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*"
)
_RAM_FACTOR = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*[xX]\s*RAM\s*", re.IGNORECASE)

KeyPath = tuple[Union[str, int], ...]


def is_statistic(name: object) -> bool:
    """True for ``median``, ``mean``, ``max`` and quantiles ``qNN`` / ``qNN.N`` (0 < NN < 100)."""
    return isinstance(name, str) and (name == "mean" or statistic_quantile(name) is not None)


def statistic_quantile(name: str) -> float | None:
    """The quantile a statistic stands for: ``median`` 0.5, ``q95`` 0.95, ``q99.9`` 0.999,
    ``max`` 1.0; None for ``mean`` and for anything that is not a statistic."""
    if name == "median":
        return 0.5
    if name == "max":
        return 1.0
    match = _QUANTILE_NAME.fullmatch(name)
    if match is None:
        return None
    percent = float(name[1:])
    if not 0 < percent < 100:
        return None
    return percent / 100


# --------------------------------------------------------------------------- errors


def format_key(path: Sequence[str | int]) -> str:
    """``("alert", 1, "action", "argv")`` -> ``alert[1].action.argv`` (indices count from 1)."""
    parts: list[str] = []
    for part in path:
        if isinstance(part, int):
            if parts:
                parts[-1] += f"[{part}]"
            else:
                parts.append(f"[{part}]")
        else:
            parts.append(part if _BARE_KEY.fullmatch(part) else json.dumps(part))
    return ".".join(parts)


class ConfigError(Exception):
    """A mistake in the configuration, rendered as ``path:line: key: message``.

    Every ConfigError has ``errors``, the list of single errors it stands for (itself,
    or all of them for :class:`ConfigErrors`), so a caller can print one per line.
    """

    def __init__(
        self,
        message: str,
        *,
        path: str | Path | None = None,
        line: int | None = None,
        key: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.path = path
        self.line = line
        self.key = key
        self.errors: list[ConfigError] = [self]

    def __str__(self) -> str:
        where = ""
        if self.path is not None:
            where = str(self.path) + (f":{self.line}" if self.line is not None else "")
        elif self.line is not None:
            where = f"line {self.line}"
        parts = [p for p in (where, self.key) if p]
        return ": ".join([*parts, self.message])


class ConfigErrors(ConfigError):
    """Several mistakes at once; ``str()`` gives one line per error."""

    def __init__(self, errors: Sequence[ConfigError]) -> None:
        first = errors[0]
        super().__init__(
            f"{len(errors)} errors in the configuration", path=first.path, line=first.line
        )
        self.errors = list(errors)

    def __str__(self) -> str:
        return "\n".join(str(error) for error in self.errors)


# --------------------------------------------------------------------------- values


@dataclass(frozen=True)
class DataSize:
    """The size of ``data.bin``: a fixed number of bytes or a multiple of the node's RAM.

    A multiple of RAM keeps the file larger than the page cache on every node a shared
    configuration is used on.
    """

    bytes: int | None = None
    ram_factor: float | None = None

    def __post_init__(self) -> None:
        if (self.bytes is None) == (self.ram_factor is None):
            raise ValueError("DataSize needs exactly one of bytes and ram_factor")
        if self.bytes is not None and (
            isinstance(self.bytes, bool) or not isinstance(self.bytes, int) or self.bytes <= 0
        ):
            raise ValueError(f"DataSize.bytes must be a positive integer, got {self.bytes!r}")
        if self.ram_factor is not None and not (
            isinstance(self.ram_factor, (int, float))
            and not isinstance(self.ram_factor, bool)
            and math.isfinite(self.ram_factor)
            and self.ram_factor > 0
        ):
            raise ValueError(f"DataSize.ram_factor must be positive, got {self.ram_factor!r}")

    @classmethod
    def parse(cls, value: str | int) -> DataSize:
        """``"4xRAM"``, ``"0.5xRAM"``, ``"256GiB"`` or a number of bytes."""
        if isinstance(value, str):
            match = _RAM_FACTOR.fullmatch(value)
            if match is not None:
                factor = float(match.group(1))
                if factor <= 0:
                    raise ValueError(f"a multiple of RAM must be positive; got {value!r}")
                return cls(ram_factor=factor)
        try:
            size = parse_size(value)
        except ValueError:
            raise ValueError(
                f"expected a size like 256GiB or a multiple of RAM like 4xRAM; got {value!r}"
            ) from None
        if size < MIB:
            raise ValueError(f"must be at least 1MiB; got {value!r}")
        return cls(bytes=size)

    def resolve(self, ram_bytes: int | None = None) -> int:
        """Bytes for this node, rounded down to whole MiB blocks, at least 1 MiB."""
        if self.bytes is not None:
            raw = self.bytes
        else:
            if ram_bytes is None:
                import psutil

                ram_bytes = psutil.virtual_memory().total
            raw = int(self.ram_factor * ram_bytes)  # type: ignore[operator]
        return max(MIB, raw // MIB * MIB)

    def __str__(self) -> str:
        if self.bytes is not None:
            return format_size(self.bytes)
        return f"{self.ram_factor:g}xRAM"


@dataclass(frozen=True)
class Target:
    """A named directory on one filesystem to probe."""

    name: str
    path: Path
    data_size: DataSize
    pool_files: int = 100_000
    pool_dirs: int = 10
    object_size: int = 3901

    def workspace(self, host: str) -> Path:
        """``<path>/.slowdown/<host>/``: where prepare creates data.bin, md/ and MANIFEST."""
        return self.path / ".slowdown" / host


@dataclass(frozen=True)
class BaselineConfig:
    period: str = "month"
    expected: str = "same"
    provisional_after: float = 86400.0


@dataclass(frozen=True)
class MetricsConfig:
    listen_host: str = "127.0.0.1"
    listen_port: int = 9877

    @property
    def listen(self) -> str:
        """``host:port`` as written in the file (IPv6 addresses in brackets)."""
        host = f"[{self.listen_host}]" if ":" in self.listen_host else self.listen_host
        return f"{host}:{self.listen_port}"


@dataclass(frozen=True)
class ActionConfig:
    """What an alert does: ``type`` and its validated options, every option present.

    command: ``argv`` (tuple of str, run without a shell), ``timeout`` (s).
    webhook: ``url``, ``token_file`` (Path or None), ``token_env`` (str or None), ``timeout``.
    email: ``to`` (tuple of str), ``from``, ``smtp_host``, ``smtp_port``, ``starttls``,
    ``credentials_file`` (Path or None), ``timeout``.
    """

    type: str
    options: Mapping[str, Any] = field(hash=False)

    def __post_init__(self) -> None:
        if not isinstance(self.options, MappingProxyType):
            object.__setattr__(self, "options", MappingProxyType(dict(self.options)))


@dataclass(frozen=True)
class AlertRule:
    name: str
    targets: tuple[str, ...]
    ops: tuple[str, ...]
    statistic: str
    window: float
    above: float | None
    critical: float | None
    for_: float
    clear_for: float
    repeat: float | None
    kind: str
    actions: tuple[ActionConfig, ...]

    def matches(self, target: str, op: str) -> bool:
        """True when the rule's target and op globs both cover this (target, op)."""
        return any(fnmatchcase(target, p) for p in self.targets) and any(
            fnmatchcase(op, p) for p in self.ops
        )


@dataclass(frozen=True)
class Config:
    source: Path | None
    host: str
    interval: float
    database: Path
    windows: tuple[float, ...]
    statistics: tuple[str, ...]
    baseline: BaselineConfig
    targets: tuple[Target, ...]
    metrics: MetricsConfig | None
    alerts: tuple[AlertRule, ...]
    retention: float
    scale: int
    abandon_after: float = 30.0  # seconds a worker may be stuck before another takes over

    def target(self, name: str) -> Target:
        """The target of that name; KeyError when there is none."""
        for target in self.targets:
            if target.name == name:
                return target
        raise KeyError(name)

    def workspace(self, target: Target) -> Path:
        """The target's workspace for this configuration's host."""
        return target.workspace(self.host)


# --------------------------------------------------------------------------- defaults

DEFAULT_INTERVAL = 1.0
DEFAULT_WINDOWS = (60.0, 600.0, 3600.0)
DEFAULT_STATISTICS = ("median", "q95")
DEFAULT_RETENTION = 90 * 86400.0
DEFAULT_SCALE = 5
DEFAULT_ABANDON_AFTER = 30.0
DEFAULT_DATA_SIZE = DataSize(ram_factor=4.0)


# Never a target: the root, system directories, pseudo filesystems. What needs the filesystem
# to tell (a symlink on the way, a home directory under another name, a workspace of another
# user) is refused by prepare and by the service's workers (probe/workspace.py).
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


# --------------------------------------------------------------------------- finding, loading


def _existing_file(path: Path, what: str) -> Path:
    if not path.exists():
        raise ConfigError(f"configuration file not found ({what})", path=path)
    if path.is_dir():
        raise ConfigError(f"is a directory, not a configuration file ({what})", path=path)
    return path


def find_config_path(
    explicit: str | Path | None = None,
    environ: Mapping[str, str] = os.environ,
    *,
    system_path: Path = SYSTEM_CONFIG_PATH,
) -> Path | None:
    """The configuration file to use, or None when there is none (built-in defaults).

    ``--config`` and ``$SLOWDOWN_CONFIG`` must name an existing file; the user file
    (``$XDG_CONFIG_HOME/slowdown/slowdown.toml``) and ``/etc/slowdown/slowdown.toml`` are
    used only when present.
    """
    if explicit is not None and str(explicit) != "":
        return _existing_file(Path(os.path.expanduser(str(explicit))), "--config")
    from_env = environ.get("SLOWDOWN_CONFIG", "")
    if from_env:
        return _existing_file(Path(from_env), "$SLOWDOWN_CONFIG")
    for candidate in default_config_paths(environ, system_path=system_path):
        if candidate.is_file():
            return candidate
    return None


_TOML_POSITION = re.compile(r"\s*\(at line (\d+), column (\d+)\)$")
_TOML_END = re.compile(r"\s*\(at end of document\)$")


def _syntax_error(error: Exception, text: str, path: Path | None) -> ConfigError:
    message = str(error.args[0]) if error.args else str(error)
    line = getattr(error, "lineno", None)
    column = getattr(error, "colno", None)
    match = _TOML_POSITION.search(message)
    if match is not None:
        line, column = int(match.group(1)), int(match.group(2))
        message = message[: match.start()]
    elif _TOML_END.search(message):
        message = _TOML_END.sub("", message)
        line = text.count("\n") + (0 if text.endswith("\n") else 1)
        column = None
    elif line is not None:  # Python >= 3.14 keeps lineno/colno and a longer message
        message = message.split("\n")[0]
        message = _TOML_POSITION.sub("", message)
    detail = f"TOML syntax error: {message[:1].lower()}{message[1:]}"
    if column is not None:
        detail += f" (column {column})"
    return ConfigError(detail, path=path, line=line)


def loads(text: str, path: Path | None = None, environ: Mapping[str, str] = os.environ) -> Config:
    """Parse and validate configuration text; ``path`` names it in errors and anchors
    relative paths."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise _syntax_error(error, text, path) from None
    return validate(data, path=path, text=text, environ=environ)


def load_config(path: str | Path, environ: Mapping[str, str] = os.environ) -> Config:
    """Read, parse and validate one configuration file."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise ConfigError(error.strerror or str(error), path=path) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        line = raw[: error.start].count(b"\n") + 1
        raise ConfigError("not UTF-8 text", path=path, line=line) from None
    return loads(text, path, environ)


def load(
    explicit: str | Path | None = None,
    environ: Mapping[str, str] = os.environ,
    *,
    system_path: Path = SYSTEM_CONFIG_PATH,
) -> Config:
    """Find the configuration file and load it; without any file, :func:`default_config`."""
    path = find_config_path(explicit, environ, system_path=system_path)
    if path is None:
        return default_config(environ)
    return load_config(path, environ)


# --------------------------------------------------------------------------- line locator


class _Locator:
    """Maps key paths to the source line that wrote them, from a light scan of TOML text.

    It knows ``[table]`` and ``[[array]]`` headers (counting entries per parent entry),
    ``key = value`` lines with dotted and quoted keys, and skips values, including strings
    and arrays over several lines. Keys inside inline tables and arrays are not recorded,
    so a lookup falls back to the longest recorded prefix: the line of the outer key.
    It runs only on text tomllib already accepted.
    """

    def __init__(self, text: str) -> None:
        self.lines: dict[KeyPath, int] = {}
        self._text = text
        self._scan()

    def line_of(self, path: Sequence[str | int]) -> int | None:
        key = tuple(path)
        while key:
            if key in self.lines:
                return self.lines[key]
            key = key[:-1]
        return None

    def _scan(self) -> None:
        text, n = self._text, len(self._text)
        i, line = 0, 1
        prefix: KeyPath = ()
        arrays: dict[KeyPath, int] = {}
        while i < n:
            char = text[i]
            if char == "\n":
                line += 1
                i += 1
            elif char in " \t\r":
                i += 1
            elif char == "#":
                i = self._end_of_line(i)
            elif char == "[":
                is_array = text.startswith("[[", i)
                keys, i = self._key(i + (2 if is_array else 1))
                i = self._end_of_line(i)
                concrete: KeyPath = ()
                for part in keys[:-1]:
                    concrete += (part,)
                    if concrete in arrays:
                        concrete += (arrays[concrete],)
                    self.lines.setdefault(concrete, line)
                concrete += (keys[-1],)
                self.lines.setdefault(concrete, line)
                if is_array:
                    arrays[concrete] = arrays.get(concrete, 0) + 1
                    concrete += (arrays[concrete],)
                    self.lines[concrete] = line
                prefix = concrete
            else:
                keys, i = self._key(i)
                equals = text.find("=", i)
                if not keys or equals < 0:  # not TOML tomllib accepted; stop quietly
                    return
                for depth in range(1, len(keys) + 1):
                    self.lines.setdefault(prefix + keys[:depth], line)
                i, line = self._skip_value(equals + 1, line)

    def _end_of_line(self, i: int) -> int:
        end = self._text.find("\n", i)
        return len(self._text) if end < 0 else end

    def _key(self, i: int) -> tuple[tuple[str, ...], int]:
        """A dotted key starting at ``i`` (spaces allowed around dots)."""
        text, n = self._text, len(self._text)
        parts: list[str] = []
        while i < n:
            while i < n and text[i] in " \t":
                i += 1
            if i < n and text[i] in "\"'":
                end = self._string_end(i)
                raw = text[i:end]
                i = end
                try:
                    parts.append(tomllib.loads(f"k = {raw}")["k"])
                except tomllib.TOMLDecodeError:
                    parts.append(raw.strip("\"'"))
            else:
                start = i
                while i < n and (text[i].isalnum() or text[i] in "_-"):
                    i += 1
                parts.append(text[start:i])
            while i < n and text[i] in " \t":
                i += 1
            if i < n and text[i] == ".":
                i += 1
                continue
            break
        return tuple(parts), i

    def _string_end(self, i: int) -> int:
        """Index just past the string starting at ``i`` (one-line or multi-line)."""
        text, n = self._text, len(self._text)
        quote = text[i]
        escapes = quote == '"'
        if text.startswith(quote * 3, i):
            j = i + 3
            while j < n:
                if escapes and text[j] == "\\":
                    j += 2
                elif text.startswith(quote * 3, j):
                    j += 3
                    extra = 0  # up to two quotes may stand right before the delimiter
                    while j < n and text[j] == quote and extra < 2:
                        j += 1
                        extra += 1
                    return j
                else:
                    j += 1
            return n
        j = i + 1
        while j < n and text[j] != quote and text[j] != "\n":
            j += 2 if escapes and text[j] == "\\" else 1
        return min(j + 1, n)

    def _skip_value(self, i: int, line: int) -> tuple[int, int]:
        """Skip one value; returns the index of the newline ending it and the line there."""
        text, n = self._text, len(self._text)
        depth = 0
        while i < n:
            char = text[i]
            if char == "\n":
                if depth <= 0:
                    return i, line
                line += 1
                i += 1
            elif char == "#":
                i = self._end_of_line(i)
            elif char in "\"'":
                end = self._string_end(i)
                line += text.count("\n", i, end)
                i = end
            else:
                if char in "[{":
                    depth += 1
                elif char in "]}":
                    depth -= 1
                i += 1
        return i, line


# --------------------------------------------------------------------------- validation


class _Invalid(Exception):
    """A bad value; the checker turns it into a ConfigError at the key being read."""


_MISSING: Any = object()
_REQUIRED: Any = object()


def _describe(value: object) -> str:
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, int):
        return f"an integer ({value})"
    if isinstance(value, float):
        return f"a float ({value})"
    if isinstance(value, str):
        return f"a string ({value!r})"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, datetime):
        return "a date-time"
    if isinstance(value, date):
        return "a date"
    if isinstance(value, time):
        return "a time"
    return type(value).__name__


def _as_str(value: object) -> str:
    if not isinstance(value, str):
        raise _Invalid(f"expected a string, got {_describe(value)}")
    return value


def _as_name(value: object) -> str:
    name = _as_str(value)
    if not _NAME.fullmatch(name):
        raise _Invalid(f"expected a name of letters, digits, '_', '.', '-'; got {name!r}")
    return name


def _as_bool(value: object) -> bool:
    if not isinstance(value, bool):
        raise _Invalid(f"expected true or false, got {_describe(value)}")
    return value


def _as_int(value: object, low: int | None = None, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Invalid(f"expected an integer, got {_describe(value)}")
    if low is not None and value < low:
        raise _Invalid(f"must be at least {low}; got {value}")
    if high is not None and value > high:
        raise _Invalid(f"must be at most {high}; got {value}")
    return value


def _as_number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _Invalid(f"expected a number, got {_describe(value)}")
    if not math.isfinite(value):
        raise _Invalid(f"expected a finite number, got {value}")
    return float(value)


def _as_duration(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise _Invalid(f"expected a duration like {DURATION_EXAMPLE}; got {_describe(value)}")
    try:
        return parse_duration(value)
    except ValueError as error:
        raise _Invalid(str(error)) from None


def _positive_duration(value: object) -> float:
    seconds = _as_duration(value)
    if seconds <= 0:
        raise _Invalid(f"must be longer than 0s; got {value!r}")
    return seconds


def _as_size(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise _Invalid(f"expected a size like 3901 or 4KiB; got {_describe(value)}")
    try:
        return parse_size(value)
    except ValueError as error:
        raise _Invalid(str(error)) from None


def _as_data_size(value: object) -> DataSize:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise _Invalid(f"expected a size like 256GiB or 4xRAM; got {_describe(value)}")
    try:
        return DataSize.parse(value)
    except ValueError as error:
        raise _Invalid(str(error)) from None


def _as_statistic(value: object) -> str:
    name = _as_str(value)
    if not is_statistic(name):
        raise _Invalid(
            f"unknown statistic {name!r}; expected one of {', '.join(STATISTICS)} "
            "or a quantile qNN / qNN.N"
        )
    return name


def _window(value: object) -> float:
    seconds = _positive_duration(value)
    if seconds % 60:
        raise _Invalid(
            f"a window is made of whole minutes (minute records); got {format_duration(seconds)}"
        )
    return seconds


def _choice(choices: Sequence[str]) -> Callable[[object], str]:
    def convert(value: object) -> str:
        text = _as_str(value)
        if text not in choices:
            raise _Invalid(
                f"expected one of {', '.join(repr(c) for c in choices)}; got {text!r}"
                + _suggestion(text, choices)
            )
        return text

    return convert


def _suggestion(word: str, known: Sequence[str]) -> str:
    import difflib  # only on a mistake: not imported by every command

    close = difflib.get_close_matches(word, list(known), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def _expand_home(text: str, environ: Mapping[str, str]) -> str:
    if text == "~" or text.startswith("~/"):
        return str(_home(environ)) + text[1:]
    return os.path.expanduser(text)


def _parse_listen(value: object) -> tuple[str, int]:
    text = _as_str(value).strip()
    example = "expected host:port such as 127.0.0.1:9877 or [::1]:9877"
    match = re.fullmatch(r"\[([^\]]*)\]:(\d+)", text) or re.fullmatch(r"([^:\[\]]*):(\d+)", text)
    if match is None:
        raise _Invalid(f"{example}; got {text!r}")
    host, port = match.group(1), int(match.group(2))
    if not host:
        raise _Invalid(f"name the address to bind explicitly, e.g. 0.0.0.0:{port}; got {text!r}")
    if text.startswith("["):
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise _Invalid(f"{host!r} is not an IPv6 address; {example}") from None
    elif re.fullmatch(r"[\d.]+", host):
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            raise _Invalid(f"{host!r} is not an IPv4 address; {example}") from None
    elif not _HOSTNAME.fullmatch(host):
        raise _Invalid(f"{host!r} is not an address or host name; {example}")
    if not 1 <= port <= 65535:
        raise _Invalid(f"port must be 1..65535; got {port}")
    return host, port


_TOP_KEYS = (
    "host",
    "interval",
    "database",
    "windows",
    "statistics",
    "retention",
    "histogram_scale",
    "abandon_after",
    "baseline",
    "target",
    "metrics",
    "alert",
)
_BASELINE_KEYS = ("period", "expected", "provisional_after")
_TARGET_KEYS = ("name", "path", "data_size", "pool_files", "pool_dirs", "object_size")
_METRICS_KEYS = ("listen",)
_ALERT_KEYS = (
    "name",
    "target",
    "op",
    "statistic",
    "window",
    "above",
    "critical",
    "for",
    "clear_for",
    "repeat",
    "kind",
    "action",
)
_ACTION_KEYS = {
    "command": ("type", "argv", "timeout"),
    "webhook": ("type", "url", "token_file", "token_env", "timeout"),
    "email": (
        "type",
        "to",
        "from",
        "smtp_host",
        "smtp_port",
        "starttls",
        "credentials_file",
        "timeout",
    ),
}
_ACTION_TIMEOUT = {"command": 30.0, "webhook": 10.0, "email": 30.0}


class _Checker:
    """Walks the parsed document, collecting every mistake with its key and line."""

    def __init__(
        self, source: Path | None, locator: _Locator | None, environ: Mapping[str, str]
    ) -> None:
        self.source = source
        self.locator = locator
        self.environ = environ
        self.errors: list[ConfigError] = []
        self.target_names: list[str] = []
        self.host = ""
        base = Path(os.path.abspath(source)).parent if source is not None else Path.cwd()
        self.base_dir = base

    # ---- reporting

    def error(self, path: KeyPath, message: str) -> None:
        line = self.locator.line_of(path) if self.locator is not None else None
        self.errors.append(
            ConfigError(message, path=self.source, line=line, key=format_key(path) or None)
        )

    def raise_if_errors(self) -> None:
        if not self.errors:
            return
        errors = sorted(self.errors, key=lambda e: (e.line is None, e.line or 0))
        if len(errors) == 1:
            raise errors[0]
        raise ConfigErrors(errors)

    def unknown_keys(self, table: Mapping[str, Any], known: Sequence[str], path: KeyPath) -> None:
        for key in table:
            if key not in known:
                hint = _suggestion(key, known) or f"; known keys: {', '.join(known)}"
                self.error((*path, key), f"unknown key {key!r}{hint}")

    def get(
        self,
        table: Mapping[str, Any],
        key: str,
        path: KeyPath,
        convert: Callable[[Any], Any],
        default: Any = _MISSING,
    ) -> Any:
        """``convert(table[key])``, the default when absent; _MISSING after an error."""
        if key not in table:
            if default is _REQUIRED:
                self.error((*path, key), "missing; this key is required")
                return _MISSING
            return default
        try:
            return convert(table[key])
        except _Invalid as error:
            self.error((*path, key), str(error))
            return _MISSING

    def table(self, data: Mapping[str, Any], key: str, path: KeyPath) -> dict[str, Any] | None:
        value = data.get(key)
        if value is None:
            return None
        if not isinstance(value, dict):
            self.error((*path, key), f"expected a table [{key}], got {_describe(value)}")
            return None
        return value

    def array_of_tables(self, data: Mapping[str, Any], key: str) -> list[tuple[int, dict]]:
        value = data.get(key)
        if value is None:
            return []
        if isinstance(value, dict):
            self.error(
                (key,),
                f"expected [[{key}]] entries (two brackets: an array of tables), got a table",
            )
            return []
        if not isinstance(value, list):
            self.error((key,), f"expected [[{key}]] entries, got {_describe(value)}")
            return []
        entries = []
        for index, entry in enumerate(value, start=1):
            if isinstance(entry, dict):
                entries.append((index, entry))
            else:
                self.error((key, index), f"expected a table, got {_describe(entry)}")
        return entries

    def path_value(self, value: object, *, relative_ok: bool) -> Path:
        text = _as_str(value)
        if not text.strip():
            raise _Invalid("expected a path, got an empty string")
        path = Path(_expand_home(text, self.environ))
        if not path.is_absolute():
            if not relative_ok:
                raise _Invalid(f"must be an absolute path; got {text!r}")
            path = self.base_dir / path
        return path

    def list_of(
        self, data: Mapping[str, Any], key: str, convert: Callable[[Any], Any], default: tuple
    ) -> tuple:
        if key not in data:
            return default
        value = data[key]
        if not isinstance(value, list):
            self.error((key,), f"expected an array, got {_describe(value)}")
            return default
        if not value:
            self.error((key,), "must not be empty")
            return default
        items = []
        for index, item in enumerate(value, start=1):
            try:
                converted = convert(item)
            except _Invalid as error:
                self.error((key, index), str(error))
                continue
            if converted in items:
                self.error((key, index), f"{item!r} is listed twice")
                continue
            items.append(converted)
        return tuple(items)

    # ---- sections

    def config(self, data: Mapping[str, Any]) -> Config | None:
        self.unknown_keys(data, _TOP_KEYS, ())
        host = self.get(data, "host", (), _as_name, None)
        if host is None:
            host = os.uname().nodename
        elif host in (".", ".."):
            self.error(("host",), f"not usable as a directory name: {host!r}")
        self.host = host
        interval = self.get(data, "interval", (), _positive_duration, DEFAULT_INTERVAL)
        if interval is not _MISSING and interval > 60:
            self.error(("interval",), f"must be at most 1m; got {format_duration(interval)}")
        database = self.get(
            data,
            "database",
            (),
            lambda v: self.path_value(v, relative_ok=True),
            default_database(self.environ),
        )
        windows = self.list_of(data, "windows", _window, DEFAULT_WINDOWS)
        statistics = self.list_of(data, "statistics", _as_statistic, DEFAULT_STATISTICS)
        retention = self.get(data, "retention", (), _as_duration, DEFAULT_RETENTION)
        if retention is not _MISSING and retention < 3600:
            self.error(("retention",), f"must be at least 1h; got {format_duration(retention)}")
        scale = self.get(data, "histogram_scale", (), lambda v: _as_int(v, 0, 8), DEFAULT_SCALE)
        abandon_after = self.get(data, "abandon_after", (), _positive_duration,
                                 DEFAULT_ABANDON_AFTER)
        baseline = self.baseline(data)
        targets = self.targets(data)
        metrics = self.metrics(data)
        alerts = self.alerts(data, self.target_names)
        if self.errors:
            return None
        return Config(
            source=self.source,
            host=host,
            interval=interval,
            database=database,
            windows=tuple(windows),
            statistics=tuple(statistics),
            baseline=baseline,
            targets=tuple(targets),
            metrics=metrics,
            alerts=tuple(alerts),
            retention=retention,
            scale=scale,
            abandon_after=abandon_after,
        )

    def baseline(self, data: Mapping[str, Any]) -> BaselineConfig:
        table = self.table(data, "baseline", ())
        if table is None:
            return BaselineConfig()
        path: KeyPath = ("baseline",)
        self.unknown_keys(table, _BASELINE_KEYS, path)
        default = BaselineConfig()
        period = self.get(table, "period", path, _choice(("month",)), default.period)
        expected = self.get(table, "expected", path, _choice(("same", "median")), default.expected)
        provisional = self.get(
            table, "provisional_after", path, _as_duration, default.provisional_after
        )
        return BaselineConfig(period=period, expected=expected, provisional_after=provisional)

    def targets(self, data: Mapping[str, Any]) -> list[Target]:
        entries = self.array_of_tables(data, "target")
        if data.get("target") in (None, []):
            self.error((), "no [[target]] defined; add at least one [[target]] with name and path")
            return []
        targets: list[Target] = []
        names: dict[str, int] = {}
        paths: dict[Path, int] = {}
        for index, table in entries:
            path: KeyPath = ("target", index)
            before = len(self.errors)
            self.unknown_keys(table, _TARGET_KEYS, path)
            name = self.get(table, "name", path, _as_name, _REQUIRED)
            if name is not _MISSING:
                if name in names:
                    self.error(
                        (*path, "name"), f"{name!r} is already the name of target[{names[name]}]"
                    )
                else:
                    names[name] = index
                    # Known even when the entry has other errors: alerts naming it are fine.
                    self.target_names.append(name)
            directory = self.get(
                table, "path", path, lambda v: self.path_value(v, relative_ok=False), _REQUIRED
            )
            refusal = None if directory is _MISSING else unsafe_target_path(directory,
                                                                            self.environ)
            if refusal is not None:
                self.error((*path, "path"), refusal)
            elif directory is not _MISSING:
                normal = Path(os.path.normpath(directory))
                if normal in paths:
                    self.error(
                        (*path, "path"),
                        f"same directory as target[{paths[normal]}]; their workspaces would clash",
                    )
                else:
                    paths[normal] = index
            data_size = self.get(table, "data_size", path, _as_data_size, DEFAULT_DATA_SIZE)
            pool_files = self.get(table, "pool_files", path, lambda v: _as_int(v, 1), 100_000)
            pool_dirs = self.get(table, "pool_dirs", path, lambda v: _as_int(v, 1), 10)
            if pool_files is not _MISSING and pool_dirs is not _MISSING and pool_files % pool_dirs:
                self.error(
                    (*path, "pool_files"),
                    f"must be a multiple of pool_dirs ({pool_dirs}): each directory holds "
                    "pool_files / pool_dirs objects, as MD-Workbench places them",
                )
            object_size = self.get(table, "object_size", path, _as_size, 3901)
            if object_size is not _MISSING and object_size < 1:
                self.error((*path, "object_size"), "must be at least 1 byte")
            if len(self.errors) == before:
                targets.append(
                    Target(name, directory, data_size, pool_files, pool_dirs, object_size)
                )
        return targets

    def metrics(self, data: Mapping[str, Any]) -> MetricsConfig | None:
        table = self.table(data, "metrics", ())
        if table is None:
            return None
        path: KeyPath = ("metrics",)
        self.unknown_keys(table, _METRICS_KEYS, path)
        listen = self.get(table, "listen", path, _parse_listen, ("127.0.0.1", 9877))
        if listen is _MISSING:
            return None
        return MetricsConfig(listen_host=listen[0], listen_port=listen[1])

    def alerts(self, data: Mapping[str, Any], target_names: list[str]) -> list[AlertRule]:
        rules: list[AlertRule] = []
        names: dict[str, int] = {}
        for index, table in self.array_of_tables(data, "alert"):
            path: KeyPath = ("alert", index)
            before = len(self.errors)
            self.unknown_keys(table, _ALERT_KEYS, path)
            name = self.get(table, "name", path, _as_name, _REQUIRED)
            if name is not _MISSING:
                if name in names:
                    self.error(
                        (*path, "name"), f"{name!r} is already the name of alert[{names[name]}]"
                    )
                names[name] = index
            targets = self.patterns(table, "target", path, target_names, "[[target]]")
            ops = self.patterns(table, "op", path, OPS, "op")
            kind = self.get(table, "kind", path, _choice(ALERT_KINDS), "slowdown")
            statistic = self.get(
                table,
                "statistic",
                path,
                _as_statistic,
                _REQUIRED if kind == "slowdown" else "median",
            )
            window = self.get(table, "window", path, _window, _REQUIRED)
            threshold = {
                "slowdown": self.slowdown_threshold,
                "error_rate": self.fraction_threshold,
                "stuck": _positive_duration,
            }.get(kind)
            above = critical = _MISSING
            if threshold is not None:
                above = self.get(table, "above", path, threshold, None)
                critical = self.get(table, "critical", path, threshold, None)
                if above is None and critical is None:
                    self.error((*path, "above"), "missing; give above, critical or both")
                elif (
                    above not in (None, _MISSING)
                    and critical not in (None, _MISSING)
                    and critical < above
                ):
                    self.error(
                        (*path, "critical"), f"must be >= above ({above:g}); got {critical:g}"
                    )
            for_ = self.get(table, "for", path, _as_duration, 0.0)
            clear_for = self.get(table, "clear_for", path, _as_duration, None)
            repeat = self.get(table, "repeat", path, _positive_duration, None)
            actions = self.actions(table, path)
            if len(self.errors) != before:
                continue
            rules.append(
                AlertRule(
                    name=name,
                    targets=targets,
                    ops=ops,
                    statistic=statistic,
                    window=window,
                    above=above,
                    critical=critical,
                    for_=for_,
                    clear_for=window if clear_for is None else clear_for,
                    repeat=repeat,
                    kind=kind,
                    actions=actions,
                )
            )
        return rules

    @staticmethod
    def slowdown_threshold(value: object) -> float:
        number = _as_number(value)
        if number <= 0:
            raise _Invalid(f"a slowdown threshold must be > 0; got {value}")
        return number

    @staticmethod
    def fraction_threshold(value: object) -> float:
        number = _as_number(value)
        if not 0 <= number < 1:
            raise _Invalid(f"an error rate is a fraction: expected 0 <= above < 1; got {value}")
        return number

    def patterns(
        self,
        table: Mapping[str, Any],
        key: str,
        path: KeyPath,
        names: Sequence[str],
        what: str,
    ) -> tuple[str, ...]:
        """A name/glob or a list of them, each matching at least one of ``names``."""
        value = table.get(key, "*")
        values = value if isinstance(value, list) else [value]
        if isinstance(value, list) and not value:
            self.error((*path, key), "must not be empty")
        patterns = []
        for position, pattern in enumerate(values, start=1):
            where = (*path, key, position) if isinstance(value, list) else (*path, key)
            if not isinstance(pattern, str) or not pattern:
                self.error(where, f"expected a name or glob, got {_describe(pattern)}")
                continue
            if names and not any(fnmatchcase(name, pattern) for name in names):
                self.error(
                    where,
                    f"{pattern!r} matches no {what}; known: {', '.join(names)}"
                    + _suggestion(pattern, names),
                )
                continue
            patterns.append(pattern)
        return tuple(patterns)

    def actions(self, table: Mapping[str, Any], path: KeyPath) -> tuple[ActionConfig, ...]:
        if "action" not in table:
            self.error(
                (*path, "action"),
                'missing; e.g. action = { type = "command", argv = ["/path/to/program", '
                '"{target}"] }',
            )
            return ()
        value = table["action"]
        if isinstance(value, dict):
            entries = [((*path, "action"), value)]
        elif isinstance(value, list) and value:
            entries = []
            for index, entry in enumerate(value, start=1):
                if isinstance(entry, dict):
                    entries.append(((*path, "action", index), entry))
                else:
                    self.error(
                        (*path, "action", index), f"expected a table, got {_describe(entry)}"
                    )
        else:
            self.error(
                (*path, "action"),
                f"expected an inline table or a list of them, got {_describe(value)}",
            )
            return ()
        actions = []
        for where, entry in entries:
            action = self.action(entry, where)
            if action is not None:
                actions.append(action)
        return tuple(actions)

    def action(self, table: Mapping[str, Any], path: KeyPath) -> ActionConfig | None:
        kind = self.get(table, "type", path, _choice(ACTION_TYPES), _REQUIRED)
        if kind is _MISSING:
            return None
        self.unknown_keys(table, _ACTION_KEYS[kind], path)
        before = len(self.errors)
        options: dict[str, Any] = {}
        options["timeout"] = self.get(
            table, "timeout", path, _positive_duration, _ACTION_TIMEOUT[kind]
        )
        if kind == "command":
            options["argv"] = self.get(table, "argv", path, _argv, _REQUIRED)
        elif kind == "webhook":
            options["url"] = self.get(table, "url", path, _http_url, _REQUIRED)
            options["token_file"] = self.get(
                table, "token_file", path, lambda v: self.path_value(v, relative_ok=True), None
            )
            options["token_env"] = self.get(table, "token_env", path, _env_name, None)
            if "token_file" in table and "token_env" in table:
                self.error((*path, "token_env"), "give token_file or token_env, not both")
        else:
            to = self.get(table, "to", path, _recipients, _REQUIRED)
            options["to"] = to
            sender = self.get(table, "from", path, _address, None)
            options["from"] = f"slowdown@{self.host}" if sender is None else sender
            options["smtp_host"] = self.get(table, "smtp_host", path, _as_str, "localhost")
            options["smtp_port"] = self.get(
                table, "smtp_port", path, lambda v: _as_int(v, 1, 65535), 25
            )
            options["starttls"] = self.get(table, "starttls", path, _as_bool, False)
            options["credentials_file"] = self.get(
                table,
                "credentials_file",
                path,
                lambda v: self.path_value(v, relative_ok=True),
                None,
            )
        if len(self.errors) != before:
            return None
        return ActionConfig(type=kind, options=options)


def _argv(value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(a, str) for a in value):
        raise _Invalid(
            "expected an array of strings, the program and its arguments (run without a "
            f'shell), e.g. ["/usr/local/bin/open-ticket", "{{target}}"]; got {_describe(value)}'
        )
    if not value or not value[0]:
        raise _Invalid("must name a program: the array is empty")
    return tuple(value)


def _http_url(value: object) -> str:
    url = _as_str(value)
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise _Invalid(f"expected an http:// or https:// URL; got {url!r}")
    return url


def _env_name(value: object) -> str:
    name = _as_str(value)
    if not _ENV_NAME.fullmatch(name):
        raise _Invalid(f"expected an environment variable name; got {name!r}")
    return name


def _address(value: object) -> str:
    text = _as_str(value).strip()
    if "@" not in text or any(c.isspace() for c in text):
        raise _Invalid(f"expected an e-mail address; got {text!r}")
    return text


def _recipients(value: object) -> tuple[str, ...]:
    if isinstance(value, list):
        if not value:
            raise _Invalid("must name at least one address")
        return tuple(_address(v) for v in value)
    return (_address(value),)


def validate(
    data: Mapping[str, Any],
    *,
    path: Path | None = None,
    text: str | None = None,
    environ: Mapping[str, str] = os.environ,
) -> Config:
    """The Config for a parsed document, or ConfigError / ConfigErrors listing every mistake.

    ``text`` is the source the document came from, for line numbers; ``path`` names the
    file in errors and is the directory relative paths are taken from.
    """
    checker = _Checker(path, _Locator(text) if text is not None else None, environ)
    config = checker.config(data)
    checker.raise_if_errors()
    assert config is not None
    return config
