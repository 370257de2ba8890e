"""`slowdown-probe systemd-dropin`: what the hardened units may write, from the configuration.

The units run with ``ProtectSystem=strict``: the whole file system is read-only to them but
for the state directory and the paths a drop-in lists. Targets are the user's choice, so the
drop-in is generated from the configuration, as the service will read it:

- ``slowdown-probe.service`` (the default) may write each target's workspace
  ``<path>/.slowdown/<host>`` and nothing else of the target: on a shared filesystem
  ``.slowdown/`` holds the workspace of every node, and only this node's is the service's.
  The database's directory is added when it is not in the state directory, and the
  directories the service publishes to (``[publish] dir``, ``[metrics] textfile``'s).
- ``slowdown-probe-prepare.service`` (``--prepare``) may write each target directory: a
  first prepare creates ``.slowdown/<host>`` in it. The directory must exist, owned by the
  service user (prepare could create it, but not in a parent the sandbox keeps read-only).

Target paths carry systemd's ``-`` prefix: a target whose filesystem is missing at start
does not keep the unit from starting; that target reports errors and the others are probed.
A path under ``/home``, ``/root`` or ``/run/user`` turns ``ProtectHome=yes`` (which would
hide it) into ``read-only``; a path under ``/tmp`` or ``/var/tmp`` is refused, as each unit
has a ``/tmp`` of its own there.
"""

from __future__ import annotations

import os
import pwd
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from slowdown.analysis.atomic_write import temp_beside
from slowdown.analysis.config import (
    SYSTEM_CONFIG_PATH,
    Config,
    ConfigError,
    find_config_path,
    load_config,
)

SERVICE_USER = "slowdown"
STATE_DIRECTORY = Path("/var/lib/slowdown")  # StateDirectory=slowdown
SERVICE_UNIT = "slowdown-probe.service"
PREPARE_UNIT = "slowdown-probe-prepare.service"
HOME_DIRS = (Path("/home"), Path("/root"), Path("/run/user"))  # what ProtectHome= covers
PRIVATE_TMP = (Path("/tmp"), Path("/var/tmp"))  # what PrivateTmp= replaces
EXIT_CONFIG_ERROR = 2
_SPLIT = set(" \t\n\r\"'\\")  # characters that need quoting in a unit file's path list


class DropinError(Exception):
    """The configuration asks for something the units cannot give; one line, naming the key."""


def _under(path: Path, bases: tuple[Path, ...]) -> Path | None:
    for base in bases:
        if path == base or base in path.parents:
            return base
    return None


def _printable(text: object) -> str:
    """Text for a comment line: a control character (a newline) would end the comment."""
    return "".join("?" if ord(c) < 32 or ord(c) == 127 else c for c in str(text))


def unit_path(path: Path, *, optional: bool = False) -> str:
    """A path as one word of a unit file's path list: ``%`` doubled (systemd specifiers),
    quoted when it holds blanks, quotes or backslashes; ``-`` first when it may be missing."""
    text = str(path)
    if any(ord(c) < 32 or ord(c) == 127 for c in text):
        raise DropinError(f"{text!r}: a control character cannot be written in a unit file")
    word = ("-" if optional else "") + text.replace("%", "%%")
    if _SPLIT & set(word):
        word = '"' + word.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return word


