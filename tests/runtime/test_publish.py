"""Publishing, init, reopening, and schema changes."""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Annotated

import msgspec
import pytest

from stdbmod import Database, Index, ManualClock, Module, PrimaryKey, ReducerContext
from stdbmod.errors import CallError, DatabaseAlreadyOpen, DatabaseNotFound, SchemaMismatch
from tests.conftest import ALICE, OWNER


def make_module(extra_column: bool = False, int_name: bool = False, extra_table: bool = False, indexed: bool = False) -> Module:
    m = Module("pub")

    if int_name:

        class Row(msgspec.Struct):
            id: Annotated[int, PrimaryKey(auto_inc=True)]
            name: int

    elif extra_column:

        class Row(msgspec.Struct):  # type: ignore[no-redef]
            id: Annotated[int, PrimaryKey(auto_inc=True)]
            name: str
            tag: str = "none"

    elif indexed:

        class Row(msgspec.Struct):  # type: ignore[no-redef]
            id: Annotated[int, PrimaryKey(auto_inc=True)]
            name: Annotated[str, Index()]

    else:

        class Row(msgspec.Struct):  # type: ignore[no-redef]
            id: Annotated[int, PrimaryKey(auto_inc=True)]
            name: str

    m.table(Row)

    if extra_table:

        @m.table
        class Other(msgspec.Struct):
            id: Annotated[int, PrimaryKey()]

    @m.init
    def init(ctx: ReducerContext) -> None:
        ctx.db.row.insert(Row(0, ctx.sender.to_hex() if not int_name else 1))  # type: ignore[arg-type]

    @m.reducer
    def add(ctx: ReducerContext, name: str) -> None:
        ctx.db.row.insert(Row(0, name))  # type: ignore[arg-type]

    return m


def rows(db: Database) -> list[object]:
    with db.read() as v:
        return [r.name for r in v.db.row.iter()]


def test_init_runs_once_as_the_publisher(tmp_path: Path) -> None:
    db = Database.create(tmp_path, make_module(), owner=OWNER, clock=ManualClock())
    assert rows(db) == [OWNER.to_hex()] and db.owner == OWNER
    identity = db.identity
    db.close()
    db = Database.open(tmp_path, make_module(), clock=ManualClock())
    assert rows(db) == [OWNER.to_hex()]
    assert db.identity == identity and db.owner == OWNER and db.name == "pub"
    assert [r.kind for r in db.commit_log()] == ["init"]
    db.close()


def test_a_failing_init_fails_the_publish_and_leaves_nothing(tmp_path: Path) -> None:
    m = Module("bad")

    @m.init
    def init(ctx: ReducerContext) -> None:
        raise RuntimeError("no")

    from stdbmod.errors import ReducerFailed

    with pytest.raises(ReducerFailed):
        Database.create(tmp_path, m, owner=OWNER)
    with pytest.raises(DatabaseNotFound):
        Database.open(tmp_path, m)


def test_publishing_over_an_existing_database_is_refused(tmp_path: Path) -> None:
    Database.create(tmp_path, make_module(), owner=OWNER).close()
    with pytest.raises(CallError, match="already exists"):
        Database.create(tmp_path, make_module(), owner=ALICE)


def test_names_are_checked(tmp_path: Path) -> None:
    with pytest.raises(CallError, match="must match"):
        Database.create(tmp_path, make_module(), owner=OWNER, name="Bad Name!")


def test_opening_nothing_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(DatabaseNotFound):
        Database.open(tmp_path / "missing", make_module())


def test_opening_twice_in_one_process_is_refused(tmp_path: Path) -> None:
    db = Database.create(tmp_path, make_module(), owner=OWNER)
    with pytest.raises(DatabaseAlreadyOpen):
        Database.open(tmp_path, make_module())
    db.close()


