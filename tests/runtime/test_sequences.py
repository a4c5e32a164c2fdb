"""auto_inc sequences: a value is the larger of the table's largest key and a stored high-water
mark that is written only when no row's key holds the sequence up (docs/architecture.md,
"Sequences"). Ids must come out exactly as a transactional counter's would: never given twice,
not even after the largest row is deleted, a caught insert failed, or the database reopened."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import msgspec
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from stdbmod import Database, Module, PrimaryKey, ReducerContext, SenderError, Unique
from stdbmod.codec import msgpack_encoder
from stdbmod.errors import UniqueConstraintViolation
from stdbmod.keys import decode_u64, encode_u64
from stdbmod.runtime import apply_changes, spaces
from stdbmod.runtime.database import FORMAT_VERSION
from tests.conftest import ALICE, OWNER
from tests.postgres import server
from tests.replica import feed_replica

m = Module("sequences")


@m.table
class Thing(msgspec.Struct):
    id: Annotated[int, PrimaryKey(auto_inc=True)]
    name: Annotated[str, Unique()]


@m.reducer
def add(ctx: ReducerContext, name: str, key: int = 0) -> int:
    row: Thing = ctx.db.thing.insert(Thing(key, name))
    return row.id


@m.reducer
def add_caught(ctx: ReducerContext, name: str) -> str:
    """An insert refused for its name, caught: the call goes on and commits."""
    return type(ctx.db.thing.try_insert(Thing(0, name))).__name__


@m.reducer
def add_then_fail(ctx: ReducerContext, name: str) -> None:
    ctx.db.thing.insert(Thing(0, name))
    raise SenderError("no")


@m.reducer
def add_in_savepoint(ctx: ReducerContext, name: str) -> tuple[int, int]:
    """An insert inside a savepoint that rolls back, then the same insert outside it."""
    inside = 0
    try:
        with ctx.savepoint():
            inside = ctx.db.thing.insert(Thing(0, name)).id
            raise ValueError("roll back")
    except ValueError:
        pass
    return inside, ctx.db.thing.insert(Thing(0, name)).id


@m.reducer
def drop(ctx: ReducerContext, key: int) -> None:
    if not ctx.db.thing.id.delete(key):
        raise SenderError(f"no thing {key}")


def _mark(db: Database) -> int | None:
    with db.storage.begin_read() as r:
        raw = r.get(spaces.SEQUENCES, b"thing")
    return None if raw is None else decode_u64(raw)


@pytest.fixture
def reopen(tmp_path: Path, make_db: Callable[..., Database]) -> Callable[[Database | None], Database]:
    """The database at one path: created the first time, closed and opened again after."""
    path = tmp_path / "seq"

    def again(db: Database | None) -> Database:
        if db is None:
            return make_db(m, path=path)
        db.close()
        return Database.open(path, m)

    return again


def test_ids_count_on_and_nothing_is_written_while_the_rows_hold_the_sequence(reopen: Callable[[Database | None], Database]) -> None:
    db = reopen(None)
    assert [db.call("add", n, sender=ALICE) for n in "abc"] == [1, 2, 3]
    assert _mark(db) is None  # the largest key holds the value: no write an insert
    db = reopen(db)
    assert db.call("add", "d", sender=ALICE) == 4
    db.close()


def test_the_largest_rows_deleted_ids_are_never_given_again(reopen: Callable[[Database | None], Database]) -> None:
    db = reopen(None)
    for n in "abcd":
        db.call("add", n, sender=ALICE)
    db.call("drop", 2, sender=ALICE)
    assert _mark(db) is None  # not the largest: the rows above still hold the sequence
    db.call("drop", 4, sender=ALICE)
    db.call("drop", 3, sender=ALICE)
    assert _mark(db) == 4
    assert db.call("add", "e", sender=ALICE) == 5  # from the writer's cache
    db.call("drop", 5, sender=ALICE)
    db = reopen(db)  # from the storage: the mark, above every key left (1)
    assert db.call("add", "f", sender=ALICE) == 6
    db.close()


def test_a_caught_failed_insert_keeps_its_value_taken(reopen: Callable[[Database | None], Database]) -> None:
    db = reopen(None)
    assert db.call("add", "a", sender=ALICE) == 1
    assert db.call("add_caught", "a", sender=ALICE) == "UniqueConstraintViolation"  # took 2, committed
    assert _mark(db) == 2
    db = reopen(db)
    assert db.call("add", "b", sender=ALICE) == 3
    with pytest.raises(SenderError):
        db.call("add_then_fail", "c", sender=ALICE)  # took 4, then failed: the call takes it back
    db = reopen(db)
    assert db.call("add", "c", sender=ALICE) == 4
    db.close()


def test_an_explicit_key_moves_the_sequence_and_keeps_it_after_its_row_goes(reopen: Callable[[Database | None], Database]) -> None:
    db = reopen(None)
    assert db.call("add", "a", 100, sender=ALICE) == 100
    assert db.call("add", "b", sender=ALICE) == 101
    assert db.call("add", "c", 50, sender=ALICE) == 50  # below: the sequence stays
    db.call("drop", 101, sender=ALICE)
    db.call("drop", 100, sender=ALICE)
    db = reopen(db)
    assert db.call("add", "d", sender=ALICE) == 102
    db.close()


@pytest.mark.parametrize("stored", [0, 1, 3, 9])
def test_a_stored_value_behind_or_ahead_of_the_keys_gives_fresh_ids(reopen: Callable[[Database | None], Database], stored: int) -> None:
    """A database written before (its stored value is the last one given) or one whose value
    fell behind the keys: the next id is above both."""
    db = reopen(None)
    for n in "abc":
        db.call("add", n, sender=ALICE)
    txn = db.storage.begin_write()
    txn.put(spaces.SEQUENCES, b"thing", encode_u64(stored))
    txn.commit()
    db = reopen(db)
    assert db.call("add", "d", sender=ALICE) == max(stored, 3) + 1
    assert db.check_integrity() == []
    db.close()


def test_a_replay_of_the_log_gives_the_same_ids(reopen: Callable[[Database | None], Database], make_db: Callable[..., Database]) -> None:
    db = reopen(None)
    for n in "abcd":
        db.call("add", n, sender=ALICE)
    db.call("drop", 4, sender=ALICE)
    db.call("add_caught", "a", sender=ALICE)  # takes 5
    copy = make_db(m, owner=db.owner, identity=db.identity, run_init=False)
    apply_changes(copy, db.commit_log())
    assert copy.state_hash() == db.state_hash()
    assert copy.call("add", "e", sender=ALICE) == db.call("add", "e", sender=ALICE) == 6
    db.close()


def test_nodes_on_one_postgresql_schema_never_give_an_id_twice() -> None:
    """Each node's writer keeps the sequence in its cache; another node's commit empties it, and
    every write transaction runs under the schema's lock: no two nodes take one value, even when
    the largest row is deleted between them."""
    from stdbmod.storage.postgres import PostgresStorage

    with server.fresh_schema() as schema:
        a = Database.create(PostgresStorage(server.DSN, schema=schema, readers=2), m, owner=OWNER)
        b = Database.open(PostgresStorage(server.DSN, schema=schema, readers=2), m)
        try:
            ids = [a.call("add", "a", sender=ALICE), b.call("add", "b", sender=ALICE), a.call("add", "c", sender=ALICE)]
            assert ids == [1, 2, 3]
            b.call("drop", 3, sender=ALICE)  # the largest, deleted on the other node
            assert a.call("add", "d", sender=ALICE) == 4
            a.call("drop", 4, sender=ALICE)
            assert b.call("add", "e", sender=ALICE) == 5
        finally:
            a.close()
            b.close()


def test_a_format_2_database_opens_as_it_is_and_is_marked_format_3(reopen: Callable[[Database | None], Database]) -> None:
    """Before format 3 every insert stored its sequence's value: a database of then holds the
    last value given for every table, which the larger-of rule reads as it is."""
    db = reopen(None)
    for n in "abc":
        db.call("add", n, sender=ALICE)
    db.call("drop", 2, sender=ALICE)
    txn = db.storage.begin_write()  # as format 2 left it: the value stored, the meta saying 2
    txn.put(spaces.SEQUENCES, b"thing", encode_u64(3))
    txn.put(spaces.META, b"meta", msgpack_encoder.encode(msgspec.structs.replace(db.meta, format=2)))
    txn.commit()
    db = reopen(db)
    assert db.meta.format == FORMAT_VERSION == 3
    assert db.call("add", "d", sender=ALICE) == 4
    db.close()


class SequenceMachine(RuleBasedStateMachine):
    """The sequence against a transactional counter: every way of taking, dropping and giving
    back a value, in single calls and batches, with the database closed and reopened, and a
    replica fed the commit log. The ids must be the counter's, and the rows the model's."""

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="stdbmod-seq-"))
        self.db = Database.create(self.dir / "live", m, owner=OWNER, durable=False)
        self.replica = Database.create(self.dir / "replica", m, owner=OWNER, identity=self.db.identity, run_init=False, durable=False)
        self.replayed = 0
        self.counter = 0  # the last value a transactional counter gave
        self.rows: dict[int, str] = {}
        self.names = 0

    def teardown(self) -> None:
        self.db.close()
        self.replica.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def name(self) -> str:
        self.names += 1
        return f"n{self.names}"

    @rule()
    def add(self) -> None:
        name = self.name()
        self.counter += 1
        assert self.db.call("add", name, sender=ALICE) == self.counter
        self.rows[self.counter] = name

    @rule(ahead=st.integers(min_value=-3, max_value=3))
    def add_with_a_key(self, ahead: int) -> None:
        key = max(1, self.counter + ahead)
        name = self.name()
        if key in self.rows:
            with pytest.raises(UniqueConstraintViolation):
                self.db.call("add", name, key, sender=ALICE)
            return
        assert self.db.call("add", name, key, sender=ALICE) == key
        self.rows[key] = name
        self.counter = max(self.counter, key)

    @precondition(lambda self: bool(self.rows))
    @rule(data=st.data())
    def drop(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(self.rows)), label="key")
        self.db.call("drop", key, sender=ALICE)
        del self.rows[key]

    @precondition(lambda self: bool(self.rows))
    @rule()
    def drop_the_largest(self) -> None:
        key = max(self.rows)
        self.db.call("drop", key, sender=ALICE)
        del self.rows[key]

    @precondition(lambda self: bool(self.rows))
    @rule()
    def add_caught(self) -> None:
        taken = next(iter(self.rows.values()))
        assert self.db.call("add_caught", taken, sender=ALICE) == "UniqueConstraintViolation"
        self.counter += 1  # taken, and kept taken by a call that commits

    @rule()
    def add_then_fail(self) -> None:
        with pytest.raises(SenderError):
            self.db.call("add_then_fail", self.name(), sender=ALICE)

    @rule()
    def add_in_savepoint(self) -> None:
        name = self.name()
        assert self.db.call("add_in_savepoint", name, sender=ALICE) == (self.counter + 1, self.counter + 1)
        self.counter += 1
        self.rows[self.counter] = name

    @rule()
    def batch_with_a_failure(self) -> None:
        a, b, c = self.name(), self.name(), self.name()
        jobs = [self.db.call_job("add", (a,), sender=ALICE), self.db.call_job("add_then_fail", (b,), sender=ALICE), self.db.call_job("add", (c,), sender=ALICE)]
        results = self.db._writer.run_many(jobs)
        assert results[0].result() == self.counter + 1 and results[2].result() == self.counter + 2
        with pytest.raises(SenderError):
            results[1].result()
        self.rows[self.counter + 1], self.rows[self.counter + 2] = a, c
        self.counter += 2

    @rule()
    def reopen(self) -> None:
        self.db.close()
        self.db = Database.open(self.dir / "live", m, durable=False)

    @invariant()
    def rows_are_the_models(self) -> None:
        with self.db.read() as v:
            assert {t.id: t.name for t in v.db.thing.iter()} == self.rows

    @invariant()
    def a_replica_of_the_log_agrees(self) -> None:
        self.replayed = feed_replica(self.replica, self.db, self.replayed)


SequenceMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
TestSequenceMachine = SequenceMachine.TestCase
