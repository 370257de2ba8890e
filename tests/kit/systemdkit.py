"""The project's systemd units for tests: where they are, their settings read as systemd reads
them, the drop-in command, and a configuration of two targets."""

from __future__ import annotations

import inspect
from pathlib import Path

import click
from click.testing import CliRunner

from slowdown.probe.command.main import ProbeContext

SYSTEMD = Path(__file__).resolve().parents[2] / "systemd"


SERVICE = "slowdown-probe.service"


PREPARE = "slowdown-probe-prepare.service"


OPS = ("data-read", "data-write", "md-stat", "md-read", "md-delete", "md-write")


@click.group()
@click.option("--config", "config_path", type=click.Path(path_type=Path), default=None)
@click.pass_context
def group(ctx: click.Context, config_path: Path | None) -> None:
    """Stands in for `slowdown-probe`, which hands its commands a ProbeContext."""
    ctx.obj = ProbeContext(config_path=config_path)


def run_dropin(config: Path, *args: str) -> click.testing.Result:
    separate = "mix_stderr" in inspect.signature(CliRunner.__init__).parameters
    runner = CliRunner(**({"mix_stderr": False} if separate else {}))
    return runner.invoke(group, ["--config", str(config), "systemd-dropin", *args])


def writable(text: str) -> list[str]:
    return [line.split("=", 1)[1] for line in text.splitlines()
            if line.startswith("ReadWritePaths=")]


def settings(text: str) -> dict[str, list[str]]:
    """Key -> values of a unit file (comments and section headers left out)."""
    found: dict[str, list[str]] = {}
    for line in text.splitlines():
        if line and not line.startswith(("#", ";", "[")):
            key, _, value = line.partition("=")
            found.setdefault(key.strip(), []).append(value.strip())
    return found


def two_targets(tmp_path: Path, **top: str) -> Path:
    lines = [f'{key} = "{value}"' for key, value in top.items()]
    lines += ['host = "node1"',
              "[[target]]", 'name = "home"', 'path = "/srv/slowdown test/home"',
              "[[target]]", 'name = "work"', 'path = "/lustre/work/slowdown-probe"']
    path = tmp_path / "slowdown.toml"
    path.write_text("\n".join(lines) + "\n")
    return path
