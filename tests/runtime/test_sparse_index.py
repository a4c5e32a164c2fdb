"""Sparse indexes (`Index(sparse=True)`): a row whose indexed value is None (for several columns:
whose first column is None) has no entry, on insert, update and delete alike; every read answers
as a dense index over the same columns does (a filter that may match None reads the rows);
SQL and subscriptions never walk one for NULL; making an index sparse, or dense again, on open
rebuilds it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stdbmod import Database, Index, Module, PrimaryKey, Range, ReducerContext
from stdbmod.errors import SchemaError, StorageError
from stdbmod.keys import encode_value
from stdbmod.runtime import spaces
from stdbmod.runtime.sql import _best_walk, run_sql
from stdbmod.runtime.sql_plan import parse_query
from stdbmod.runtime.subscriptions import Update
from stdbmod.schema import build_table
from tests.conftest import OWNER
from tests.runtime.index_reads import assert_reads_agree, ids, indexed, run_ops
from tests.subscriptions.helpers import Collector

# single column: `tag` sparse, `tag_dense` the same column dense (the oracle); several columns:
# (owner, size) sparse and dense
INDEXES: dict[str, Any] = {
    "tag_dense": ("tag",),
    "by_owner_size": Index(("owner", "size"), sparse=True),
    "by_owner_size_dense": ("owner", "size"),
}


def module(sparse: bool = True) -> Module:
    """The `thing` table; `sparse=False`: the same columns with every index dense (a database
    made before the indexes were sparse)."""
    m = Module("sparse")
    if sparse:

        class Thing(msgspec.Struct):
            id: Annotated[int, PrimaryKey(auto_inc=True)]
            tag: Annotated[str | None, Index(sparse=True)]
            owner: str | None
            size: int

        indexes = INDEXES
    else:

        class Thing(msgspec.Struct):  # type: ignore[no-redef]
            id: Annotated[int, PrimaryKey(auto_inc=True)]
            tag: Annotated[str | None, Index()]
            owner: str | None
            size: int

        indexes = {**INDEXES, "by_owner_size": ("owner", "size")}
    m.table(Thing, public=True, indexes=indexes)

    @m.reducer
    def add(ctx: ReducerContext, tag: str | None, owner: str | None, size: int) -> None:
        ctx.db.thing.insert(Thing(0, tag, owner, size))

    @m.reducer
    def change(ctx: ReducerContext, id: int, tag: str | None, owner: str | None, size: int) -> None:
        ctx.db.thing.id.update(Thing(id, tag, owner, size))

    @m.reducer
    def remove(ctx: ReducerContext, id: int) -> None:
        ctx.db.thing.id.delete(id)

    @m.reducer
    def drop_untagged(ctx: ReducerContext) -> int:
        return ctx.db.thing.tag.delete(None)  # type: ignore[no-any-return]

    return m


@pytest.fixture
def db(make_db: Callable[..., Database]) -> Database:
    return make_db(module(), durable=False)


def test_no_entry_for_none_an_entry_for_a_value(db: Database) -> None:
    db.call("add", None, None, 1, sender=OWNER)  # 1
    db.call("add", "a", None, 2, sender=OWNER)  # 2
    db.call("add", None, "x", 3, sender=OWNER)  # 3: first column of by_owner_size set
    db.call("add", "b", "y", 4, sender=OWNER)  # 4
    assert indexed(db, "tag") == [2, 4] and indexed(db, "tag_dense") == [1, 2, 3, 4]
    assert indexed(db, "by_owner_size") == [3, 4] and indexed(db, "by_owner_size_dense") == [1, 2, 3, 4]
    with db.storage.begin_read() as r:  # the entry is the dense one's: value, then primary key
        assert r.get(spaces.index("thing", "tag"), encode_value("a") + encode_value(2)) == encode_value(2)
    assert db.check_integrity() == []


def test_an_update_adds_and_removes_the_entry_as_the_value_comes_and_goes(db: Database) -> None:
    db.call("add", None, None, 1, sender=OWNER)
    db.call("add", None, None, 2, sender=OWNER)  # a neighbour that stays None throughout
    steps: list[tuple[str | None, str | None, int, list[int], list[int]]] = [
        ("a", None, 1, [1], []),  # None -> value: an entry
        ("b", None, 1, [1], []),  # value -> value: moved
        (None, "x", 1, [], [1]),  # value -> None: gone; owner None -> value: an entry
        (None, "x", 5, [], [1]),  # another column of the multi-column index: moved
        (None, None, 5, [], []),  # owner value -> None: gone
        (None, None, 6, [], []),  # None stays None while size changes: still none
    ]
    for tag, owner, size, tagged, owned in steps:
        db.call("change", 1, tag, owner, size, sender=OWNER)
        assert (indexed(db, "tag"), indexed(db, "by_owner_size")) == (tagged, owned)
        assert db.check_integrity() == []
    with db.read() as v:
        assert ids(v.db.thing.by_owner_size.filter((None, 6))) == [1]
        assert ids(v.db.thing.tag.filter("b")) == []


def test_a_delete_removes_the_entry_of_a_value_and_leaves_the_rest(db: Database) -> None:
    for tag in ("a", None, "a", None):
        db.call("add", tag, tag and "x", 1, sender=OWNER)
    db.call("remove", 1, sender=OWNER)
    db.call("remove", 2, sender=OWNER)
    assert indexed(db, "tag") == [3] and indexed(db, "by_owner_size") == [3]
    assert db.check_integrity() == []


SINGLE_SPECS: list[Any] = [
    None, "a", "b", "zz", Range(), Range(hi="b"), Range(hi="a", hi_inclusive=True), Range(lo="a"), Range(lo="a", hi="c"),
    Range(lo=None), Range(lo=None, lo_inclusive=False), Range(hi=None, hi_inclusive=True), Range(hi=None),
    (None, 3), (None, Range(lo=2, lo_inclusive=False)), ("a", Range(hi=4)),
]  # fmt: skip
MULTI_SPECS: list[Any] = [
    None, (None,), (None, 1), (None, Range(lo=1)), (None, 1, 2), ("x",), ("x", 2), ("x", Range(hi=3)), Range(), Range(hi="x"),
    Range(lo=None, lo_inclusive=False), Range(lo="x"), (None, None), ("y", None),
]  # fmt: skip

TAGS = st.sampled_from([None, None, "a", "b", "c"])
OWNERS = st.sampled_from([None, None, "x", "y"])
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), TAGS, OWNERS, st.integers(0, 3)),
        st.tuples(st.just("change"), st.integers(1, 12), TAGS, OWNERS, st.integers(0, 3)),
        st.tuples(st.just("remove"), st.integers(1, 12)),
    ),
    max_size=25,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS)
def test_every_read_answers_as_the_dense_index_does(tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[Any, ...]]) -> None:
    """filter (both ways) and count on the sparse indexes equal the dense ones' after any run of
    inserts, updates and deletes: None asked for, ranges holding None, keyset pages."""
    path = tmp_path_factory.mktemp("sparse")
    with Database.create(path / "db", module(), owner=OWNER, durable=False) as d:
        run_ops(d, ops, OWNER)
        assert d.check_integrity() == []
        with d.read() as v:
            t = v.db.thing
            assert_reads_agree([(t.tag, t.tag_dense, SINGLE_SPECS), (t.by_owner_size, t.by_owner_size_dense, MULTI_SPECS)])


def test_a_delete_by_none_deletes_the_rows_it_has_no_entries_for(db: Database) -> None:
    for tag in (None, "a", None, "b"):
        db.call("add", tag, None, 1, sender=OWNER)
    assert db.call("drop_untagged", sender=OWNER) == 2
    with db.read() as v:
        assert ids(v.db.thing.iter()) == [2, 4] and v.db.thing.tag.count(None) == 0
    assert db.check_integrity() == []


def test_sql_and_null_read_the_rows_never_the_sparse_index(db: Database) -> None:
    for tag, owner in ((None, None), ("a", "x"), (None, "y"), ("b", None)):
        db.call("add", tag, owner, 1, sender=OWNER)

    def sql(where: str) -> list[int]:
        return [row[0] for row in run_sql(db, f"SELECT * FROM thing WHERE {where} ORDER BY id", OWNER).rows]

    assert sql("tag IS NULL") == [1, 3]
    assert sql("tag IS NOT NULL") == [2, 4]
    assert sql("tag = NULL") == [] and sql("owner = NULL") == []  # as SQL: NULL equals nothing
    assert sql("tag = 'a'") == [2] and sql("tag < 'b'") == [2] and sql("tag >= 'a'") == [2, 4]
    assert sql("owner IS NULL AND size = 1") == [1, 4] and sql("owner = 'y' AND size = 1") == [3]
    # the planner: a value of the first column, or a range, may walk the sparse index (a range
    # open below from just above NULL, which no SQL condition but IS NULL holds for); IS NULL is
    # no bound
    lone = {"thing": build_table(_Lone, name="thing", public=True, indexes=None, scheduled=None)}

    def walked(where: str) -> str | None:
        q = parse_query(f"SELECT * FROM thing WHERE {where}", lone)
        walk = _best_walk(lone["thing"], q.bounds)
        return None if walk is None else walk[0].name

    assert walked("tag = 'a'") == "tag" and walked("tag > 'a'") == "tag"
    assert walked("tag < 'b'") == "tag" and walked("tag <= 'b'") == "tag"
    assert walked("tag IS NULL") is None and walked("tag = NULL") is None


def test_a_range_open_below_walks_the_sparse_index_past_null(tmp_path: Path) -> None:
    """`tag < 'm'` on a table whose only index on tag is sparse reads the tagged rows below 'm'
    through the index, not every row (the None rows, most of them, are never read)."""
    with Database.create(tmp_path / "db", _lone_module(), owner=OWNER, durable=False) as d:
        tags = [None] * 40 + ["a", "c", "m", "z", ""]
        for i, tag in enumerate(tags):
            d.call("put", i, tag, sender=OWNER)
        for where, want in (("tag < 'm'", ["", "a", "c"]), ("tag <= 'm'", ["", "a", "c", "m"]), ("tag < ''", [])):
            res = run_sql(d, f"SELECT * FROM thing WHERE {where}", OWNER)
            assert sorted(row[1] for row in res.rows) == want, where
            assert res.rows_read == len(want), (where, res.rows_read)  # a scan would read all 45
        assert [row[1] for row in run_sql(d, "SELECT * FROM thing WHERE tag IS NULL", OWNER).rows] == [None] * 40


class _Lone(msgspec.Struct):
    """A table whose only index is sparse, for the planner's choice."""

    id: Annotated[int, PrimaryKey()]
    tag: Annotated[str | None, Index(sparse=True)]


