"""The write path: answers only after the commit, map growth, commit failures, panics."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from stdbmod import Database, Identity, ManualClock
from stdbmod.errors import StorageError, StoragePanic
from stdbmod.examples.bank import bank
from stdbmod.storage import LmdbStorage, WriteTxn
from tests.conftest import OWNER
from tests.storage.faulty import FaultyStorage
from tests.storage.wrapped import WrappedStorage


def test_a_call_is_answered_only_after_its_commit(tmp_path: Path) -> None:
    storage = FaultyStorage(LmdbStorage(str(tmp_path)))
    db = Database.create(storage, bank, owner=OWNER, clock=ManualClock())
    fut = db.submit("open_account", 5, sender=OWNER)
    fut.add_done_callback(lambda f: storage.events.append("answered"))
    fut.result()
    assert storage.events[-2:] == ["commit", "answered"]
    db.close()


def test_a_failed_commit_is_never_a_success_and_changes_nothing(tmp_path: Path) -> None:
    storage = FaultyStorage(LmdbStorage(str(tmp_path)))
    db = Database.create(storage, bank, owner=OWNER, clock=ManualClock())
    before = db.state_hash()
    storage.fail_next = StorageError("LMDB: mdb_txn_commit: Input/output error")
    with pytest.raises(StorageError, match="Input/output"):
        db.call("open_account", 5, sender=OWNER)
    assert db.state_hash() == before
    db.call("open_account", 5, sender=OWNER)  # the next one works
    assert db.state_hash() != before
    db.close()


def test_a_panic_fails_the_database_for_good(tmp_path: Path) -> None:
    storage = FaultyStorage(LmdbStorage(str(tmp_path)))
    db = Database.create(storage, bank, owner=OWNER, clock=ManualClock())
    panics: list[StoragePanic] = []
    db.hooks.on_panic = panics.append
    storage.fail_next = StoragePanic("LMDB panic")
    with pytest.raises(StoragePanic):
        db.call("open_account", 5, sender=OWNER)
    with pytest.raises(StoragePanic):
        db.call("open_account", 6, sender=OWNER)
    assert len(panics) == 1
    db.close()
    db = Database.open(tmp_path, bank)
    with db.read() as v:
        assert v.db.account.count() == 0
    db.close()


def test_the_map_grows_without_losing_a_write(tmp_path: Path) -> None:
    db = Database.create(tmp_path, bank, owner=OWNER, clock=ManualClock(), map_size=1 << 17)
    start = db.storage.map_size  # type: ignore[attr-defined]
    people = [Identity.from_claims("grow", str(i)) for i in range(600)]
    futures = [db.submit("open_account", i, sender=p) for i, p in enumerate(people)]
    for f in futures:
        f.result()
    assert db.storage.map_size > start  # type: ignore[attr-defined]
    with db.read() as v:
        assert v.db.account.count() == 600
    assert len(db.commit_log()) == 601
    db.close()
    db = Database.open(tmp_path, bank)
    with db.read() as v:
        assert sorted(a.balance for a in v.db.account.iter()) == list(range(600))
    db.close()


def test_acknowledged_writes_survive_reopen(tmp_path: Path) -> None:
    db = Database.create(tmp_path, bank, owner=OWNER, clock=ManualClock())
    for i in range(20):
        db.call("open_account", i, sender=Identity.from_claims("r", str(i)))
    h = db.state_hash()
    db.close()
    db = Database.open(tmp_path, bank)
    assert db.state_hash() == h
    db.close()


class _LooksLikeATxn:
    """An object that only looks like a write transaction: every attribute the LMDB one's."""

    def __init__(self, inner: WriteTxn) -> None:
        self.inner = inner
        self.aborted = False

    def abort(self) -> None:
        self.aborted = True
        self.inner.abort()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class _Foreign(WrappedStorage):
    """LMDB, whose write transactions come wrapped in something that is not a WriteTxn."""

    def __init__(self, path: Path) -> None:
        super().__init__(LmdbStorage(str(path)))
        self.handed: list[_LooksLikeATxn] = []

    def begin_write(self) -> WriteTxn:
        txn = _LooksLikeATxn(self.inner.begin_write())
        self.handed.append(txn)
        return txn  # type: ignore[return-value]


def test_a_write_transaction_that_is_no_write_txn_is_refused_and_aborted(tmp_path: Path) -> None:
    """In either build: a clear StorageError, and the transaction it was handed aborted, so that
    LMDB's writer is free again (compiled, such an object was refused where nothing aborted it,
    and closing the storage then waited for good)."""
    storage = _Foreign(tmp_path / "db")
    with pytest.raises(StorageError, match="begin_write returned a _LooksLikeATxn, not a WriteTxn"):
        Database.create(storage, bank, owner=OWNER, clock=ManualClock())
    assert storage.handed and all(t.aborted for t in storage.handed)
    closing = threading.Thread(target=storage.close, daemon=True)
    closing.start()
    closing.join(timeout=30)  # a guard against the hang, not a wait for time to pass
    assert not closing.is_alive()
