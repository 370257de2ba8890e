"""Whether the service's records reach the database that readers open, and since when not.

The service is never "running" while nothing is recorded. After every minute flush it knows
whether the write landed: committed, into the files that are at the database's path
(``Recorder.flush``, ``store.file_identity``). When it did not (the volume full or read-only,
the file deleted, moved or replaced, its ``-wal`` deleted, a foreign file put in its place),
the minutes stay in memory and this state says so at once, with the path and the reason, in
the log, the live state (``slowdown``, ``--json``, ``watch``, ``check``) and the database's
state table (a published copy, a later look); the metrics count the flush as failed and keep
the minutes pending. When records land again, the episode is kept, from when to when and
why, so that a reader of the window it fell in is told (``EPISODES`` of them).

The service keeps it (``probe/daemon/service.py``); readers take it back with ``Landing.of``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

EPISODES = 5  # ended episodes kept for readers
STATE_KEY = "landing"  # where the database's state table keeps it
PROBES = "probes"  # the state key of each target's free space and last errors (live state)


@dataclass
class Landing:
    """The records' way to the database at ``path``: landing now, or since when not."""

    path: str
    since: float | None = None  # when records stopped landing (None: they land)
    reason: str | None = None
    moved: bool = False  # the file itself went (not a write that failed)
    episodes: list[dict] = field(default_factory=list)  # ended ones (``json``)
    last: float | None = field(default=None, compare=False)  # the last write that landed

    @property
    def ok(self) -> bool:
        return self.since is None

    def failed(self, now: float, reason: str, moved: bool) -> None:
        """A flush did not land: said in the log once per episode, or when the reason
        changes."""
        if self.since is not None and reason == self.reason:
            return
        if moved:
            log.error("records are not reaching %s: %s; the minutes since the last write are "
                      "kept in memory and go to the file at that path as soon as one can be "
                      "opened there", self.path, reason)
        if self.since is None:  # a file that went, went after the last write that landed
            self.since = self.last if moved and self.last is not None else now
        self.reason, self.moved = reason, self.moved or moved

    def landed(self, now: float) -> None:
        """A flush landed: an episode that was going on ends."""
        if self.since is not None and self.moved:
            log.warning("records reach %s again, %.0f s after they stopped (%s)", self.path,
                        now - self.since, self.reason)
        ended = self.closed(now)
        self.since, self.reason, self.moved, self.episodes = None, None, False, ended.episodes
        self.last = now

    def closed(self, now: float) -> Landing:
        """This state as it is once a write lands at ``now`` (what that write carries)."""
        if self.since is None:
            return self
        episode = {"from": self.since, "to": now, "reason": self.reason, "moved": self.moved}
        return Landing(self.path, episodes=[*self.episodes, episode][-EPISODES:], last=now)

    def json(self) -> dict:
        """What readers are told: ``{"ok", "path", "since", "reason", "moved", "episodes"}``;
        an episode is ``{"from", "to", "reason", "moved"}``."""
        return {"ok": self.ok, "path": self.path, "since": self.since, "reason": self.reason,
                "moved": self.moved, "episodes": self.episodes}

    @classmethod
    def of(cls, doc: object) -> Landing | None:
        """The state a service wrote (``json``), or None for what is not one."""
        if not isinstance(doc, dict) or not isinstance(doc.get("path"), str):
            return None
        since = doc.get("since")
        episodes = [e for e in doc.get("episodes") or [] if isinstance(e, dict)
                    and isinstance(e.get("from"), (int, float))
                    and isinstance(e.get("to"), (int, float))]
        return cls(doc["path"], float(since) if isinstance(since, (int, float)) else None,
                   str(doc.get("reason") or "") or None, bool(doc.get("moved")), episodes)

    def within(self, start: float, end: float) -> list[dict]:
        """The episodes, the one going on included (``to`` None), that touch ``[start, end]``."""
        going = [{"from": self.since, "to": None, "reason": self.reason, "moved": self.moved}
                 ] if self.since is not None else []
        return [e for e in [*self.episodes, *going]
                if e["from"] <= end and (e["to"] is None or e["to"] >= start)]
