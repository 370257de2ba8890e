"""A fleet of host databases for the read commands: the hours they hold and `slowdown` run
in-process on them."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from slowdown.analysis.cli.main import main
from testdata.datakit import fill, lognormal, utc

NOV = utc(2026, 11, 1)


HOUR = 3600


AT = "2026-11-01T02:00:00Z"  # two hours after NOV


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return result.exit_code, result.output


def fill_three_hosts(tmp_path: Path) -> Path:
    """n0 and n1 report for two hours; n2 stopped reporting after 30 minutes."""
    for i, minutes in enumerate((120, 120, 30)):
        fill(tmp_path / f"n{i}.db", NOV, minutes, lognormal(0.001 * (i + 1), 0.3),
             host=f"n{i}", ops=("md-stat", "md-read"), seed=i)
    return tmp_path
