"""No update reaches a subscriber before its commit's fsync returned: the storage's commit is
instrumented (LMDB, durable), and every delivered update's offset must be below what the last
returned commit made durable. The same check catches a feed that runs before the commit."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from stdbmod import Database, Identity
from stdbmod.examples.bank import bank
from stdbmod.runtime import commitlog
from stdbmod.runtime.subscriptions import Update
from stdbmod.storage import LmdbStorage, WriteTxn
from tests.storage.wrapped import WrappedStorage, WrappedWrite

OWNER = Identity.from_claims("test", "owner")
PEOPLE = [Identity.from_claims("test", f"p{i}") for i in range(8)]


class _Txn(WrappedWrite):
    """The outer write transaction, its commit watched (a `WriteTxn`: the runtime takes no other)."""

    def __init__(self, inner: WriteTxn, storage: Watched) -> None:
        super().__init__(inner)
        self._storage = storage

    def commit(self) -> None:
        end = commitlog.next_offset(self.inner)  # what this commit holds, once it returns
        for early in self._storage.before_commit:
            early(end)
        self.inner.commit()  # LMDB's commit: the write and the fdatasync
        with self._storage.lock:
            self._storage.durable_end = max(self._storage.durable_end, end)


class Watched(WrappedStorage):
    """LMDB, with the offset below which every commit record is on disk."""

    def __init__(self, path: Path) -> None:
        super().__init__(LmdbStorage(str(path)))
        self.durable_end = 0
        self.lock = threading.Lock()
        self.before_commit: list[Callable[[int], None]] = []

    def begin_write(self) -> WriteTxn:
        return _Txn(self.inner.begin_write(), self)


def _run(tmp_path: Path, early: bool) -> tuple[int, list[str]]:
    storage = Watched(tmp_path / "db")
    db = Database.create(storage, bank, owner=OWNER)
    problems: list[str] = []
    delivered = [0]

    def check(offset: int) -> None:
        with storage.lock:
            if offset >= storage.durable_end:
                problems.append(f"update {offset} delivered, durable below {storage.durable_end} only")

    def on_update(event: Any) -> None:
        if isinstance(event, Update):
            delivered[0] += 1
            check(event.offset)

    subs = [db.subscribe(["SELECT * FROM account", "SELECT * FROM transfer"], on_update, sender=OWNER, inline=i % 2 == 0) for i in range(4)]
    # A new subscription wakes the hub to read the log to its end. LMDB shows a commit to readers
    # once it is on disk, but this watcher notes it only after LMDB's commit returned: a catch-up
    # in between would be reported here though nothing was early. So it is done before any write,
    # and every update below comes from the records the writer hands on after its commit.
    for s in subs:
        assert s.sync()
    if early:  # a feed that runs before the commit: what the check must catch
        storage.before_commit.append(lambda end: check(end - 1))

    # every account first: a thread's transfer to one not opened yet would fail ("no such account")
    for who in PEOPLE:
        db.call("open_account", 40, sender=who)

    def writer(who: Identity) -> None:
        for k in range(12):
            db.call("transfer", 1 + k % 3, 1, sender=who)

    threads = [threading.Thread(target=writer, args=(p,)) for p in PEOPLE]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for s in subs:
        assert s.sync()
    db.close()
    return delivered[0], problems


def test_no_update_before_its_fsync(tmp_path: Path) -> None:
    delivered, problems = _run(tmp_path, early=False)
    assert delivered == 4 * len(PEOPLE) * 13  # every call wrote a transfer row: each subscriber saw every commit
    assert problems == []


def test_the_check_catches_a_feed_before_the_commit(tmp_path: Path) -> None:
    _, problems = _run(tmp_path, early=True)
    assert problems
