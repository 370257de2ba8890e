"""Readers choose how to open a database by the names beside it, never by opening it: the
service's own readers run in the writing process, where closing any descriptor of the file
would drop the writer's POSIX locks (docs/DEVELOPERS.md). The real service under an audit
hook, with every reader it has: tests/kit/scenes/writer_locks.py.
"""

from __future__ import annotations

import json
from pathlib import Path


def test_readers_choose_how_to_open_by_the_names_beside_the_file(tmp_path: Path) -> None:
    """The reader's URI without looking into the file: immutable when no -wal and no
    -journal is beside it (every committed page is in the file), else read-only only."""
    from slowdown.analysis.store import Store
    from slowdown.analysis.store.open_files import read_only_uri

    database = tmp_path / "x.db"
    Store(database).close()  # the last connection closed: no -wal left
    assert read_only_uri(database).endswith("?mode=ro&immutable=1")
    writer = Store(database)
    try:
        assert read_only_uri(database).endswith("?mode=ro")
    finally:
        writer.close()
    (tmp_path / "x.db-journal").write_bytes(b"")
    assert read_only_uri(database).endswith("?mode=ro")
    assert json.dumps(read_only_uri(tmp_path / "a#b.db")).count("%23") == 1
