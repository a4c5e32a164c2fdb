"""An update rewrites exactly the index entries whose keys changed. Two ways find the changed
columns (runtime/transaction.py): C's comparisons over the indexed values for tables whose
indexed columns cannot hold a float, a Python loop otherwise, because -0.0 == 0.0 while their
keys differ. Both must leave every index as a fresh insert would."""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Annotated

import msgspec

from stdbmod import Database, Identity, Index, Module, PrimaryKey, ReducerContext

OWNER = Identity.from_claims("test", "update-indexes")


class Color(str, enum.Enum):
    RED = "red"
    BLUE = "blue"


class Exact(msgspec.Struct):  # no float among the indexed columns: the C comparison
    id: Annotated[int, PrimaryKey()]
    color: Annotated[Color, Index()]
    n: Annotated[int, Index()]
    tag: Annotated[str | None, Index()]
    note: str = ""


class Floaty(msgspec.Struct):  # a float column: the Python loop
    id: Annotated[int, PrimaryKey()]
    x: Annotated[float, Index()]
    n: Annotated[int, Index()]


m = Module("update_indexes")
m.table(Exact, indexes={"by_color_n": ("color", "n")})
m.table(Floaty)


@m.reducer
def put_exact(ctx: ReducerContext, row: Exact) -> None:
    if ctx.db.exact.id.find(row.id) is None:
        ctx.db.exact.insert(row)
    else:
        ctx.db.exact.id.update(row)


@m.reducer
def put_floaty(ctx: ReducerContext, row: Floaty) -> None:
    if ctx.db.floaty.id.find(row.id) is None:
        ctx.db.floaty.insert(row)
    else:
        ctx.db.floaty.id.update(row)


def ids(rows: object) -> list[int]:
    return sorted(r.id for r in rows)  # type: ignore[attr-defined]


def test_updates_keep_every_index_as_an_insert_would(tmp_path: Path) -> None:
    db = Database.create(tmp_path / "db", m, owner=OWNER, durable=False)
    try:
        db.call("put_exact", Exact(1, Color.RED, 1, "a"), sender=OWNER)
        db.call("put_exact", Exact(2, Color.RED, 2, None), sender=OWNER)
        db.call("put_exact", Exact(1, Color.RED, 1, "a", note="no indexed column changed"), sender=OWNER)
        db.call("put_exact", Exact(2, Color.BLUE, 2, "b"), sender=OWNER)  # color and tag
        db.call("put_exact", Exact(1, Color.RED, 3, None), sender=OWNER)  # n and tag
        with db.read() as v:
            t = v.db.exact
            assert ids(t.color.filter(Color.RED)) == [1] and ids(t.color.filter(Color.BLUE)) == [2]
            assert ids(t.n.filter(1)) == [] and ids(t.n.filter(3)) == [1] and ids(t.n.filter(2)) == [2]
            assert ids(t.tag.filter(None)) == [1] and ids(t.tag.filter("a")) == [] and ids(t.tag.filter("b")) == [2]
            assert ids(t.by_color_n.filter((Color.RED, 3))) == [1] and ids(t.by_color_n.filter((Color.RED, 1))) == []
            assert t.n.count(1) == 0 and t.color.count(Color.RED) == 1
    finally:
        db.close()


def test_a_float_going_from_zero_to_minus_zero_moves_its_index_entry(tmp_path: Path) -> None:
    db = Database.create(tmp_path / "db", m, owner=OWNER, durable=False)
    try:
        db.call("put_floaty", Floaty(1, 0.0, 1), sender=OWNER)
        db.call("put_floaty", Floaty(1, -0.0, 1), sender=OWNER)  # equal, but another key
        with db.read() as v:
            assert ids(v.db.floaty.x.filter(-0.0)) == [1]
            assert ids(v.db.floaty.x.filter(0.0)) == []
    finally:
        db.close()
