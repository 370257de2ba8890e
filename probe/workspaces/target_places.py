"""Whether ``prepare`` can make each target where the configuration puts it, for
``slowdown-probe check-config``.

``prepare`` makes the target directory itself but not its parents (only the built-in
default, a directory under the user's own data directory, has its parents made too). A
target whose parent is missing is an error when ``prepare`` would fail there, else a
warning. The looks (``lstat`` of the path, then of each parent up to one that exists) run in
a forked child given ``LOOK_TIMEOUT`` (``store/bounded.py``): a call stuck in a hung
filesystem cannot be interrupted, and a thread of check-config's own stuck there would keep
it from exiting. The paths that did not answer are kept, so that nothing else check-config
does waits for them again.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass, field
from pathlib import Path

from slowdown.analysis.config import Config, ConfigError
from slowdown.analysis.config.caveats import located
from slowdown.analysis.store.bounded import Unanswered, call_bounded
from slowdown.analysis.units import format_duration

LOOK_TIMEOUT = 2.0  # seconds one lstat may take before its filesystem is said not to answer


@dataclass
class Places:
    """What check-config says of the targets' places: errors (each a ``ConfigError``, naming
    file, line and key), warning lines, and the paths that did not answer in time."""

    errors: list[ConfigError] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    unanswered: list[str] = field(default_factory=list)


def target_places(config: Config, timeout: float = LOOK_TIMEOUT) -> Places:
    """Each target's path looked at: missing parents named, filesystems that do not answer
    said."""
    places = Places()
    for index, target in enumerate(config.targets, 1):
        key = ("target", index, "path")
        path = Path(target.path)
        found = _look_up(path, timeout)
        missing = [d for d, code in zip(path.parents, (found or [])[1:]) if code == errno.ENOENT]
        existing = path.parents[len(missing)] if found and found[-1] == 0 else None
        warning = None
        if found is None:
            places.unanswered.append(str(path))
        if found is None or found[0] not in (0, errno.ENOENT):
            warning = _unanswered(path, found[0] if found else None, timeout)
        elif missing and target.create_parents:
            warning = _made_by_prepare(missing[-1], existing)
        elif missing:  # prepare would fail: os.mkdir of the target, in no directory
            top = missing[-1]
            places.errors.append(located(config, key, (
                f"its parent {path.parent} does not exist"
                + (f" (nor does {top})" if top != path.parent else "")
                + f": prepare makes the target directory {path.name} but not its parents; "
                f"make {path.parent} on the filesystem to probe, or correct the path")))
        if warning is not None:
            places.warnings.append(f"warning: {located(config, key, warning)}")
    return places


def _look_up(path: Path, timeout: float) -> list[int] | None:
    """``lstat`` of ``path`` and of its parents up to the first that exists: 0 where one
    exists, else its errno, the last one the first that is not ENOENT (or the root). None
    when the child did not answer within ``timeout`` (it is left to the filesystem)."""
    try:
        return call_bounded(f"target path {path}", lambda note: _codes(path), timeout)
    except Unanswered:
        return None


def _codes(path: Path) -> list[int]:
    codes = []
    for directory in (path, *path.parents):
        try:
            os.lstat(directory)
            codes.append(0)
        except OSError as exc:
            codes.append(exc.errno or errno.EIO)
        if codes[-1] != errno.ENOENT:
            break
    return codes


def _made_by_prepare(top: Path, existing: Path | None) -> str:
    return (f"{top} does not exist; prepare makes it, and the target below it"
            + (f", in {existing}" if existing is not None else ""))


def _unanswered(path: Path, found: int | None, timeout: float) -> str:
    if found is None:
        return (f"{path} did not answer within {format_duration(timeout)} (a hung "
                "filesystem?); not checked")
    return f"{path}: {os.strerror(found)} ({errno.errorcode.get(found, found)}); not checked"
