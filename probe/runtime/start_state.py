"""What ``slowdown-probe prepare`` and ``run`` tell the readers while they prepare and start:
the start state beside the configured database (its format: ``analysis/store/starting.py``).

It is written only where the service would write its database: on a local filesystem (or
one allowed by ``allow_network_database``), in the database's directory made as the service
makes it (the moved default 0700 and this user's own, ``locks/database_lock.py``). Where it cannot
be written the readers are told nothing more than before, and nothing else changes: it is a
courtesy to them, never a reason to stop.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import time
from collections.abc import Mapping
from pathlib import Path

from slowdown.analysis.config import Config
from slowdown.analysis.config.defaults import default_database_place
from slowdown.analysis.store.filesystem import filesystem_of
from slowdown.analysis.store.starting import clear_start, write_start

log = logging.getLogger(__name__)


class StartState:
    """The start state of this process, told with ``tell`` and removed at the end of the
    ``with`` block (a kill leaves it to readers, who find its process gone)."""

    def __init__(self, config: Config, environ: Mapping[str, str] = os.environ) -> None:
        database = getattr(config, "database", None)  # (prepare also takes a partial one)
        self.database = Path(database) if database is not None else Path()
        self.base = {"host": config.host, "interval": getattr(config, "interval", 1.0),
                     "targets": [t.name for t in config.targets]}
        self.usable = database is not None and _place_ok(config, environ)
        self.what: str | None = None
        self.since = 0.0
        self.told = False

    def tell(self, what: str, target: str | None = None) -> None:
        """``preparing`` (``target``: the one being prepared now) or ``starting``."""
        if what != self.what:
            self.what, self.since = what, time.time()
        if not self.usable:
            return
        try:
            self.told = write_start(self.database, {**self.base, "what": what,
                                                    "target": target, "since": self.since})
        except OSError as exc:
            log.debug("cannot write the start state beside %s: %s", self.database, exc)
            self.usable = False

    def __enter__(self) -> StartState:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.told:
            clear_start(self.database)


def _place_ok(config: Config, environ: Mapping[str, str]) -> bool:
    """Whether the database's place is one the service would write, its directory made as
    the service makes it (``locks/database_lock.claim_database``)."""
    database = Path(config.database)
    filesystem = filesystem_of(database)
    allowed = getattr(config, "allow_network_database", False)
    if filesystem is not None and filesystem.shared and not allowed:
        return False
    place = default_database_place(environ, config.host)
    try:
        if database == place.path and place.moved_from is not None:
            with contextlib.suppress(FileExistsError):
                os.mkdir(database.parent, 0o700)
            st = os.lstat(database.parent)
            return (stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid()
                    and not st.st_mode & 0o022)
        database.parent.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return True
