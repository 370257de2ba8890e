"""Per-server records: each op's latencies per (host, target, op, server, ten minutes).

A shared filesystem is many servers, and the probe knows, outside its timed calls, which of
them served an op (``probe/servers/``). One node's probes spread thinly over a hundred
servers (sixty a minute), so a minute per server would hold less than one sample and a row
per (server, minute) would cost more than the samples: ten minutes is the step. The fleet's
nodes add up per server exactly, since the histograms merge. Written in the transaction that
writes the minutes they came from (``Store.write``); ``server`` is ``unknown`` where the
filesystem could not say (never a guess).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from slowdown.analysis.histogram import Histogram, codec

TEN = 600
UNKNOWN = "unknown"  # the server of an op whose filesystem could not say
VERSION = 9  # the schema from which files hold per-server records

CREATE = f"""
    CREATE TABLE server_series (
        id      INTEGER PRIMARY KEY,
        host    TEXT NOT NULL,
        target  TEXT NOT NULL,
        op      TEXT NOT NULL,
        server  TEXT NOT NULL,              -- a brick, an OSD, an MDS rank, or 'unknown'
        UNIQUE (host, target, op, server)
    );
    CREATE TABLE server_tens (
        series  INTEGER NOT NULL REFERENCES server_series(id),
        start   INTEGER NOT NULL,           -- unix seconds, UTC, a multiple of {TEN}
        count   INTEGER NOT NULL,           -- latencies in hist
        errors  INTEGER NOT NULL DEFAULT 0, -- ops that failed
        hist    BLOB NOT NULL,              -- buckets only (codec.decode_buckets)
        PRIMARY KEY (series, start)
    ) WITHOUT ROWID;
    CREATE INDEX server_tens_by_start ON server_tens (start);
"""

UPSERT = """
    INSERT INTO server_tens (series, start, count, errors, hist) VALUES (?, ?, ?, ?, ?)
    ON CONFLICT (series, start) DO UPDATE SET
        count = count + excluded.count,
        errors = errors + excluded.errors,
        hist = hist_merge(hist, excluded.hist)
"""


@dataclass
class ServerRecord:
    """Latencies of one op that one server served, in one UTC ten minutes."""

    host: str
    target: str
    op: str
    server: str
    start: int  # unix seconds, UTC, a multiple of TEN
    histogram: Histogram = field(default_factory=Histogram)
    errors: int = 0

    @property
    def key(self) -> tuple[str, str, str, str, int]:
        return (self.host, self.target, self.op, self.server, self.start)


def ten_of(timestamp: float) -> int:
    """The start of the UTC ten minutes holding ``timestamp``."""
    return int(timestamp) // TEN * TEN


def rows_of(records: Iterable[ServerRecord], series_id) -> list[tuple]:
    """``UPSERT``'s rows of ``records``; ``series_id(host, target, op, server)`` gives each
    one's series (inserting it when new)."""
    rows = []
    for rec in records:
        if rec.start % TEN:
            raise ValueError(f"server record start {rec.start} is not aligned to {TEN} s")
        rows.append((series_id(rec.host, rec.target, rec.op, rec.server), rec.start,
                     rec.histogram.count, rec.errors, codec.encode(rec.histogram, moments=False)))
    return rows


def holds(version: int) -> bool:
    """Whether a file of schema ``version`` keeps per-server records."""
    return version >= VERSION


__all__ = ["CREATE", "TEN", "UNKNOWN", "UPSERT", "ServerRecord", "holds", "rows_of", "ten_of"]