def test_a_subscription_to_null_rows_gets_them_and_their_changes(db: Database) -> None:
    db.call("add", None, None, 1, sender=OWNER)
    db.call("add", "a", None, 1, sender=OWNER)
    got = Collector()
    sub = db.subscribe(["SELECT * FROM thing WHERE tag IS NULL"], got, sender=OWNER)
    assert [r.id for r in sub.initial[0].rows] == [1]
    db.call("change", 1, "b", None, 1, sender=OWNER)  # leaves
    db.call("change", 2, None, None, 1, sender=OWNER)  # comes
    assert sub.sync()
    first, second = got.of(Update)
    assert [r.id for r in first.deletes("thing")] == [1] and first.inserts("thing") == []
    assert [r.id for r in second.inserts("thing")] == [2] and second.deletes("thing") == []


def test_making_an_index_sparse_or_dense_on_open_rebuilds_it(tmp_path: Path) -> None:
    where = tmp_path / "db"
    with Database.create(where, module(sparse=False), owner=OWNER, durable=False) as old:
        for tag, owner in ((None, None), ("a", "x"), (None, "y"), ("b", None)):
            old.call("add", tag, owner, 1, sender=OWNER)
        assert indexed(old, "tag") == [1, 2, 3, 4] and indexed(old, "by_owner_size") == [1, 2, 3, 4]
        before = old.state_hash()
    with pytest.raises(StorageError, match="indexes rebuilt"):  # a read-only open cannot drop them
        Database.open(where, module(), readonly=True)
    with Database.open(where, module(), durable=False) as d:  # the None entries are dropped
        assert indexed(d, "tag") == [2, 4] and indexed(d, "by_owner_size") == [2, 3]
        assert d.check_integrity() == [] and d.state_hash() == before  # the rows are untouched
        with d.read() as v:
            assert ids(v.db.thing.tag.filter(None)) == [1, 3] and ids(v.db.thing.by_owner_size.filter(None)) == [1, 4]
            assert ids(v.db.thing.tag.filter("a")) == [2]
        d.call("add", None, None, 2, sender=OWNER)  # and it goes on sparse
        assert indexed(d, "tag") == [2, 4]
    with Database.open(where, module(sparse=False), durable=False) as d:  # dense again: rebuilt with them
        assert indexed(d, "tag") == [1, 2, 3, 4, 5] and d.check_integrity() == []


