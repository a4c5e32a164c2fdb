"""A storage that keeps failing (a full disk) must not turn the scheduler into a busy loop: run_due
stops at the first storage failure (the production Scheduler logs it and tries again a second
later) and the rows stay due."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from stdbmod import Database, ManualClock
from stdbmod.errors import StorageError
from stdbmod.examples.bank import bank
from stdbmod.storage import LmdbStorage, Storage, WriteTxn

from .workloads import ALICE, OWNER


class DiskFull(Storage):
    """LMDB, except that every top-level commit fails while `full` is set."""

    def __init__(self, inner: LmdbStorage) -> None:
        self.inner = inner
        self.full = False
        self.failed_commits = 0

    def ensure_spaces(self, names: Iterable[str]) -> None:
        self.inner.ensure_spaces(names)

    def begin_read(self) -> Any:
        return self.inner.begin_read()

    def begin_write(self) -> WriteTxn:
        outer = self.inner.begin_write()
        real_commit = outer.commit

        def commit() -> None:
            if self.full:
                self.failed_commits += 1
                outer.abort()
                raise StorageError("LMDB: mdb_txn_commit: No space left on device")
            real_commit()

        outer.commit = commit  # type: ignore[method-assign]
        return outer

    def grow(self) -> None:
        self.inner.grow()

    def close(self) -> None:
        self.inner.close()


@pytest.fixture
def full_disk(tmp_path: Path) -> Any:
    storage = DiskFull(LmdbStorage(str(tmp_path)))
    clock = ManualClock()
    db = Database.create(storage, bank, owner=OWNER, clock=clock)
    db.call("open_account", 100, sender=ALICE)
    db.call("schedule_interest", 10, 60, True, sender=OWNER)
    clock.advance(61)
    storage.full = True
    yield db, storage
    db.close()


def test_run_due_stops_at_a_storage_failure_and_the_row_stays_due(full_disk: Any) -> None:
    """Regression: run_due swallowed the StorageError of every attempt and went round again,
    100 000 times (seconds of CPU), then said it had fired 100 000 rows."""
    db, storage = full_disk
    with pytest.raises(StorageError, match="No space"):
        db.run_due()
    assert storage.failed_commits == 1
    storage.full = False  # space freed
    assert db.run_due() == 1  # fired once, now
    with db.read() as v:
        assert [a.balance for a in v.db.account.iter()] == [110]
    assert db.run_due() == 0
