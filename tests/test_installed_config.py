"""The configuration file as the package installs it names no target: every command that
reads a database works beside it (a node with the package installed but not set up is where
an admin first types `slowdown --db ...`), while the measuring side refuses it, naming the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from slowdown.analysis.cli.main import main as read_main
from slowdown.probe.command.main import main as probe_main
from testdata.datakit import fill, lognormal, utc
from tests.kit.cli_runner import runner

INSTALLED = Path(__file__).resolve().parents[1] / "packaging" / "slowdown.toml"
START = utc(2026, 11, 1)
AT = "2026-11-01T01:00:00Z"


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("installed") / "n1.db"
    fill(path, START, 60, lognormal(0.001, 0.3), targets=("work",), ops=("md-stat",))
    return path


def test_the_installed_file_names_no_target() -> None:
    assert not [line for line in INSTALLED.read_text().splitlines()
                if line.strip() == "[[target]]"]


@pytest.mark.parametrize("command", [[], ["stats"], ["history"], ["trends"], ["check"]])
def test_reading_commands_work_beside_it(db: Path, command: list[str]) -> None:
    result = runner().invoke(read_main, [*command, "--db", str(db), "--at", AT],
                             env={"SLOWDOWN_CONFIG": str(INSTALLED)})
    assert "no [[target]] defined" not in result.output, result.output
    assert result.exit_code in (0, 1, 2) and "work" in result.output, result.output
    if command != ["check"]:  # check's word depends on the services' state, not the file
        assert result.exit_code == 0, result.output


def test_the_measuring_side_refuses_it_naming_the_file() -> None:
    result = runner().invoke(probe_main, ["check-config"],
                             env={"SLOWDOWN_CONFIG": str(INSTALLED)})
    assert result.exit_code == 2, result.output
    assert f"{INSTALLED}: no [[target]] defined" in result.stderr
