"""One CliRunner for every test that reads stderr apart from stdout, on any click."""

from __future__ import annotations

from click.testing import CliRunner


def runner() -> CliRunner:
    """click < 8.2 (the one Python 3.9 gets) mixes stderr into the output unless told not to;
    8.2 always keeps them apart and no longer takes the argument."""
    try:
        return CliRunner(mix_stderr=False)
    except TypeError:
        return CliRunner()
