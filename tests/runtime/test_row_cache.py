"""Tables declared `cached=True`: the writer keeps the rows its reducers read by key from one call
to the next. Every read must still see exactly what a read of the storage would."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

import msgspec
import pytest

from stdbmod import At, Database, Every, Module, PrimaryKey, ReducerContext, SenderError
from stdbmod.codec import msgpack_encoder
from stdbmod.keys import encode_value
from stdbmod.retry import create_retry_module
from stdbmod.runtime import spaces
from tests.conftest import ALICE
from tests.storage.wrapped import WrappedWrite

m = Module("cached")


@m.table(cached=True)
class Setting(msgspec.Struct):
    id: Annotated[int, PrimaryKey()]
    value: int


@m.table(cached=True)
class Shared(msgspec.Struct, frozen=True):
    """A frozen row of immutable values: a find hands back the row decoded last time."""

    id: Annotated[int, PrimaryKey()]
    value: int


@m.table(cached=True)
class Listed(msgspec.Struct, frozen=True):
    """Frozen, but a list can change in place: never shared."""

    id: Annotated[int, PrimaryKey()]
    tags: list[str]
    at: At | Every | None = None


ROWS: dict[str, type[Setting] | type[Shared]] = {"setting": Setting, "shared": Shared}


@m.table
class Seen(msgspec.Struct):
    id: Annotated[int, PrimaryKey(auto_inc=True)]
    value: int | None


def _value(ctx: ReducerContext, table: str) -> int | None:
    row = getattr(ctx.db, table).id.find(0)
    return None if row is None else row.value


@m.reducer
def read(ctx: ReducerContext, table: str) -> int | None:
    value = _value(ctx, table)
    ctx.db.seen.insert(Seen(0, value))  # a commit record, so the cache outlives the batch
    return value


@m.reducer
def row(ctx: ReducerContext, table: str) -> Setting | Shared | None:
    found: Setting | Shared | None = getattr(ctx.db, table).id.find(0)
    ctx.db.seen.insert(Seen(0, None))  # as `read`: a commit record, so the cache outlives the batch
    return found


@m.reducer
def put(ctx: ReducerContext, table: str, value: int, fail: bool = False) -> int | None:
    handle = getattr(ctx.db, table)
    if handle.id.find(0) is None:
        handle.insert(ROWS[table](0, value))
    else:
        handle.id.update(ROWS[table](0, value))
    seen = _value(ctx, table)  # read back after the write: the cache must not keep it past a failure
    if fail:
        raise SenderError("no")
    return seen


@m.reducer
def put_in_savepoint(ctx: ReducerContext, table: str, value: int) -> tuple[int | None, int | None]:
    try:
        with ctx.savepoint():
            getattr(ctx.db, table).id.update(ROWS[table](0, value))
            inside = _value(ctx, table)
            raise ValueError("roll back")
    except ValueError:
        pass
    return inside, _value(ctx, table)


@m.reducer
def drop(ctx: ReducerContext, table: str) -> None:
    getattr(ctx.db, table).id.delete(0)


@pytest.fixture
def db(make_db: Callable[..., Database]) -> Database:
    return make_db(m)


# Every behaviour holds for both kinds of cached table: rows decoded anew on each find
# (`setting`), and frozen rows handed out again while their bytes stay cached (`shared`).
@pytest.fixture(params=sorted(ROWS))
def table(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


def test_only_a_frozen_row_of_immutable_values_is_shared() -> None:
    assert [m.tables[t].shares_rows for t in ("setting", "shared", "seen", "listed")] == [False, True, False, False]
    retry = create_retry_module().module.tables
    cached = ("retry_admin", "retry_worker", "retry_settings", "lease_sweep", "retry_queue", "retry_retention", "retention_sweep")
    assert [t for t in retry if retry[t].cached] == list(cached) and all(retry[t].shares_rows for t in cached)


def test_reads_follow_writes_of_other_calls(db: Database, table: str) -> None:
    assert db.call("read", table, sender=ALICE) is None
    assert db.call("put", table, 1, sender=ALICE) == 1
    assert db.call("read", table, sender=ALICE) == 1
    assert db.call("read", table, sender=ALICE) == 1  # from the cache, still right
    db.call("drop", table, sender=ALICE)
    assert db.call("read", table, sender=ALICE) is None


def test_a_shared_row_is_decoded_once_while_its_bytes_stay_cached(db: Database, table: str) -> None:
    db.call("put", table, 1, sender=ALICE)
    first, again = db.call("row", table, sender=ALICE), db.call("row", table, sender=ALICE)
    assert first == again and (first is again) == (table == "shared")
    db.call("put", table, 2, sender=ALICE)
    after = db.call("row", table, sender=ALICE)
    assert after is not first and (after.value, first.value) == (2, 1)


def test_a_failed_call_leaves_no_trace_in_the_cache(db: Database, table: str) -> None:
    db.call("put", table, 1, sender=ALICE)
    assert db.call("read", table, sender=ALICE) == 1
    with pytest.raises(SenderError):
        db.call("put", table, 2, True, sender=ALICE)  # wrote 2 and read it back, then failed
    assert db.call("read", table, sender=ALICE) == 1
    # the same inside a batch: the failing call sits between two reads that share its commit
    calls = [("read", (table,)), ("put", (table, 3, True)), ("read", (table,))]
    results = db._writer.run_many([db.call_job(r, a, sender=ALICE) for r, a in calls])
    assert results[0].result() == 1 and results[2].result() == 1
    with pytest.raises(SenderError):
        results[1].result()
    assert db.call("read", table, sender=ALICE) == 1


def test_a_savepoint_rollback_is_seen(db: Database, table: str) -> None:
    db.call("put", table, 1, sender=ALICE)
    assert db.call("read", table, sender=ALICE) == 1
    assert db.call("put_in_savepoint", table, 5, sender=ALICE) == (5, 1)
    assert db.call("read", table, sender=ALICE) == 1


def test_a_commit_by_another_writer_empties_the_cache(db: Database, table: str) -> None:
    db.call("put", table, 1, sender=ALICE)
    assert db.call("read", table, sender=ALICE) == 1
    # a write transaction that is not one of the writer's batches (another process, a tool)
    txn = db.storage.begin_write()
    txn.put(spaces.rows(table), encode_value(0), msgpack_encoder.encode(ROWS[table](0, 7)))
    txn.commit()
    assert db.call("read", table, sender=ALICE) == 7


def test_batches_that_write_and_read_agree_with_the_storage(db: Database, table: str) -> None:
    t = (table,)
    out = db.call_many([("put", (*t, 1), ALICE), ("read", t, ALICE), ("put", (*t, 2), ALICE), ("read", t, ALICE), ("drop", t, ALICE), ("read", t, ALICE)])
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
        txn = WrappedWrite(begin_write())  # whose count the runtime calls as set here
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
