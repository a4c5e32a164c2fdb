"""Partial indexes (`Index(columns, only=(v1, ...))`): a row has an entry only while its first
indexed column holds one of those values, on insert, update and delete alike; every read
answers as a dense index over the same columns does (a filter that may match a row left out
reads the rows); SQL walks one only for a value it keeps; making an index partial, or dense
again, on open rebuilds it; declarations it cannot honour are refused."""

from __future__ import annotations

import enum
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stdbmod import Database, Index, Module, PrimaryKey, Range, ReducerContext
from stdbmod.errors import SchemaError
from stdbmod.keys import encode_key, encode_value
from stdbmod.runtime import spaces
from stdbmod.runtime.sql import _best_walk, run_sql
from stdbmod.runtime.sql_plan import parse_query
from stdbmod.schema import build_table
from tests.conftest import OWNER
from tests.runtime.index_reads import assert_reads_agree, ids, indexed, run_ops


class State(str, enum.Enum):
    NEW = "new"
    BUSY = "busy"
    DONE = "done"


# `open_` holds the rows that are new or busy, `open_dense` is the same columns dense (the
# oracle); `by_size` is partial on an int column
INDEXES: dict[str, Any] = {
    "open_": Index(("state", "size"), only=(State.NEW, State.BUSY)),
    "open_dense": ("state", "size"),
    "by_size": Index(("size", "state"), only=(1, 3)),
    "by_size_dense": ("size", "state"),
}


class Thing(msgspec.Struct):
    id: Annotated[int, PrimaryKey(auto_inc=True)]
    state: State
    size: int


def module(partial: bool = True) -> Module:
    """The `thing` table; `partial=False`: every index dense (a database made before)."""
    m = Module("partial")
    m.table(Thing, public=True, indexes=INDEXES if partial else {**INDEXES, "open_": ("state", "size"), "by_size": ("size", "state")})

    @m.reducer
    def add(ctx: ReducerContext, state: State, size: int) -> None:
        ctx.db.thing.insert(Thing(0, state, size))

    @m.reducer
    def change(ctx: ReducerContext, id: int, state: State, size: int) -> None:
        ctx.db.thing.id.update(Thing(id, state, size))

    @m.reducer
    def remove(ctx: ReducerContext, id: int) -> None:
        ctx.db.thing.id.delete(id)

    @m.reducer
    def drop_done(ctx: ReducerContext) -> int:
        return ctx.db.thing.open_.delete(State.DONE)  # type: ignore[no-any-return]

    return m


@pytest.fixture
def db(make_db: Callable[..., Database]) -> Database:
    return make_db(module(), durable=False)


def test_entries_only_for_the_values_it_keeps(db: Database) -> None:
    for state, size in ((State.NEW, 1), (State.DONE, 2), (State.BUSY, 3), (State.DONE, 3)):
        db.call("add", state, size, sender=OWNER)
    assert indexed(db, "open_") == [1, 3] and indexed(db, "open_dense") == [1, 2, 3, 4]
    assert indexed(db, "by_size") == [1, 3, 4] and indexed(db, "by_size_dense") == [1, 2, 3, 4]
    assert db.check_integrity() == []


def test_an_update_adds_and_removes_the_entry_as_the_value_comes_and_goes(db: Database) -> None:
    db.call("add", State.NEW, 1, sender=OWNER)
    db.call("add", State.DONE, 2, sender=OWNER)  # a neighbour that stays out throughout
    steps = [
        (State.BUSY, 1, [1], [1]),  # kept -> kept: moved
        (State.DONE, 1, [], [1]),  # kept -> left out: gone
        (State.DONE, 3, [], [1]),  # left out, another column changes: still none
        (State.NEW, 2, [1], []),  # left out -> kept: an entry; by_size 3 -> 2: gone
    ]
    for state, size, open_, by_size in steps:
        db.call("change", 1, state, size, sender=OWNER)
        assert (indexed(db, "open_"), indexed(db, "by_size")) == (open_, by_size)
        assert db.check_integrity() == []
    db.call("remove", 1, sender=OWNER)
    db.call("remove", 2, sender=OWNER)
    assert (indexed(db, "open_"), indexed(db, "by_size")) == ([], [])


def test_a_delete_by_a_value_it_leaves_out_deletes_those_rows(db: Database) -> None:
    for state in (State.DONE, State.NEW, State.DONE, State.BUSY):
        db.call("add", state, 1, sender=OWNER)
    assert db.call("drop_done", sender=OWNER) == 2
    with db.read() as v:
        assert ids(v.db.thing.iter()) == [2, 4]
    assert db.check_integrity() == []


def test_integrity_reports_an_entry_for_a_row_it_leaves_out(db: Database) -> None:
    db.call("add", State.DONE, 2, sender=OWNER)
    w = db.storage.begin_write()
    w.put(spaces.index("thing", "open_"), encode_key((State.DONE, 2)) + encode_value(1), encode_value(1))
    w.commit()
    assert any("open_" in p for p in db.check_integrity())


SPECS: list[Any] = [
    State.NEW, State.DONE, "busy", (State.NEW, 1), (State.DONE, Range(lo=2)), (State.BUSY, Range(hi=3)), Range(),
    Range(lo=State.BUSY), Range(hi=State.DONE), Range(lo=State.DONE, hi=State.NEW, hi_inclusive=True), (State.NEW, 1, 3),
    (State.NEW, 1, Range(lo=2)),
]  # fmt: skip
SIZE_SPECS: list[Any] = [1, 2, 3, 4, (1, State.NEW), (2, State.DONE), Range(), Range(lo=1, hi=3), Range(lo=3), (3, Range(hi=State.DONE))]

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.sampled_from(list(State)), st.integers(0, 4)),
        st.tuples(st.just("change"), st.integers(1, 12), st.sampled_from(list(State)), st.integers(0, 4)),
        st.tuples(st.just("remove"), st.integers(1, 12)),
    ),
    max_size=25,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS)
