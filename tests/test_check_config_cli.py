"""`slowdown-probe check-config` on the reference file, on a file with errors and on a missing
file, where it finds the file, and `--version`."""

from __future__ import annotations

import pytest

from slowdown.probe.command.main import main
from tests.kit.cli_runner import runner
from tests.kit.configkit import (
    MINIMAL,
    REFERENCE,
    write,
)

# --------------------------------------------------------------------------- check-config


def test_check_config_accepts_the_reference(tmp_path):
    """The reference as it is, its work target under a /lustre/work that exists here."""
    (tmp_path / "lustre" / "work").mkdir(parents=True)
    copy = tmp_path / "slowdown.toml"
    copy.write_text(REFERENCE.read_text().replace('"/lustre/', f'"{tmp_path}/lustre/'))
    result = runner().invoke(main, ["--config", str(copy), "check-config"])
    assert result.exit_code == 0, result.output
    assert f"configuration  {copy}" in result.output
    assert "target work" in result.output
    assert f"{tmp_path}/lustre/work/slowdown-probe/.slowdown/" in result.output
    assert "alerts         2 (work-slow, any-stuck)" in result.output
    assert result.output.rstrip().endswith("configuration OK")


def test_check_config_lists_every_error(tmp_path):
    text = 'interval = "0s"\n' + MINIMAL.lstrip("\n") + 'data_size = "huge"\n'
    path = write(tmp_path, text)
    result = runner().invoke(main, ["--config", str(path), "check-config"])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        f"{path}:1: interval: must be longer than 0s; got '0s'",
        f"{path}:5: target[1].data_size: expected a size like 256GiB or a multiple of RAM "
        "like 4xRAM; got 'huge'",
    ]
    assert "configuration OK" not in result.stdout


@pytest.mark.parametrize("through", ["the environment", "an argument"])
def test_check_config_finds_the_file(tmp_path, through):
    path = write(tmp_path, MINIMAL)
    if through == "the environment":
        result = runner().invoke(main, ["check-config"], env={"SLOWDOWN_CONFIG": str(path)})
    else:
        result = runner().invoke(main, ["check-config", str(path)])
    assert result.exit_code == 0, result.output
    assert f"configuration  {path}" in result.output
    assert "target home" in result.output


def test_check_config_with_a_missing_file(tmp_path):
    result = runner().invoke(main, ["--config", str(tmp_path / "nope.toml"), "check-config"])
    assert result.exit_code == 2
    assert (
        result.stderr.strip()
        == f"{tmp_path / 'nope.toml'}: configuration file not found (--config)"
    )


def test_version_option():
    result = runner().invoke(main, ["--version"])
    assert result.exit_code == 0
    assert result.output.startswith("slowdown-probe, version ")
