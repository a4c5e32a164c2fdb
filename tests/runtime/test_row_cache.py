"""Tables declared `cached=True`: the writer keeps the rows its reducers read by key from one call
to the next. Every read must still see exactly what a read of the storage would."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

import msgspec
import pytest

from stdbmod import Database, Module, PrimaryKey, ReducerContext, SenderError
from stdbmod.codec import msgpack_encoder
from stdbmod.keys import encode_value
from stdbmod.runtime import spaces
from tests.conftest import ALICE

m = Module("cached")


@m.table(cached=True)
class Setting(msgspec.Struct):
    id: Annotated[int, PrimaryKey()]
    value: int


@m.table
class Seen(msgspec.Struct):
    id: Annotated[int, PrimaryKey(auto_inc=True)]
    value: int | None


def _value(ctx: ReducerContext) -> int | None:
    row = ctx.db.setting.id.find(0)
    return None if row is None else row.value


@m.reducer
def read(ctx: ReducerContext) -> int | None:
    value = _value(ctx)
    ctx.db.seen.insert(Seen(0, value))  # a commit record, so the cache outlives the batch
    return value


@m.reducer
def put(ctx: ReducerContext, value: int, fail: bool = False) -> int | None:
    if ctx.db.setting.id.find(0) is None:
        ctx.db.setting.insert(Setting(0, value))
    else:
        ctx.db.setting.id.update(Setting(0, value))
    seen = _value(ctx)  # read back after the write: the cache must not keep it past a failure
    if fail:
        raise SenderError("no")
    return seen


@m.reducer
def put_in_savepoint(ctx: ReducerContext, value: int) -> tuple[int | None, int | None]:
    try:
        with ctx.savepoint():
            ctx.db.setting.id.update(Setting(0, value))
            inside = _value(ctx)
            raise ValueError("roll back")
    except ValueError:
        pass
    return inside, _value(ctx)


@m.reducer
def drop(ctx: ReducerContext) -> None:
    ctx.db.setting.id.delete(0)


@pytest.fixture
def db(make_db: Callable[..., Database]) -> Database:
    return make_db(m)


def test_reads_follow_writes_of_other_calls(db: Database) -> None:
    assert db.call("read", sender=ALICE) is None
    assert db.call("put", 1, sender=ALICE) == 1
    assert db.call("read", sender=ALICE) == 1
    assert db.call("read", sender=ALICE) == 1  # from the cache, still right
    db.call("drop", sender=ALICE)
    assert db.call("read", sender=ALICE) is None


def test_a_failed_call_leaves_no_trace_in_the_cache(db: Database) -> None:
    db.call("put", 1, sender=ALICE)
    assert db.call("read", sender=ALICE) == 1
    with pytest.raises(SenderError):
        db.call("put", 2, True, sender=ALICE)  # wrote 2 and read it back, then failed
    assert db.call("read", sender=ALICE) == 1
    # the same inside a batch: the failing call sits between two reads that share its commit
    calls = [("read", ()), ("put", (3, True)), ("read", ())]
    results = db._writer.run_many([db.call_job(r, a, sender=ALICE) for r, a in calls])
    assert results[0].result() == 1 and results[2].result() == 1
    with pytest.raises(SenderError):
        results[1].result()
    assert db.call("read", sender=ALICE) == 1


def test_a_savepoint_rollback_is_seen(db: Database) -> None:
    db.call("put", 1, sender=ALICE)
    assert db.call("read", sender=ALICE) == 1
    assert db.call("put_in_savepoint", 5, sender=ALICE) == (5, 1)
    assert db.call("read", sender=ALICE) == 1


def test_a_commit_by_another_writer_empties_the_cache(db: Database) -> None:
    db.call("put", 1, sender=ALICE)
    assert db.call("read", sender=ALICE) == 1
    # a write transaction that is not one of the writer's batches (another process, a tool)
    txn = db.storage.begin_write()
    txn.put(spaces.rows("setting"), encode_value(0), msgpack_encoder.encode(Setting(0, 7)))
    txn.commit()
    assert db.call("read", sender=ALICE) == 7


def test_batches_that_write_and_read_agree_with_the_storage(db: Database) -> None:
    out = db.call_many([("put", (1,), ALICE), ("read", (), ALICE), ("put", (2,), ALICE), ("read", (), ALICE), ("drop", (), ALICE), ("read", (), ALICE)])
    assert out == [1, 1, 2, 2, None, None]
    with db.read() as view:
        assert [s.value for s in view.db.seen.iter()] == [1, 2, None]


# The auto_inc sequences ride in the same cache: an insert reads its sequence from the storage
# only when no earlier call of this writer since the last foreign commit or failure did.


@m.reducer
def add_then_fail(ctx: ReducerContext, fail: bool) -> int:
    row: Seen = ctx.db.seen.insert(Seen(0, None))
    if fail:
        raise SenderError("no")
    return row.id


@m.reducer
def add_in_savepoint(ctx: ReducerContext) -> tuple[int, int]:
    try:
        with ctx.savepoint():
            inside: int = ctx.db.seen.insert(Seen(0, None)).id
            raise ValueError("roll back")
    except ValueError:
        pass
    return inside, ctx.db.seen.insert(Seen(0, None)).id


def _sequence(db: Database) -> int:
    with db.storage.begin_read() as r:
        raw: bytes = r.get(spaces.SEQUENCES, b"seen") or bytes(8)
    return int.from_bytes(raw, "big")


def test_sequences_count_on_from_the_writers_own_commits_and_skip_nothing_a_failure_took(db: Database) -> None:
    assert [db.call("add_then_fail", False, sender=ALICE) for _ in range(2)] == [1, 2]
    with pytest.raises(SenderError):
        db.call("add_then_fail", True, sender=ALICE)  # took 3, then failed: 3 is not taken
    assert db.call("add_then_fail", False, sender=ALICE) == 3
    assert db.call("add_in_savepoint", sender=ALICE) == (4, 4)  # the rolled-back 4 is given again
    calls = [("add_then_fail", (False,)), ("add_then_fail", (True,)), ("add_then_fail", (False,))]
    results = db._writer.run_many([db.call_job(r, a, sender=ALICE) for r, a in calls])
    assert results[0].result() == 5 and results[2].result() == 6
    with db.read() as v:  # the storage holds what the cache does: 6 is its largest key, no
        assert max(s.id for s in v.db.seen.iter()) == 6  # mark is stored (test_sequences.py)
    assert _sequence(db) == 0


def test_a_sequence_moved_by_another_writer_is_read_again(db: Database) -> None:
    assert db.call("add_then_fail", False, sender=ALICE) == 1
    txn = db.storage.begin_write()  # another process, a tool, a replica's apply: the sequence moves on
    txn.put(spaces.SEQUENCES, b"seen", (41).to_bytes(8, "big"))
    txn.commit()
    assert db.call("add_then_fail", False, sender=ALICE) == 42


# So do the tables' row counts: a count is read from the storage once, and the writer's own
# inserts and deletes keep it in step until a foreign commit or a failure empties the cache.


@m.reducer
def add_and_count(ctx: ReducerContext, adds: int, drops: int, fail: bool = False) -> int:
    for _ in range(adds):
        ctx.db.seen.insert(Seen(0, None))
    for row in list(ctx.db.seen.iter())[:drops]:
        ctx.db.seen.id.delete(row.id)
    if fail:
        raise SenderError("no")
    return ctx.db.seen.count()


@m.reducer
def count_in_savepoint(ctx: ReducerContext) -> tuple[int, int]:
    try:
        with ctx.savepoint():
            ctx.db.seen.insert(Seen(0, None))
            inside = ctx.db.seen.count()
            raise ValueError("roll back")
    except ValueError:
        pass
    return inside, ctx.db.seen.count()


def _stored_count(db: Database) -> int:
    with db.storage.begin_read() as r:
        return r.count(spaces.rows("seen"))


def test_row_counts_follow_the_writers_inserts_and_deletes_and_skip_what_failed(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    counted: list[str] = []
    begin_write = db.storage.begin_write

    def counting_begin_write() -> object:
        txn = begin_write()
        count = txn.count

        def spy(space: str) -> int:
            counted.append(space)
            return count(space)

        txn.count = spy  # type: ignore[method-assign]
        return txn

    monkeypatch.setattr(db.storage, "begin_write", counting_begin_write)
    assert db.call("add_and_count", 3, 0, sender=ALICE) == 3
    assert db.call("add_and_count", 2, 1, sender=ALICE) == 4
    with pytest.raises(SenderError):
        db.call("add_and_count", 5, 0, True, sender=ALICE)  # counted 9 inside, then failed
    assert db.call("add_and_count", 0, 2, sender=ALICE) == 2
    assert db.call("count_in_savepoint", sender=ALICE) == (3, 2)
    # in a batch, the failing call counted 7 inside: the next one must not start from it
    out = db.call_many([("add_and_count", (1, 0), ALICE), ("add_and_count", (4, 0, True), ALICE), ("add_and_count", (0, 1), ALICE)])
    assert out[0] == 3 and isinstance(out[1], SenderError) and out[2] == 2
    assert _stored_count(db) == 2
    # the storage was asked for the count only when the cache had none: the first call, the
    # call after the failed one, and after the rolled-back savepoint (a batch's calls count in
    # nested transactions, which this does not watch)
    assert counted.count(spaces.rows("seen")) == 3


def test_a_row_count_moved_by_another_writer_is_read_again(db: Database) -> None:
    assert db.call("add_and_count", 2, 0, sender=ALICE) == 2
    txn = db.storage.begin_write()  # another process, a tool: a row appears
    txn.put(spaces.rows("seen"), encode_value(100), msgpack_encoder.encode((100, None)))
    txn.commit()
    assert db.call("add_and_count", 0, 0, sender=ALICE) == 3
