"""Adding, removing and redefining indexes on open: rebuilt from the rows, in one transaction."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import msgspec
import pytest

from stdbmod import Database, Index, ManualClock, Module, PrimaryKey, ReducerContext, Unique
from stdbmod.errors import SchemaMismatch, UniqueConstraintViolation
from stdbmod.runtime import spaces
from tests.conftest import ALICE, OWNER


def module(name_index: str = "", indexes: dict[str, tuple[str, ...]] | None = None) -> Module:
    """A `thing` table whose `name` column is plain, or carries an Index() or a Unique()."""
    m = Module("mig")
    if name_index == "index":

        class Thing(msgspec.Struct):
            id: Annotated[int, PrimaryKey(auto_inc=True)]
            name: Annotated[str, Index()]
            size: int

    elif name_index == "unique":

        class Thing(msgspec.Struct):  # type: ignore[no-redef]
            id: Annotated[int, PrimaryKey(auto_inc=True)]
            name: Annotated[str, Unique()]
            size: int

    else:

        class Thing(msgspec.Struct):  # type: ignore[no-redef]
            id: Annotated[int, PrimaryKey(auto_inc=True)]
            name: str
            size: int

    m.table(Thing, indexes=indexes or {})

    @m.reducer
    def add(ctx: ReducerContext, name: str, size: int) -> None:
        ctx.db.thing.insert(Thing(0, name, size))

    @m.reducer
    def resize(ctx: ReducerContext, id: int, size: int) -> None:
        row = ctx.db.thing.id.find(id)
        ctx.db.thing.id.update(msgspec.structs.replace(row, size=size))

    return m


def entries(db: Database, index: str) -> int:
    with db.storage.begin_read() as r:
        return r.count(spaces.index("thing", index))


def test_an_added_index_is_built_from_the_rows_and_kept_in_step(tmp_path: Path) -> None:
    db = Database.create(tmp_path, module(), owner=OWNER, clock=ManualClock())
    for name, size in [("b", 2), ("a", 1), ("b", 3)]:
        db.call("add", name, size, sender=ALICE)
    db.close()
    db = Database.open(tmp_path, module("index", {"by_size": ("size", "name")}), clock=ManualClock())
    with db.read() as v:
        assert sorted(t.size for t in v.db.thing.name.filter("b")) == [2, 3]
        assert [t.size for t in v.db.thing.by_size.filter((2,))] == [2]
    db.call("resize", 1, 7, sender=ALICE)  # the rebuilt index is maintained like any other
    with db.read() as v:
        assert [t.id for t in v.db.thing.by_size.filter((7,))] == [1] and list(v.db.thing.by_size.filter((2,))) == []
    assert db.check_integrity() == []
    assert [r.kind for r in db.commit_log()] == ["init", "call", "call", "call", "call"]  # a rebuild is no call
    db.close()


def test_a_removed_index_is_emptied_and_a_redefined_one_rebuilt(tmp_path: Path) -> None:
    db = Database.create(tmp_path, module("index", {"by_size": ("size",)}), owner=OWNER, clock=ManualClock())
    for name, size in [("x", 5), ("y", 6)]:
        db.call("add", name, size, sender=ALICE)
    db.close()
    db = Database.open(tmp_path, module("", {"by_size": ("name", "size")}), clock=ManualClock())
    assert entries(db, "name") == 0 and entries(db, "by_size") == 2
    with db.read() as v:
        assert [t.size for t in v.db.thing.by_size.filter(("y",))] == [6]
    assert db.check_integrity() == []
    db.close()
    db = Database.open(tmp_path, module("index", {"by_size": ("name", "size")}), clock=ManualClock())
    assert entries(db, "name") == 2 and db.check_integrity() == []  # and back again
    db.close()


def test_a_unique_index_the_rows_break_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    db = Database.create(tmp_path, module("index"), owner=OWNER, clock=ManualClock())
    for name in ("dup", "solo", "dup"):
        db.call("add", name, 1, sender=ALICE)
    db.close()
    with pytest.raises(SchemaMismatch, match=r"table thing: cannot add unique index name: two rows share name = 'dup'"):
        Database.open(tmp_path, module("unique"))
    db = Database.open(tmp_path, module("index"), clock=ManualClock())  # still the old schema, old index
    assert entries(db, "name") == 3 and db.check_integrity() == []
    assert db.meta.schema["tables"][0]["indexes"]["name"]["unique"] is False
    db.close()


def test_a_unique_index_the_rows_keep_is_added_and_enforced(tmp_path: Path) -> None:
    db = Database.create(tmp_path, module(), owner=OWNER, clock=ManualClock())
    for name in ("p", "q"):
        db.call("add", name, 1, sender=ALICE)
    db.close()
    db = Database.open(tmp_path, module("unique"), clock=ManualClock())
    with db.read() as v:
        assert v.db.thing.name.find("q").id == 2
    with pytest.raises(UniqueConstraintViolation, match="thing.name"):
        db.call("add", "p", 2, sender=ALICE)
    db.close()


def test_each_rebuilt_index_is_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    db = Database.create(tmp_path, module("index"), owner=OWNER, clock=ManualClock())
    db.call("add", "a", 1, sender=ALICE)
    db.close()
    with caplog.at_level("INFO", logger="stdbmod"):
        Database.open(tmp_path, module("", {"by_size": ("size",)}), clock=ManualClock()).close()
    assert [r.getMessage().split(" in ")[0] for r in caplog.records] == [
        "schema change: dropped index thing.name",
        "schema change: built index thing.by_size from 1 rows",
    ]