def service_environ(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment the service reads its configuration in: ``$STATE_DIRECTORY`` from
    StateDirectory= (a database left to its default lands there) and the service user's
    ``$HOME`` (for ``~`` in paths)."""
    env = dict(environ)
    env["STATE_DIRECTORY"] = str(STATE_DIRECTORY)
    try:
        env["HOME"] = pwd.getpwnam(SERVICE_USER).pw_dir
    except KeyError:
        env["HOME"] = str(STATE_DIRECTORY)  # the home slowdown.sysusers.conf gives it
    return env


def service_config(config_path: Path | None, environ: Mapping[str, str]) -> Config:
    """The configuration file that ``--config``, ``$SLOWDOWN_CONFIG`` or the search finds,
    loaded as the service loads it; ConfigError when there is none or it has mistakes."""
    path = find_config_path(config_path, environ)
    if path is None:
        raise ConfigError(f"no configuration file found; the units read {SYSTEM_CONFIG_PATH} "
                          "(or give --config)")
    return load_config(path, service_environ(environ))


@dataclass
class Dropin:
    """The drop-in of one unit: its writable paths, each with why, and what else it sets."""

    unit: str
    config: Config
    writable: list[tuple[Path, str, bool]] = field(default_factory=list)  # path, why, optional
    home: list[Path] = field(default_factory=list)  # paths ProtectHome=yes would hide
    warnings: list[str] = field(default_factory=list)

    def add(self, path: Path, why: str, *, optional: bool) -> None:
        if all(path != p for p, _, _ in self.writable):
            self.writable.append((path, why, optional))

    def render(self) -> str:
        service = self.unit == SERVICE_UNIT
        state = f" besides its state directory {STATE_DIRECTORY}" if service else ""
        command = "slowdown-probe systemd-dropin" + ("" if service else " --prepare")
        source = os.path.abspath(self.config.source) if self.config.source else "defaults"
        lines = [
            f"# {self.unit}: the paths it may write{state}.",
            f"# Made by `{command}` from {_printable(source)} for host {self.config.host}.",
            "# Make it again after changing the targets, the database or the host name, then:",
            "# systemctl daemon-reload. A leading '-': the unit starts without that path when it",
            "# is missing (a target filesystem not there); that target alone then reports errors.",
            "[Service]",
        ]
        for path, why, optional in self.writable:
            lines += [f"# {_printable(why)}",
                      f"ReadWritePaths={unit_path(path, optional=optional)}"]
        if self.home:
            lines.append(f"# {_printable(self.home[0])} lies in the home directories, which "
                         "ProtectHome=yes hides")
            lines.append("ProtectHome=read-only")
        return "\n".join(lines) + "\n"


def _alert_files(config: Config) -> list[tuple[Path, str]]:
    """Files the alert actions read or run: they must be visible in the sandbox too."""
    files: list[tuple[Path, str]] = []
    for rule in config.alerts:
        for action in rule.actions:
            options: Mapping[str, Any] = action.options
            for key in ("token_file", "credentials_file"):
                if options.get(key) is not None:
                    files.append((Path(options[key]), f"alert {rule.name}: {key}"))
            argv = options.get("argv") or ()
            if argv and os.path.isabs(argv[0]):
                files.append((Path(argv[0]), f"alert {rule.name}: argv[0]"))
    return files


def build(config: Config, *, prepare: bool = False) -> Dropin:
    """The drop-in for slowdown-probe.service, or with ``prepare`` for
    slowdown-probe-prepare.service; DropinError when the units cannot serve the config."""
    dropin = Dropin(PREPARE_UNIT if prepare else SERVICE_UNIT, config)
    install = f"install -d -o {SERVICE_USER} -g {SERVICE_USER}"
    for target in config.targets:
        root = Path(target.path)
        if prepare:
            dropin.add(root, f"target {target.name}: prepare creates .slowdown/{config.host} in it",
                       optional=True)
        else:
            dropin.add(config.workspace(target), f"target {target.name}: its workspace",
                       optional=True)
        if not os.path.isdir(root):
            dropin.warnings.append(f"target {target.name}: {root} does not exist; create it for "
                                   f"the service user: {install} {shlex.quote(str(root))}")
    if not prepare:
        database = Path(config.database)
        directory = database.parent
        if _under(directory, (STATE_DIRECTORY,)) is None:
            dropin.add(directory, f"the database {database} (with its WAL and live state)",
                       optional=False)
            if not os.path.isdir(directory):
                dropin.warnings.append(f"the database directory {directory} does not exist; "
                                       "create it for the service user: "
                                       f"{install} {shlex.quote(str(directory))}")
        if config.publish is not None:  # a shared filesystem missing at start: said later
            dropin.add(config.publish.dir, f"[publish] dir: the copy {config.host}.db",
                       optional=True)
        if config.metrics is not None and config.metrics.textfile is not None:
            dropin.add(config.metrics.textfile.parent, "[metrics] textfile: "
                       f"{config.metrics.textfile.name}, replaced by a rename", optional=True)
        if config.metrics is not None and config.metrics.serve \
                and config.metrics.listen_port < 1024:
            dropin.warnings.append(f"metrics.listen {config.metrics.listen}: a port below 1024 "
                                   "needs a capability the service does not have")
    visible = [(path, why) for path, why, _ in dropin.writable]
    if not prepare:
        visible += _alert_files(config)
    for path, why in visible:
        tmp = _under(path, PRIVATE_TMP)
        if tmp is not None:
            raise DropinError(f"{why}: {path} is under {tmp}, where each unit sees a private "
                              "directory of its own (PrivateTmp=yes); choose another place")
        unit_path(path)  # refuses what a unit file cannot hold
        if _under(path, HOME_DIRS) is not None and path not in dropin.home:
            dropin.home.append(path)
    return dropin


def write_atomically(path: Path, text: str) -> None:
    """Replace ``path`` whole (its directory made if missing): never a half-written drop-in,
    and readable by systemd whatever the umask (0644)."""
    path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    temp = temp_beside(path, text.encode())
    try:
        os.chmod(temp, 0o644)
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


@click.command("systemd-dropin")
@click.option("--prepare", is_flag=True,
              help=f"The drop-in for {PREPARE_UNIT} (the target directories themselves) "
              f"instead of {SERVICE_UNIT} (the workspaces and the database).")
@click.option("-o", "--output", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="Write it to this file, replaced whole (default: standard output).")
@click.pass_obj
def systemd_dropin(probe: Any, prepare: bool, output: Path | None) -> None:
    """Print the systemd drop-in that lets the hardened units write the targets.

    The units see the file system read-only (ProtectSystem=strict). For slowdown-probe.service
    the drop-in lists each target's workspace <path>/.slowdown/<host> and the database's
    directory when it is outside /var/lib/slowdown; for slowdown-probe-prepare.service
    (--prepare) each target directory, in which a first prepare creates .slowdown/<host>.
    Warnings (a directory to create first) go to standard error.

    \b
        slowdown-probe systemd-dropin \\
            > /etc/systemd/system/slowdown-probe.service.d/targets.conf
        slowdown-probe systemd-dropin --prepare \\
            > /etc/systemd/system/slowdown-probe-prepare.service.d/targets.conf
    """
    environ = getattr(probe, "environ", None) or os.environ
    try:
        config = service_config(getattr(probe, "config_path", None), environ)
    except ConfigError as error:
        for single in error.errors:
            click.echo(str(single), err=True)
        raise click.exceptions.Exit(EXIT_CONFIG_ERROR) from None
    try:
        dropin = build(config, prepare=prepare)
    except DropinError as error:
        click.echo(f"slowdown-probe systemd-dropin: {config.source}: {error}", err=True)
        raise click.exceptions.Exit(1) from None
    if config.source is not None and Path(os.path.abspath(config.source)) != SYSTEM_CONFIG_PATH:
        dropin.warnings.insert(0, f"made from {config.source}, but the units read "
                                  f"{SYSTEM_CONFIG_PATH}")
    for warning in dropin.warnings:
        click.echo(f"slowdown-probe systemd-dropin: warning: {warning}", err=True)
    text = dropin.render()
    if output is None:
        click.echo(text, nl=False)
    else:
        try:
            write_atomically(output, text)
        except OSError as error:
            click.echo(f"slowdown-probe systemd-dropin: {output}: {error.strerror}", err=True)
            raise click.exceptions.Exit(1) from None
