"""A storage that keeps failing (a full disk) must not turn the scheduler into a busy loop: run_due
stops at the first storage failure (the production Scheduler logs it and tries again a second
later) and the rows stay due."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from stdbmod import Database, ManualClock
from stdbmod.errors import StorageError
from stdbmod.examples.bank import bank
from stdbmod.storage import LmdbStorage
from tests.storage.faulty import FaultyStorage

from .workloads import ALICE, OWNER


@pytest.fixture
def full_disk(tmp_path: Path) -> Any:
    storage = FaultyStorage(LmdbStorage(str(tmp_path)))
    clock = ManualClock()
    db = Database.create(storage, bank, owner=OWNER, clock=clock)
    db.call("open_account", 100, sender=ALICE)
    db.call("schedule_interest", 10, 60, True, sender=OWNER)
    clock.advance(61)
    storage.failing = StorageError("LMDB: mdb_txn_commit: No space left on device")
    yield db, storage
    db.close()


def test_run_due_stops_at_a_storage_failure_and_the_row_stays_due(full_disk: Any) -> None:
    """Regression: run_due swallowed the StorageError of every attempt and went round again,
    100 000 times (seconds of CPU), then said it had fired 100 000 rows."""
    db, storage = full_disk
    with pytest.raises(StorageError, match="No space"):
        db.run_due()
    assert storage.failed_commits == 1
    storage.failing = None  # space freed
    assert db.run_due() == 1  # fired once, now
    with db.read() as v:
        assert [a.balance for a in v.db.account.iter()] == [110]
    assert db.run_due() == 0
