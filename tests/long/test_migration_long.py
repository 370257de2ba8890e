"""The service migrating 90 days of schema-4 records (1,555,200, 2 targets x 6 ops) under a
private $NOTIFY_SOCKET: EXTEND_TIMEOUT_USEC from the migration's start until READY=1, no gap
longer than the extension granted, READY=1 after the migration, every record kept (the CI
form migrates a week: tests/test_migration.py).

Opt-in (tests/long, ``--long``); about a minute:

    python -m pytest --long -s tests/long/test_migration_long.py
"""

from __future__ import annotations

import pytest

from tests.kit.migrationkit import gaps, migrate_under_notify


@pytest.mark.timeout(600)
def test_the_service_extends_its_start_timeout_through_a_90_day_migration(tmp_path):
    run = migrate_under_notify(tmp_path, days=90)
    ready = run.ready - run.spawned
    print(f"MIGRATION-90D build {run.build_seconds:.1f} s, READY=1 after {ready:.1f} s, "
          f"{len(run.extends)} extensions, longest gap {max(gaps(run)):.2f} s")
    assert len(run.extends) >= 5  # a migration of many seconds: extended all along
