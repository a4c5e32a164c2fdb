"""Declaring modules: what is accepted and what is refused, with the reason."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import msgspec
import pytest

from stdbmod import Database, Index, Module, PrimaryKey, ReducerContext, ScheduleAt, Timestamp, Unique
from stdbmod.errors import ArgumentError, SchemaError
from stdbmod.runtime import reexecute
from tests.conftest import OWNER


def test_table_name_is_snake_case_and_describe_lists_constraints() -> None:
    m = Module("m")

    @m.table(public=True, indexes={"by_ab": ("a", "b")})
    class UserProfile(msgspec.Struct):
        id: Annotated[int, PrimaryKey(auto_inc=True)]
        email: Annotated[str, Unique()]
        a: Annotated[int, Index()]
        b: str

    d = m.tables["user_profile"].describe()
    assert d["primary_key"] == "id" and d["auto_inc"] and d["public"]
    assert d["indexes"] == {
        "a": {"columns": ["a"], "unique": False},
        "by_ab": {"columns": ["a", "b"], "unique": False},
        "email": {"columns": ["email"], "unique": True},
    }


@pytest.mark.parametrize(
    "body, message",
    [
        ("a: Annotated[int, PrimaryKey()]\n    b: Annotated[int, PrimaryKey()]", "two primary keys"),
        ("a: Annotated[str, PrimaryKey(auto_inc=True)]", "auto_inc needs an int"),
        ("a: Annotated[int, PrimaryKey()]\n    b: Annotated[list[int], Index()]", "cannot be indexed"),
        ("count: Annotated[int, PrimaryKey()]", "may not be named"),
    ],
)
def test_bad_tables_are_refused(body: str, message: str) -> None:
    ns: dict[str, Any] = {"msgspec": msgspec, "Annotated": Annotated, "PrimaryKey": PrimaryKey, "Index": Index}
    exec(compile(f"class T(msgspec.Struct):\n    {body}\n", "<t>", "exec", dont_inherit=True), ns)
    with pytest.raises(SchemaError, match=message):
        Module("m").table(ns["T"])


def test_a_table_must_be_a_struct() -> None:
    with pytest.raises(SchemaError, match="msgspec.Struct"):
        Module("m").table(dict)


def test_multi_column_index_names_real_columns() -> None:
    class T(msgspec.Struct):
        id: Annotated[int, PrimaryKey()]

    with pytest.raises(SchemaError, match="unknown columns"):
        Module("m").table(T, indexes={"ix": ("id", "nope")})


def test_schedule_tables_need_scheduled_id_and_at() -> None:
    class Bad(msgspec.Struct):
        id: Annotated[int, PrimaryKey(auto_inc=True)]
        scheduled_at: ScheduleAt

    with pytest.raises(SchemaError, match="scheduled_id"):
        Module("m").table(Bad, scheduled="tick")


def test_schedule_table_must_name_a_reducer_taking_its_row() -> None:
    m = Module("m")

    @m.table(scheduled="tick")
    class Timer(msgspec.Struct):
        scheduled_id: Annotated[int, PrimaryKey(auto_inc=True)]
        scheduled_at: ScheduleAt

    with pytest.raises(SchemaError, match="unknown reducer"):
        m.finalize()

    @m.reducer
    def tick(ctx: ReducerContext, timer: Timer) -> None: ...

    m.finalize()
    assert m.reducers["tick"].kind == "scheduled" and not m.reducers["tick"].client_callable


def test_reducers_need_typed_positional_parameters() -> None:
    m = Module("m")
    with pytest.raises(SchemaError, match="type annotation"):

        @m.reducer
        def f(ctx, x):  # type: ignore[no-untyped-def]
            ...

    with pytest.raises(SchemaError, match="positional"):

        @m.reducer
        def g(ctx: ReducerContext, *, x: int) -> None: ...

    with pytest.raises(SchemaError, match="context"):

        @m.reducer
        def h() -> None: ...

    with pytest.raises(SchemaError, match="only the context"):

        @m.init
        def i(ctx: ReducerContext, x: int) -> None: ...


def test_duplicate_names_are_refused_also_through_include() -> None:
    a, b = Module("a"), Module("b")

    @a.reducer
    def f(ctx: ReducerContext) -> None: ...

    with pytest.raises(SchemaError, match="twice"):
        a.reducer(f)

    @b.reducer(name="f")
    def other(ctx: ReducerContext) -> None: ...

    with pytest.raises(SchemaError, match="twice"):
        a.include(b)


def test_include_merges_tables_reducers_and_init_hooks() -> None:
    lib, app = Module("lib"), Module("app")

    @lib.table
    class Thing(msgspec.Struct):
        id: Annotated[int, PrimaryKey()]

    @lib.init
    def lib_init(ctx: ReducerContext) -> None: ...

    @app.init
    def app_init(ctx: ReducerContext) -> None: ...

    app.include(lib)
    assert "thing" in app.tables
    assert [r.name for r in app.lifecycle["init"]] == ["app_init", "lib_init"]
    assert app.table_for(Thing).name == "thing"


class Post(msgspec.Struct):
    room: str
    text: str = ""
    pinned: bool = False


def test_a_spread_reducer_takes_its_structs_fields_as_arguments(tmp_path: Path) -> None:
    m = Module("spread")

    @m.table
    class Seen(msgspec.Struct):
        id: Annotated[int, PrimaryKey(auto_inc=True)]
        post: Post

    @m.reducer(spread=True)
    def post(ctx: ReducerContext, p: Post) -> Post:
        assert type(p) is Post
        ctx.db.seen.insert(Seen(0, p))
        return p

    params = m.reducers["post"].describe()["params"]
    assert [(p["name"], p["type"], p["required"]) for p in params] == [("room", "str", True), ("text", "str", False), ("pinned", "bool", False)]
    with Database.create(tmp_path / "db", m, owner=OWNER, durable=False) as db:
        assert db.call("post", "general", sender=OWNER) == Post("general")
        assert db.call("post", Post("news", "hi", True), sender=OWNER) == Post("news", "hi", True)  # one instance, from Python
        assert db.call_json("post", b'["x", "y"]', sender=OWNER) == Post("x", "y")
        with pytest.raises(ArgumentError):
            db.call("post", sender=OWNER)  # `room` is required
        with pytest.raises(ArgumentError):
            db.call("post", Post(1, "typed wrong"), sender=OWNER)  # type: ignore[arg-type]  # an instance is validated too
        copy = Database.create(tmp_path / "copy", m, owner=OWNER, run_init=False, durable=False)
        with copy:
            reexecute(copy, db.commit_log()[1:])  # the log stores the fields, as for any reducer
            assert copy.state_hash() == db.state_hash()


def test_spread_needs_one_struct_parameter() -> None:
    m = Module("m")
    with pytest.raises(SchemaError, match="spread=True needs one parameter"):

        @m.reducer(spread=True)
        def f(ctx: ReducerContext, a: int) -> None: ...

    with pytest.raises(SchemaError, match="spread=True needs one parameter"):

        @m.reducer(spread=True)
        def g(ctx: ReducerContext, a: Post, b: Post) -> None: ...


if TYPE_CHECKING:
    from tests.nowhere import OnlyForTypeCheckers


def test_only_parameter_annotations_are_resolved() -> None:
    """Parameter types come from typing.get_type_hints (string annotations too); the context's and
    the return's annotations are never evaluated, so they may name what only type checkers see."""
    m = Module("m")

    @m.reducer
    def f(ctx: OnlyForTypeCheckers, when: "Timestamp", note: "str | None" = None) -> OnlyForTypeCheckers:  # noqa: UP037
        return None

    assert [(n, t) for n, t, _ in m.reducers["f"].params] == [("when", Timestamp), ("note", str | None)]
    with pytest.raises(SchemaError, match="cannot resolve the type of x"):

        @m.reducer
        def g(ctx: ReducerContext, x: Missing) -> None: ...  # type: ignore[name-defined]  # noqa: F821
