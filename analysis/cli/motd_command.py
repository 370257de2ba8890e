"""``slowdown [--config FILE] motd`` through the click group: the same notice as the quick
path of ``entry.py`` (which ``slowdown motd`` takes), for the forms that path leaves to click."""

from __future__ import annotations

import sys

import click


@click.command("motd")
@click.pass_context
def motd(ctx: click.Context) -> None:
    """The login notice: nothing while every target is normal, one line while one is slow
    ([motd] enabled; always exit 0, silent at its deadline)."""
    from slowdown.analysis.cli.motd import main

    path = (ctx.obj or {}).get("config_path")
    sys.exit(main(["--config", str(path)] if path is not None else []))


__all__ = ["motd"]
