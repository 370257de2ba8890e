"""Shared fixtures: real filesystems with faults (FUSE, tmpfs, loop-mounted ext4).

``tests/long/`` holds the full-length fault and soak runs; they are collected only with
``--long`` (CI runs the short forms; see docs/RELIABILITY.md for the long runs' results).
"""

from __future__ import annotations

import os
import time
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
    """The testbeds' tests (GlusterFS, CephFS) last: by then the other interpreters' suites that
    CI runs beside this one have ended, and the testbeds' quiet minutes are as quiet as they
    get."""
    items.sort(key=lambda item: item.get_closest_marker("testbed") is not None)


QUIET_AFTER = "SLOWDOWN_TESTBED_AFTER"  # a file whose existence says the machine's other jobs ended
QUIET_WAIT = 180.0  # seconds at most, once: the first testbed test's timeout (420 s) counts it
_waited: list[bool] = []


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item) -> None:
    """Before the first testbed's test, wait (once, up to 3 minutes) for the file that
    $SLOWDOWN_TESTBED_AFTER names: a runner with jobs of its own beside the suite (CI's
    package build) says so when they end, and a quiet minute is measured on a quiet machine."""
    flag = os.environ.get(QUIET_AFTER)
    if not flag or _waited or item.get_closest_marker("testbed") is None:
        return
    _waited.append(True)
    deadline = time.monotonic() + QUIET_WAIT
    while not os.path.exists(flag) and time.monotonic() < deadline:
        time.sleep(1.0)