def test_the_stored_schema_says_sparse_only_when_it_is(db: Database) -> None:
    described = {t["name"]: t for t in db.describe()["tables"]}["thing"]["indexes"]
    assert described["tag"] == {"columns": ["tag"], "unique": False, "sparse": True}
    assert described["by_owner_size"] == {"columns": ["owner", "size"], "unique": False, "sparse": True}
    assert described["tag_dense"] == {"columns": ["tag"], "unique": False}  # as before: old schemas match


class _Strict(msgspec.Struct):
    id: Annotated[int, PrimaryKey()]
    name: str
    tag: str | None = None


@pytest.mark.parametrize(
    ("indexes", "message"),
    [
        ({"by_name": Index(("name",), sparse=True)}, "never None"),
        ({"by_name_tag": Index(("name", "tag"), sparse=True)}, "never None"),  # the first column decides
        ({"by_nothing": Index()}, "must name its columns"),
        ({"by_nothing": ()}, "must name its columns"),
    ],
)
def test_declarations_it_refuses(indexes: dict[str, Any], message: str) -> None:
    with pytest.raises(SchemaError, match=message):
        build_table(_Strict, name=None, public=False, indexes=indexes, scheduled=None)


def test_a_column_marker_names_no_columns_and_sparse_needs_an_optional_column() -> None:
    class Named(msgspec.Struct):
        id: Annotated[int, PrimaryKey()]
        tag: Annotated[str | None, Index(("other",))]

    class Never(msgspec.Struct):
        id: Annotated[int, PrimaryKey()]
        name: Annotated[str, Index(sparse=True)]

    with pytest.raises(SchemaError, match="names no columns"):
        build_table(Named, name=None, public=False, indexes=None, scheduled=None)
    with pytest.raises(SchemaError, match="never None"):
        build_table(Never, name=None, public=False, indexes=None, scheduled=None)
    table = build_table(_Strict, name=None, public=False, indexes={"by_tag_name": Index(("tag", "name"), sparse=True)}, scheduled=None)
    assert table.indexes["by_tag_name"].sparse and table.indexes["by_tag_name"].columns == ("tag", "name")


