"""Reads the writer skips: a row a call read is not read again from storage when the call
updates it (Transaction.get_row), and the commit log's next offset is kept from one batch to
the next (Core). What each read returns must still be what a read of the storage would."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import msgspec
import pytest

from stdbmod import Database, Module, PrimaryKey, ReducerContext, SenderError
from stdbmod.storage import MemoryStorage, WriteTxn
from stdbmod.storage.memory import _MemWrite
from tests.conftest import ALICE

m = Module("read_once")


@m.table
class Item(msgspec.Struct):
    id: Annotated[int, PrimaryKey()]
    value: int


@m.reducer
def add(ctx: ReducerContext, id: int, value: int) -> None:
    ctx.db.item.insert(Item(id, value))


@m.reducer
def bump(ctx: ReducerContext, id: int) -> tuple[int, int]:
    """find, update, find: the second find sees the update."""
    row = ctx.db.item.id.find(id)
    assert row is not None
    ctx.db.item.id.update(Item(id, row.value + 1))
    again = ctx.db.item.id.find(id)
    assert again is not None
    return row.value, again.value


@m.reducer
def drop_and_find(ctx: ReducerContext, id: int) -> bool:
    assert ctx.db.item.id.find(id) is not None
    ctx.db.item.id.delete(id)
    return ctx.db.item.id.find(id) is None


@m.reducer
def undone(ctx: ReducerContext, id: int, other: int) -> tuple[int, int]:
    """A write and a read of it inside a savepoint that rolls back: the read after it sees the
    row as it was, though the last read of the table from storage was of the undone write (the
    read of `other` in between made it one)."""
    try:
        with ctx.savepoint():
            ctx.db.item.id.update(Item(id, 100))
            ctx.db.item.id.find(other)
            inside = ctx.db.item.id.find(id)
            assert inside is not None
            raise SenderError("undo")
    except SenderError:
        pass
    after = ctx.db.item.id.find(id)
    assert after is not None
    return inside.value, after.value


@m.reducer
def fail_after_read(ctx: ReducerContext, id: int) -> None:
    ctx.db.item.id.update(Item(id, -1))
    ctx.db.item.id.find(id)
    raise SenderError("no")


class _Counting(_MemWrite):
    gets: Counter[str] = Counter()
    lasts: Counter[str] = Counter()

    def get(self, space: str, key: bytes) -> bytes | None:
        _Counting.gets[space] += 1
        return super().get(space, key)

    def last(self, space: str) -> tuple[bytes, bytes] | None:
        _Counting.lasts[space] += 1
        return super().last(space)


class CountingStorage(MemoryStorage):
    """Memory storage that counts its write transactions' gets and lasts, per space."""

    def begin_write(self) -> WriteTxn:
        self._writer.acquire()  # as MemoryStorage.begin_write, with the counting transaction
        return _Counting(self, None)


@pytest.fixture
def db(tmp_path: Path) -> Database:
    return Database.create(tmp_path / "db", m, owner=ALICE)


def test_a_read_after_an_update_sees_the_update(db: Database) -> None:
    db.call("add", 1, 10, sender=ALICE)
    assert db.call("bump", 1, sender=ALICE) == (10, 11)
    assert db.call("bump", 1, sender=ALICE) == (11, 12)
    assert db.call("drop_and_find", 1, sender=ALICE) is True
    db.close()


def test_a_savepoint_undone_after_a_read_leaves_the_row_as_it_was(db: Database) -> None:
    db.call("add", 1, 10, sender=ALICE)
    db.call("add", 2, 20, sender=ALICE)
    assert db.call("undone", 1, 2, sender=ALICE) == (100, 10)
    with db.read() as r:
        row = r.db.item.id.find(1)
        assert row is not None and row.value == 10
    db.close()


def test_a_failed_call_leaves_nothing_for_the_next(db: Database) -> None:
    db.call("add", 1, 10, sender=ALICE)
    with pytest.raises(SenderError):
        db.call("fail_after_read", 1, sender=ALICE)
    assert db.call("bump", 1, sender=ALICE) == (10, 11)
    db.close()


@pytest.fixture
def counted() -> Iterator[Database]:
    """A database over CountingStorage holding item 1 (value 10), its counters at zero."""
    db = Database.create(CountingStorage(), m, owner=ALICE)
    db.call("add", 1, 10, sender=ALICE)
    _Counting.gets.clear()
    _Counting.lasts.clear()
    yield db
    db.close()


def test_find_then_update_reads_the_row_once(counted: Database) -> None:
    assert counted.call("bump", 1, sender=ALICE) == (10, 11)
    assert _Counting.gets["t/item"] == 1  # find; the update and the second find read none


def test_the_log_offsets_follow_on_across_batches_and_failures(tmp_path: Path) -> None:
    db = Database.create(tmp_path / "db", m, owner=ALICE)
    db.call("add", 1, 10, sender=ALICE)
    for _ in range(3):
        db.call("bump", 1, sender=ALICE)
        with pytest.raises(SenderError):
            db.call("fail_after_read", 1, sender=ALICE)
    out = db.call_many([("bump", (1,), ALICE), ("fail_after_read", (1,), ALICE), ("bump", (1,), ALICE)])
    assert isinstance(out[1], SenderError) and out[2] == (14, 15)
    offsets = [r.offset for r in db.commit_log()]
    assert offsets == list(range(len(offsets)))
    db.close()
    db = Database.open(tmp_path / "db", m)  # read from the log again after a reopen
    db.call("bump", 1, sender=ALICE)
    offsets = [r.offset for r in db.commit_log()]
    assert offsets == list(range(len(offsets)))
    db.close()


def test_a_batch_after_a_commit_does_not_read_the_log_for_its_offset(counted: Database) -> None:
    for _ in range(3):
        counted.call("bump", 1, sender=ALICE)
    assert _Counting.lasts["log"] == 0
    with pytest.raises(SenderError):
        counted.call("fail_after_read", 1, sender=ALICE)  # rolled back: the offset is read again
    counted.call("bump", 1, sender=ALICE)
    assert _Counting.lasts["log"] == 1
    offsets = [r.offset for r in counted.commit_log()]
    assert offsets == list(range(len(offsets)))


def test_reexecuting_a_log_with_procedures_keeps_every_record(tmp_path: Path) -> None:
    """A procedure's record is replayed as it is, appended by its job; the calls after it in the
    same batch come after it in the log. (Before, the next call's record took its offset.)"""
    from stdbmod.runtime import reexecute
    from tests.runtime.procedure_module import mod

    db = Database.create(tmp_path / "a", mod, owner=ALICE)
    db.call("add", "x", sender=ALICE)
    db.call("note_twice", "p", sender=ALICE)  # two transactions: two records
    db.call("add", "y", sender=ALICE)
    log = db.commit_log()
    db.close()
    copy = Database.create(tmp_path / "b", mod, owner=ALICE, run_init=False)
    reexecute(copy, log)
    assert [(r.offset, r.kind, r.reducer) for r in copy.commit_log()] == [(r.offset, r.kind, r.reducer) for r in log]
    copy.close()
