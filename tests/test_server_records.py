"""Per-server records: written with the minutes, merged per (host, target, op, server, ten)."""

from __future__ import annotations

import sqlite3

import pytest

from slowdown.analysis.histogram import Histogram, codec
from slowdown.analysis.store import Store
from slowdown.analysis.store.server_records import ServerRecord, ten_of

T0 = 1_790_000_400  # a multiple of 600


def hist(*values: float) -> Histogram:
    h = Histogram()
    for v in values:
        h.record(v)
    return h


def test_the_same_server_and_ten_merge_and_others_stay_apart(tmp_path):
    db = tmp_path / "n1.db"
    with Store(db) as store:
        store.write([], servers=[ServerRecord("n1", "work", "data-read", "osd.1", T0,
                                              hist(0.01, 0.02))])
        store.write([], servers=[ServerRecord("n1", "work", "data-read", "osd.1", T0,
                                              hist(0.03), errors=1),
                                 ServerRecord("n1", "work", "data-read", "osd.2", T0,
                                              hist(0.5))])
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT s.server, t.start, t.count, t.errors, t.hist FROM "
                            "server_tens t JOIN server_series s ON s.id = t.series "
                            "ORDER BY s.server").fetchall()
    assert [r[:4] for r in rows] == [("osd.1", T0, 3, 1), ("osd.2", T0, 1, 0)]
    _, zero, counts, moments = codec.decode_pairs(rows[0][4])
    assert zero + sum(counts.values()) == 3 and moments is None  # buckets only, as in tens


def test_a_record_not_on_a_ten_is_refused_and_nothing_is_written(tmp_path):
    db = tmp_path / "n1.db"
    with Store(db) as store, pytest.raises(ValueError, match="not aligned to 600"):
        store.write([], servers=[ServerRecord("n1", "work", "md-stat", "mds.0", T0 + 60,
                                              hist(0.001))])
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM server_series").fetchone() == (0,)


def test_ten_of_is_the_utc_ten_minutes():
    assert ten_of(T0 + 599.9) == T0 and ten_of(T0 + 600) == T0 + 600
