"""Shared fixtures: real filesystems with faults (FUSE, tmpfs, loop-mounted ext4).

``tests/long/`` holds the full-length fault and soak runs; they are collected only with
``--long`` (CI runs the short forms; see docs/RELIABILITY.md for the long runs' results).
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.register_assert_rewrite("tests.kit.scenes")  # their asserts say what they compared

pytest_plugins = ["tests.kit.fixtures_fs", "tests.kit.fiosample", "tests.kit.configkit",
                  "tests.kit.scenes.runs"]

LONG = Path(__file__).with_name("long")


def pytest_addoption(parser) -> None:
    parser.addoption("--long", action="store_true", help="also run tests/long (minutes each)")


def pytest_ignore_collect(collection_path: Path, config) -> bool | None:
    if not config.getoption("--long") and LONG in (collection_path, *collection_path.parents):
        return True
    return None


def pytest_collection_modifyitems(config, items: list) -> None:
    """The GlusterFS testbed's tests last: by then the other interpreters' suites that CI runs
    beside this one have ended, and the testbed's quiet minutes are as quiet as they get."""
    items.sort(key=lambda item: item.get_closest_marker("testbed") is not None)
