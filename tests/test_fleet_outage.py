"""The reading child of the fleet's copies (store/bounded.py): a call stuck in a hung FUSE
mount (tests/faultfs) times out, is left behind and never doubled; the child keeps nothing
of its parent's but its pipe."""

from __future__ import annotations

import os
import time

import pytest

from slowdown.analysis.store.bounded import (
    Unanswered,
    call_bounded,
    inherited_paths,
    stuck_children,
)
from tests.servicekit import wait_for

pytest_plugins = ["tests.fixtures_fs"]


# -- the reading child ------------------------------------------------------------------------

def test_a_read_stuck_in_a_hung_mount_times_out_and_is_not_doubled(tmp_path, faultfs):
    """A child blocked in the mount survives SIGKILL: the call times out, names what hung,
    and the next call of the same source fails at once instead of forking a second child
    behind it; once the mount answers the child ends and is reaped."""
    faultfs.hang("getattr")
    target = faultfs.mountpoint / "x"

    def stat(note):
        note(f"looking at {target}")
        return os.stat(target)

    start = time.monotonic()
    with pytest.raises(Unanswered, match=rf"^timed out after 0.5 s looking at {target}$"):
        call_bounded("copies", stat, 0.5)
    assert 0.5 <= time.monotonic() - start < 1.5
    (stuck,) = stuck_children()
    faultfs.wait_hung()
    start = time.monotonic()
    with pytest.raises(Unanswered, match=r"\(hung since \d\d:\d\d:\d\d UTC\)$") as caught:
        call_bounded("copies", stat, 0.5)
    assert caught.value.timed_out and time.monotonic() - start < 0.2
    assert stuck_children() == [stuck] and len(faultfs.hung()) == 1
    assert call_bounded("another source", lambda note: 42, 0.5) == 42
    faultfs.clear()
    wait_for(lambda: not stuck_children(), 5, what="the stuck child's end")


def open_files() -> dict[str, str]:
    """This process's descriptors and what they name (the listing's own left out)."""
    found = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            found[name] = os.readlink(f"/proc/self/fd/{name}")
        except FileNotFoundError:  # the listing's own descriptor, closed since
            continue
    return found


def test_the_reading_child_keeps_nothing_of_the_parent_but_its_pipe(tmp_path):
    """The child's descriptors: its pipe and /dev/null for 0-2; the parent's files are
    closed there (known by name, so that a file the parent has open is read by the
    parent), and a child's failure comes back as a one-line reason."""
    held = tmp_path / "held.db"
    with open(held, "w"):
        links = call_bounded("fds", lambda note: open_files(), 5)
        names = call_bounded("names", lambda note: inherited_paths(), 5)
    assert [links[str(n)] for n in (0, 1, 2)] == ["/dev/null"] * 3
    assert str(held) not in links.values() and str(held) in names
    assert len(links) == 4, links  # 0-2 and the pipe
    with pytest.raises(Unanswered, match=r"^ZeroDivisionError: division by zero$"):
        call_bounded("fails", lambda note: 1 / 0, 5)