def _lone_module() -> Module:
    mod = Module("lone")
    mod.table(_Lone, name="thing", public=True)

    @mod.reducer
    def put(ctx: ReducerContext, id: int, tag: str | None) -> None:
        ctx.db.thing.insert(_Lone(id, tag))

    return mod


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    tags=st.lists(st.one_of(st.none(), st.sampled_from(["", "a", "b", "m", "z", "zz"])), max_size=25),
    op=st.sampled_from(["<", "<=", ">", ">="]),
    bound=st.sampled_from(["", "a", "b", "n", "zz"]),
)
def test_sql_ranges_over_a_sparse_index_agree_with_a_filter(tmp_path: Path, tags: list[str | None], op: str, bound: str) -> None:
    """Any range of SQL on the sparse-only column finds exactly the rows Python's comparison
    keeps (a NULL by none), whichever way the planner walks."""
    keep = {"<": str.__lt__, "<=": str.__le__, ">": str.__gt__, ">=": str.__ge__}[op]
    with Database.create(tmp_path / f"db{len(list(tmp_path.iterdir()))}", _lone_module(), owner=OWNER, durable=False) as d:
        for i, tag in enumerate(tags):
            d.call("put", i, tag, sender=OWNER)
        res = run_sql(d, f"SELECT * FROM thing WHERE tag {op} '{bound}'", OWNER)
        assert sorted(row[0] for row in res.rows) == [i for i, t in enumerate(tags) if t is not None and keep(t, bound)]
