"""Where the md rotation goes on after a stop, and what a crash left behind, repaired.

md-workbench's notion of a position is a round `pos`: every data set holds the objects
file-<pos> .. file-<pos + P - 1>. The probe moves one object per tick, so between two rounds
the first data sets are one object ahead. `md-workbench -2` continues without an error from
any round `p` whose object file-<p> is in every data set; mid-round (and during the step
itself) that is every `p` in [i + 1, i + P - 1] for the round `i` in progress, so the probe
writes `pos: i + 1` when round `i` is about to begin: after the timed ops of the last step of
round `i - 1`, and at a start (`status_ahead`; one small write every D ticks). A clean stop
finishes the round and writes the exact round instead.

A crash (kill -9, a power cut) leaves the pool mid-round. Two cases at the next start:

- the status file still holds our step line (no md-workbench run since): `recover` moves on
  from that step to the first object that still exists, and `repair_created` makes sure the
  objects the passed steps created are whole (a kill between create and write leaves a short
  one, a kill between delete and create none);
- md-workbench ran from `pos: i + 1` and rewrote the file: the data sets the crashed round had
  not reached still hold file-<i> (below md-workbench's window) and lack file-<i + P> (a hole
  the rotation would find P rounds later). `clear_leftovers` lists the data sets once, removes
  the objects below the window (only `file-<n>` names with n >= first_index: objects of this
  pool that the rotation has passed) and rewrites file-<i + P> where it is missing or short.
"""

from __future__ import annotations

import contextlib
import os
import stat

from slowdown.probe.layout.md_pool_layout import PoolLayout, object_index

_REWRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC


def status_ahead(layout: PoolLayout, step: int) -> int:
    """The round md-workbench can continue from during step `step` and after it."""
    return step // layout.dirs + 1


def status_valid(layout: PoolLayout, step: int, pos: int | None) -> bool:
    """True when `pos` stays a round md-workbench continues from through step `step`."""
    if pos is None:
        return False
    i = step // layout.dirs
    return i + 1 <= pos <= max(i + 1, i + layout.per_dir - 1)


def recover(layout: PoolLayout, start: int, max_scan: int = 4096) -> int:
    """The first step at or after `start` whose object still exists.

    lstat the next objects one by one, at most `max_scan`; past that, list the data sets once
    (D readdirs) for the lowest index still present. An empty pool keeps the position (the
    steps recreate the objects). Only a missing object (ENOENT) is skipped over; any other
    error stops the search, so a sick filesystem is measured, not walked around.
    """
    for k in range(start, start + max_scan):
        d, i = layout.oldest(k)
        try:
            os.lstat(layout.object_path(d, i))
        except FileNotFoundError:
            continue
        except OSError:
            pass
        return k
    best: int | None = None
    low = start // layout.dirs
    for d in range(layout.dirs):
        try:
            with os.scandir(layout.dir_paths[d]) as it:
                indices = [i for i in (object_index(e.name) for e in it)
                           if i is not None and i >= low]
        except OSError:
            continue
        for i in sorted(indices):
            k = i * layout.dirs + d
            if k >= start:
                best = k if best is None else min(best, k)
                break
    return start if best is None else best


def rewrite_if_broken(layout: PoolLayout, d: int, i: int, content: bytes) -> bool:
    """Write object `i` of data set `d` whole when it is missing or not a whole object
    (untimed repair); never through a symlink. True when it was rewritten."""
    path = layout.object_path(d, i)
    try:
        st = os.lstat(path)
        if stat.S_ISREG(st.st_mode) and st.st_size == layout.object_size:
            return False
        if not stat.S_ISREG(st.st_mode):
            return False  # not ours to touch; the rotation reports it when it gets there
    except FileNotFoundError:
        pass
    except OSError:
        return False
    try:
        fd = os.open(path, _REWRITE_FLAGS, 0o644)
    except OSError:
        return False
    try:
        view = memoryview(content)
        while view:
            view = view[os.write(fd, view):]
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(path)
        return False
    finally:
        os.close(fd)
    return True


def repair_created(layout: PoolLayout, start: int, end: int, content: bytes) -> int:
    """Make whole the objects created by the steps [start, end) (at most one per step);
    return how many were rewritten."""
    return sum(rewrite_if_broken(layout, k % layout.dirs, k // layout.dirs + layout.per_dir,
                                 content) for k in range(start, end))


def clear_leftovers(layout: PoolLayout, step: int, first_index: int, content: bytes) -> int:
    """After md-workbench continued from a crashed round: remove the objects below the
    window of `step`, fill the hole their round left; return how many objects changed."""
    below: list[tuple[int, int]] = []
    for d in range(layout.dirs):
        low = layout.window(step, d).start
        try:
            with os.scandir(layout.dir_paths[d]) as it:
                for entry in it:
                    i = object_index(entry.name)
                    if i is not None and first_index <= i < low and entry.is_file(
                            follow_symlinks=False):
                        below.append((d, i))
        except OSError:
            continue
    changed = 0
    for d, i in below:
        with contextlib.suppress(OSError):
            os.unlink(layout.object_path(d, i))
            changed += 1
    for i in sorted({i for _, i in below}):
        for d in range(layout.dirs):
            if (i + layout.per_dir) in layout.window(step, d):
                changed += rewrite_if_broken(layout, d, i + layout.per_dir, content)
    return changed
