"""The README's first run works for a new account: its main command, run as written with an
empty HOME and no configuration, gives `slowdown` a line of numbers for every target.

The README's block is the one place the first-run commands are written: `.ci/first-run` runs
the whole block (the install included) in CI; this test runs its last line, the service, with
the commands of the environment under test.
"""

from __future__ import annotations

import pytest

from tests.kit.scenes.first_run import first_run_block


def test_the_readme_block_installs_then_runs_the_service_on_the_default():
    block = first_run_block()
    assert block[-1] == "slowdown-probe run --prepare"
    assert any("pip install ." in line for line in block[:-1])
    assert all("sudo" not in line for line in block)


@pytest.mark.slow
@pytest.mark.scene("first_run")  # tests/kit/scenes/first_run.py, beside the tests after it
def test_the_main_command_gives_numbers_for_every_target_on_a_fresh_account(scene_outcome):
    scene_outcome()