def test_an_incompatible_change_is_refused_naming_table_and_column(tmp_path: Path) -> None:
    Database.create(tmp_path, make_module(), owner=OWNER).close()
    with pytest.raises(SchemaMismatch, match=r"table row: column name changed type from str to int"):
        Database.open(tmp_path, make_module(int_name=True))
    empty = Module("pub")
    with pytest.raises(SchemaMismatch, match="table row holds data"):
        Database.open(tmp_path, empty)
    # refused opens leave it usable with the right module
    db = Database.open(tmp_path, make_module())
    db.close()


def test_adding_a_table_or_a_defaulted_column_is_allowed(tmp_path: Path) -> None:
    db = Database.create(tmp_path, make_module(), owner=OWNER)
    db.call("add", "x", sender=ALICE)
    db.close()
    db = Database.open(tmp_path, make_module(extra_table=True, extra_column=False))
    db.close()
    db = Database.open(tmp_path, make_module(extra_table=True, extra_column=True))
    with db.read() as v:
        assert [r.tag for r in v.db.row.iter()] == ["none", "none"]
    db.call("add", "y", sender=ALICE)
    db.close()
    db = Database.open(tmp_path, make_module(extra_table=True, extra_column=True))
    assert rows(db) == [OWNER.to_hex(), "x", "y"]
    db.close()


def colours(*values: str) -> type[enum.Enum]:
    """An enum type `Colour` with these members (the schema names it by its type name)."""
    return enum.Enum("Colour", [(v.upper(), v) for v in values], type=str)  # type: ignore[return-value]


_Colour = colours("red", "blue")
_MoreColours = colours("red", "blue", "green")  # a member appended
_Reordered = colours("blue", "red")


def colour_module(colour: type[enum.Enum]) -> Module:
    m = Module("pub")
    # real types, not strings: the enum is a local value
    Paint = msgspec.defstruct(
        "Paint", [("id", Annotated[int, PrimaryKey(auto_inc=True)]), ("colour", Annotated[colour, Index()]), ("also", list[colour | None])]  # type: ignore[valid-type]
    )
    m.table(Paint)

    @m.reducer
    def paint(ctx: ReducerContext, name: str) -> None:
        c = colour(name)
        ctx.db.paint.insert(Paint(0, c, [c, None]))

    return m


def test_an_enum_gaining_members_at_the_end_is_compatible(tmp_path: Path) -> None:
    db = Database.create(tmp_path, colour_module(_Colour), owner=OWNER)
    db.call("paint", "blue", sender=ALICE)
    db.call("paint", "red", sender=ALICE)
    db.close()
    db = Database.open(tmp_path, colour_module(_MoreColours))
    db.call("paint", "green", sender=ALICE)
    with db.read() as v:  # old rows decode as the new enum, and the index still finds them
        new = _MoreColours
        assert [(p.colour, p.also) for p in v.db.paint.iter()] == [(new(c), [new(c), None]) for c in ("blue", "red", "green")]
        assert [p.id for p in v.db.paint.colour.filter(new("red"))] == [2]
    db.close()
    # the stored schema now has the new members: going back, or reordering, is refused
    with pytest.raises(SchemaMismatch, match=r"column colour changed type from enum Colour\('red', 'blue', 'green'\)"):
        Database.open(tmp_path, colour_module(_Colour))
    with pytest.raises(SchemaMismatch, match="column colour changed type"):
        Database.open(tmp_path, colour_module(_Reordered))


def test_enum_member_lists_are_compared_as_values() -> None:
    from stdbmod.runtime.schema_check import same_or_appended

    assert same_or_appended("enum E('a', 'b') | None", "enum E('a', 'b', 'c)') | None")
    assert same_or_appended("list[enum E(1, 2)]", "list[enum E(1, 2, 3)]")
    assert not same_or_appended("enum E('a', 'b')", "enum E('b', 'a', 'c')")  # reordered
    assert not same_or_appended("enum E('a', 'b')", "enum F('a', 'b', 'c')")  # another type
    assert not same_or_appended("enum E('a', 'b')", "enum E('a')")  # a member removed
    assert not same_or_appended("enum E('a')", "enum E('a', 'b') | None")  # the shape changed