def test_every_read_answers_as_the_dense_index_does(tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[Any, ...]]) -> None:
    """filter (both ways) and count on the partial indexes equal the dense ones' after any run
    of inserts, updates and deletes: values kept and left out, ranges across both, keyset pages."""
    path = tmp_path_factory.mktemp("partial")
    with Database.create(path / "db", module(), owner=OWNER, durable=False) as d:
        run_ops(d, ops, OWNER)
        assert d.check_integrity() == []
        with d.read() as v:
            t = v.db.thing
            assert_reads_agree([(t.open_, t.open_dense, SPECS), (t.by_size, t.by_size_dense, SIZE_SPECS)])


class _Lone(msgspec.Struct):
    """A table whose only index on state is partial, for the planner's choice."""

    id: Annotated[int, PrimaryKey()]
    state: State
    size: int


def test_sql_walks_it_only_for_a_value_it_keeps(db: Database) -> None:
    for state, size in ((State.NEW, 1), (State.DONE, 1), (State.BUSY, 2), (State.DONE, 3)):
        db.call("add", state, size, sender=OWNER)

    def sql(where: str) -> list[int]:
        return [row[0] for row in run_sql(db, f"SELECT * FROM thing WHERE {where} ORDER BY id", OWNER).rows]

    assert sql("state = 'done'") == [2, 4] and sql("state = 'new'") == [1] and sql("state > 'busy'") == [1, 2, 4]
    assert sql("size = 2") == [3] and sql("size = 3 AND state = 'done'") == [4]
    lone = {"thing": build_table(_Lone, name="thing", public=True, indexes={"open_": INDEXES["open_"]}, scheduled=None)}

    def walked(where: str) -> str | None:
        q = parse_query(f"SELECT * FROM thing WHERE {where}", lone)
        walk = _best_walk(lone["thing"], q.bounds)
        return None if walk is None else walk[0].name

    assert walked("state = 'new'") == "open_" and walked("state = 'busy' AND size > 1") == "open_"
    assert walked("state = 'done'") is None and walked("state > 'busy'") is None and walked("state < 'new'") is None


def test_making_an_index_partial_or_dense_on_open_rebuilds_it(tmp_path: Path) -> None:
    where = tmp_path / "db"
    with Database.create(where, module(partial=False), owner=OWNER, durable=False) as old:
        for state in (State.NEW, State.DONE, State.BUSY, State.DONE):
            old.call("add", state, 1, sender=OWNER)
        assert indexed(old, "open_") == [1, 2, 3, 4]
        before = old.state_hash()
    with Database.open(where, module(), durable=False) as d:
        assert indexed(d, "open_") == [1, 3] and d.check_integrity() == [] and d.state_hash() == before
        with d.read() as v:
            assert ids(v.db.thing.open_.filter(State.DONE)) == [2, 4]
    with Database.open(where, module(partial=False), durable=False) as d:  # dense again: rebuilt with them
        assert indexed(d, "open_") == [1, 2, 3, 4] and d.check_integrity() == []


def test_the_stored_schema_names_the_values(db: Database) -> None:
    described = {t["name"]: t for t in db.describe()["tables"]}["thing"]["indexes"]
    assert described["open_"] == {"columns": ["state", "size"], "unique": False, "only": ["new", "busy"]}
    assert described["by_size"] == {"columns": ["size", "state"], "unique": False, "only": [1, 3]}
    assert described["open_dense"] == {"columns": ["state", "size"], "unique": False}


@pytest.mark.parametrize(
    ("index", "message"),
    [
        (Index(("state",), only=("lost",)), "not a value of its first column"),
        (Index(("size",), only=("one",)), "not a value of its first column"),
        (Index(("state",), only=(State.NEW, "new")), "names a value twice"),
        (Index(("state",), sparse=True, only=(State.NEW,)), "sparse or partial"),
    ],
)
def test_declarations_it_refuses(index: Index, message: str) -> None:
    with pytest.raises(SchemaError, match=message):
        build_table(_Lone, name=None, public=False, indexes={"ix": index}, scheduled=None)


def test_a_float_column_cannot_lead_a_partial_index() -> None:
    """Rows are kept by their value's equality, and -0.0 == 0.0 while their keys differ."""

    class Measured(msgspec.Struct):
        id: Annotated[int, PrimaryKey()]
        weight: float | None
        size: int

    with pytest.raises(SchemaError, match="may not be a float"):
        build_table(Measured, name=None, public=False, indexes={"ix": Index(("weight",), only=(1.0,))}, scheduled=None)
    table = build_table(Measured, name=None, public=False, indexes={"ix": Index(("size", "weight"), only=(1,))}, scheduled=None)
    assert table.indexes["ix"].only == (1,)  # a float after the first column is fine


def test_a_column_marker_may_be_partial_and_values_take_the_column_type() -> None:
    class Marked(msgspec.Struct):
        id: Annotated[int, PrimaryKey()]
        state: Annotated[State, Index(only=("new",))]

    ix = build_table(Marked, name=None, public=False, indexes=None, scheduled=None).indexes["state"]
    assert ix.only == (State.NEW,) and ix.leaves_out((1, State.DONE)) and not ix.leaves_out((1, State.NEW))
