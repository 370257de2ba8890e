"""Finding the configuration file, reading it and parsing its TOML.

The file is ``--config``, else ``$SLOWDOWN_CONFIG`` (both must exist), else the user's
``~/.config/slowdown/slowdown.toml``, else ``/etc/slowdown/slowdown.toml``, else none at
all (the built-in :func:`default_config`). A file that cannot be read, is not UTF-8 or is not
TOML gives one ConfigError with its line; what it says is then checked by ``validate``.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from slowdown.analysis.config.checks import validate
from slowdown.analysis.config.defaults import (
    SYSTEM_CONFIG_PATH,
    default_config,
    default_config_paths,
)
from slowdown.analysis.config.errors import ConfigError
from slowdown.analysis.config.model import Config

if TYPE_CHECKING:
    import click

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python < 3.11 only
    import tomli as tomllib


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


def loads(text: str, path: Path | None = None, environ: Mapping[str, str] = os.environ, *,
          targets_required: bool = True) -> Config:
    """Parse and validate configuration text; ``path`` names it in errors and anchors
    relative paths."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise _syntax_error(error, text, path) from None
    return validate(data, path=path, text=text, environ=environ,
                    targets_required=targets_required)


def load_config(path: str | Path, environ: Mapping[str, str] = os.environ, *,
                targets_required: bool = True) -> Config:
    """Read, parse and validate one configuration file (see :func:`validate` for
    ``targets_required``)."""
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
    return loads(text, path, environ, targets_required=targets_required)


def load(
    explicit: str | Path | None = None,
    environ: Mapping[str, str] = os.environ,
    *,
    system_path: Path = SYSTEM_CONFIG_PATH,
    targets_required: bool = True,
) -> Config:
    """Find the configuration file and load it; without any file, :func:`default_config`."""
    path = find_config_path(explicit, environ, system_path=system_path)
    if path is None:
        return default_config(environ)
    return load_config(path, environ, targets_required=targets_required)


def one_config(values: tuple[Path, ...]) -> Path | None:
    """The one file ``--config`` names on one side of a command (given any number of times),
    for ``slowdown`` and ``slowdown-probe`` alike; a usage error when it names two: click
    alone would take the last in silence."""
    import click

    files = list(dict.fromkeys(os.path.abspath(v) for v in values))
    if len(files) > 1:
        raise click.UsageError(f"--config names two files: {values[0]} and "
                               f"{next(v for v in values if os.path.abspath(v) != files[0])}; "
                               "give one")
    return values[0] if values else None


def add_config_after(command: click.Command,
                     callback: Callable[[click.Context, click.Parameter, tuple[Path, ...]],
                                        None]) -> None:
    """Give ``command`` a ``--config`` of its own, read by ``callback``, unless it has one:
    ``slowdown check --config X`` means ``slowdown --config X check`` (and so for
    ``slowdown-probe``)."""
    import click

    if any(isinstance(p, click.Option) and "--config" in p.opts for p in command.params):
        return
    command.params.append(click.Option(
        ["--config", "config_after"], type=click.Path(path_type=Path), multiple=True,
        expose_value=False, is_eager=True, callback=callback, metavar="FILE",
        help="Configuration file (the same as --config before the command)."))


def check_config_after(ctx: click.Context, before: Path | None, after: Path) -> None:
    """The file ``--config`` names after the command may be the group's (``before``) again,
    not another one: a usage error naming both."""
    import click

    if before is not None and os.path.abspath(before) != os.path.abspath(after):
        raise click.UsageError(f"--config names two files: {before} before the command and "
                               f"{after} after it; give one", ctx=ctx)
