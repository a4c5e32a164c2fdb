"""Table handles: insert, find, update, delete, filter (equality, prefix, range) and count by index, iter, count."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import msgspec
import pytest

from stdbmod import Database, Identity, Index, Module, PrimaryKey, Range, ReducerContext, Unique
from stdbmod.errors import KeyTooLarge, NoSuchAttribute, NoSuchTable, RowNotFound, UniqueConstraintViolation
from tests.conftest import OWNER

m = Module("tables")


@m.table(indexes={"by_owner_kind": ("owner", "kind")})
class Item(msgspec.Struct):
    id: Annotated[int, PrimaryKey(auto_inc=True)]
    sku: Annotated[str, Unique()]
    owner: Identity
    kind: str
    price: Annotated[int, Index()]
    note: Annotated[str | None, Index()] = None


@m.reducer
def run(ctx: ReducerContext, code: str) -> Any:
    """Run a snippet against ctx.db inside one transaction (the tests' probe)."""
    env: dict[str, Any] = {"ctx": ctx, "db": ctx.db, "Item": Item, "Range": Range, "msgspec": msgspec}
    exec(code, env)
    return env.get("result")


A = Identity.from_claims("t", "a")
B = Identity.from_claims("t", "b")


@pytest.fixture
def db(make_db: Callable[..., Database]) -> Database:
    d = make_db(m)
    d.call(
        "run",
        """
for i, (owner, kind, price) in enumerate([("a", "hat", 5), ("a", "hat", 3), ("a", "shoe", 9), ("b", "hat", 7), ("b", "sock", 1)]):
    db.item.insert(Item(0, f"sku{i}", ctx.sender if owner == "a" else ctx.identity, kind, price))
""",
        sender=A,
    )
    return d


def q(db: Database, code: str) -> Any:
    return db.call("run", code, sender=A)


def test_insert_fills_auto_inc_and_returns_the_row(db: Database) -> None:
    assert q(db, "result = db.item.insert(Item(0, 'new', ctx.sender, 'x', 1)).id") == 6
    assert q(db, "result = db.item.insert(Item(100, 'explicit', ctx.sender, 'x', 1)).id") == 100
    # the sequence moved past the explicit key, so auto_inc never collides with it
    assert q(db, "result = db.item.insert(Item(0, 'after', ctx.sender, 'x', 1)).id") == 101


def test_unique_violations_raise_and_write_nothing(db: Database) -> None:
    with pytest.raises(UniqueConstraintViolation, match="item.sku"):
        q(db, "db.item.insert(Item(0, 'sku0', ctx.sender, 'x', 1))")
    with pytest.raises(UniqueConstraintViolation, match="item.id"):
        q(db, "db.item.insert(Item(1, 'other', ctx.sender, 'x', 1))")
    assert q(db, "result = db.item.count()") == 5


def test_inserting_an_identical_row_is_a_no_op(db: Database) -> None:
    assert q(db, "r = db.item.id.find(1); db.item.insert(r); result = db.item.count()") == 5


def test_find_by_primary_key_and_unique_column(db: Database) -> None:
    assert q(db, "result = db.item.id.find(2).sku") == "sku1"
    assert q(db, "result = db.item.sku.find('sku3').id") == 4
    assert q(db, "result = (db.item.id.find(99), db.item.sku.find('nope'))") == (None, None)


def test_update_by_primary_key_and_by_unique_column(db: Database) -> None:
    q(db, "db.item.id.update(msgspec.structs.replace(db.item.id.find(1), price=50))")
    assert q(db, "result = [r.id for r in db.item.price.filter(50)]") == [1]
    assert q(db, "result = [r.id for r in db.item.price.filter(5)]") == []  # the old index entry is gone
    q(db, "db.item.sku.update(msgspec.structs.replace(db.item.sku.find('sku1'), kind='boot'))")
    assert q(db, "result = db.item.id.find(2).kind") == "boot"


def test_update_of_a_missing_row_raises(db: Database) -> None:
    with pytest.raises(RowNotFound):
        q(db, "db.item.id.update(Item(99, 'z', ctx.sender, 'x', 1))")


def test_update_into_another_rows_unique_value_raises(db: Database) -> None:
    with pytest.raises(UniqueConstraintViolation):
        q(db, "db.item.id.update(msgspec.structs.replace(db.item.id.find(1), sku='sku2'))")
    assert q(db, "result = db.item.id.find(1).sku") == "sku0"


def test_delete_by_key_by_row_and_by_index(db: Database) -> None:
    assert q(db, "result = db.item.id.delete(1)") is True
    assert q(db, "result = db.item.id.delete(1)") is False
    assert q(db, "result = db.item.sku.delete('sku1')") is True
    assert q(db, "result = db.item.delete(db.item.id.find(3))") is True
    assert q(db, "result = db.item.by_owner_kind.delete((ctx.identity,))") == 2
    assert q(db, "result = db.item.count()") == 0
    assert q(db, "result = list(db.item.sku.filter(Range()))") == []


def test_filter_equality_prefix_and_range(db: Database) -> None:
    assert q(db, "result = [r.sku for r in db.item.by_owner_kind.filter((ctx.sender, 'hat'))]") == ["sku0", "sku1"]
    assert q(db, "result = [r.sku for r in db.item.by_owner_kind.filter((ctx.sender,))]") == ["sku0", "sku1", "sku2"]
    assert q(db, "result = [r.price for r in db.item.price.filter(Range(3, 7))]") == [3, 5]
    assert q(db, "result = [r.price for r in db.item.price.filter(Range(3, 7, lo_inclusive=False, hi_inclusive=True))]") == [5, 7]
    assert q(db, "result = [r.price for r in db.item.price.filter(Range(hi=5))]") == [1, 3]
    assert q(db, "result = [r.price for r in db.item.price.filter(Range(lo=7), reverse=True)]") == [9, 7]
    assert q(db, "result = [r.kind for r in db.item.by_owner_kind.filter((ctx.sender, Range('hat', 'sock')))]") == ["hat", "hat", "shoe"]
    assert q(db, "result = [r.id for r in db.item.id.filter(Range(2, 4))]") == [2, 3]


@pytest.mark.parametrize(
    "index, spec",
    [
        ("by_owner_kind", "(ctx.sender, 'hat')"),
        ("by_owner_kind", "(ctx.sender,)"),
        ("by_owner_kind", "(ctx.identity, Range('hat', 'sock', hi_inclusive=True))"),
        ("price", "Range(3, 7)"),
        ("price", "Range(lo=7)"),
        ("price", "4"),
        ("note", "None"),
        ("sku", "'sku2'"),
        ("id", "Range(2, 4)"),
    ],
)
def test_an_index_counts_what_filter_yields(db: Database, index: str, spec: str) -> None:
    counted, listed = q(db, f"result = (db.item.{index}.count({spec}), len(list(db.item.{index}.filter({spec}))))")
    assert counted == listed


def test_optional_columns_index_none_first(db: Database) -> None:
    q(db, "db.item.id.update(msgspec.structs.replace(db.item.id.find(5), note='x'))")
    assert q(db, "result = [r.id for r in db.item.note.filter(None)]") == [1, 2, 3, 4]
    assert q(db, "result = [r.id for r in db.item.note.filter('x')]") == [5]


def test_iter_count_clear(db: Database) -> None:
    assert q(db, "result = [r.id for r in db.item.iter()]") == [1, 2, 3, 4, 5]
    assert q(db, "result = db.item.clear()") == 5
    assert q(db, "result = (db.item.count(), list(db.item.price.filter(Range())))") == (0, [])


def test_delete_first_deletes_the_lowest_keys_with_their_index_entries(db: Database) -> None:
    assert q(db, "result = db.item.delete_first(2)") == 2
    assert q(db, "result = [r.id for r in db.item.iter()]") == [3, 4, 5]
    # the unique and btree entries went with the rows: their values are free and unfound
    assert q(db, "result = (db.item.sku.find('sku0'), [r.id for r in db.item.price.filter(Range(0, 6))])") == (None, [5])
    assert q(db, "result = db.item.insert(Item(0, 'sku0', ctx.sender, 'x', 4)).id") == 6
    assert q(db, "result = (db.item.delete_first(0), db.item.delete_first(-1), db.item.count())") == (0, 0, 4)
    assert q(db, "result = (db.item.delete_first(10), db.item.count())") == (4, 0)


def test_delete_first_is_logged_as_deletes_and_rolls_back_with_its_call(db: Database) -> None:
    from stdbmod.errors import ReducerFailed

    with pytest.raises(ReducerFailed):
        q(db, "db.item.delete_first(3); raise RuntimeError('no')")
    assert q(db, "result = db.item.count()") == 5
    q(db, "db.item.delete_first(1)")
    record = db.commit_log()[-1]
    (change,) = [c for c in record.changes if c.table == "item"]
    assert (len(change.deletes), change.inserts) == (1, [])


def test_reads_outside_reducers_are_read_only(db: Database) -> None:
    with db.read() as view:
        assert view.db.item.count() == 5
        assert view.db.item.sku.find("sku4").price == 1
        with pytest.raises(PermissionError):
            view.db.item.insert(Item(0, "x", A, "x", 1))
        with pytest.raises(PermissionError):
            view.db.item.delete_first(1)


def test_wrong_row_type_is_an_error(db: Database) -> None:
    from stdbmod.errors import ReducerFailed

    with pytest.raises(ReducerFailed):
        q(db, "db.item.insert(('not', 'a', 'row'))")


def test_an_indexed_value_too_long_for_a_key_is_a_clear_error(db: Database) -> None:
    with pytest.raises(KeyTooLarge, match="too long"):
        q(db, "db.item.insert(Item(0, 'x' * 600, ctx.sender, 'x', 1))")
    assert q(db, "result = db.item.count()") == 5


def test_unknown_table_or_column(db: Database) -> None:
    from stdbmod.errors import ReducerFailed

    with pytest.raises(ReducerFailed):
        q(db, "db.nope.count()")
    with pytest.raises(ReducerFailed):
        q(db, "db.item.kind.find('hat')")  # kind has no index of its own
    logs = db.logs()
    assert "NoSuchTable: no table named 'nope'" in logs[-2].message
    assert "NoSuchAttribute: table item has no column or index 'kind'" in logs[-1].message


def test_a_name_the_context_does_not_hold_is_logged_as_such(db: Database) -> None:
    """ReducerContext has no `__getattr__` (every read of `ctx` would pay for it): the call's
    log still names the error NoSuchAttribute, and a reducer still catches an AttributeError."""
    from stdbmod.errors import ReducerFailed

    with pytest.raises(ReducerFailed):
        q(db, "ctx.sendr")
    assert "NoSuchAttribute: ReducerContext has no 'sendr'" in db.logs()[-1].message
    assert q(db, "result = getattr(ctx, 'sendr', 'fallback')") == "fallback"


def test_a_read_view_raises_the_same_errors(db: Database) -> None:
    """A read's view makes handles on first use, the writer's all at once: the same names fail
    the same way (the writer's through the call's log, above)."""
    with db.read() as view:
        with pytest.raises(NoSuchTable, match="no table named 'nope'"):
            _ = view.db.nope
        with pytest.raises(NoSuchAttribute, match="table item has no column or index 'kind'"):
            _ = view.db.item.kind
        assert view.db.table("item") is view.db.item


def test_the_writers_view_holds_every_handle_and_answers_no_attribute_hook(db: Database) -> None:
    """Every attribute read of an object whose class has `__getattr__` goes through CPython's
    slower hook: the writer's view and handles have none, and hold what a read view makes."""
    names = q(
        db,
        "result = [hasattr(type(db), '__getattr__'), hasattr(type(db.item), '__getattr__'),"
        " sorted(n for n in vars(db) if not n.startswith('_')), sorted(vars(db.item))]",
    )
    assert names[:3] == [False, False, ["item"]]
    assert {"id", "sku", "price", "note", "by_owner_kind"} <= set(names[3])
    assert q(db, "result = db.table('item') is db.item and db.item.sku.find('sku0').price") == 5


named = Module("named")


@named.table
class Table(msgspec.Struct):  # a table named like ctx.db's own method
    id: Annotated[int, PrimaryKey()]


@named.reducer
def fill(ctx: ReducerContext) -> int:
    ctx.db.table("table").insert(Table(1))
    return ctx.db.table("table").count()


def test_a_table_named_like_a_method_of_the_view_is_reached_by_name(make_db: Callable[..., Database]) -> None:
    """`ctx.db.table` stays the method in both views; `ctx.db.table("table")` is the table."""
    d = make_db(named)
    assert d.call("fill", sender=A) == 1
    with d.read() as view:
        assert view.db.table("table").count() == 1


def test_the_owner_fixture_is_not_the_sender(db: Database) -> None:
    assert db.owner == OWNER


def test_a_typed_handle_by_row_type_is_the_same_table(db: Database) -> None:
    """`ctx.db.of(Item)` is `ctx.db.item`, typed for editors (insert takes and returns an Item)."""
    assert q(db, "result = db.of(Item) is db.item and db.of(Item).insert(Item(0, 'typed', ctx.sender, 'x', 1)).id") == 6
    with db.read() as view:
        row: Item | None = view.db.of(Item).sku.find("typed")
        assert row is not None and row.kind == "x"
        with pytest.raises(NoSuchTable, match="no table holds Range rows"):
            view.db.of(Range)  # type: ignore[type-var]
