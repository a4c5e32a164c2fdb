"""Tables without a primary key (SpacetimeDB allows them: the whole row is its identity):
declare, insert (an equal row is a no-op), iterate, filter by index, delete an equal row, unique
columns, SQL, replays, integrity and subscriptions."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import msgspec
import pytest

from stdbmod import Database, Identity, Module, Range, ReducerContext, Unique
from stdbmod.errors import UniqueConstraintViolation
from stdbmod.runtime import apply_changes, reexecute
from stdbmod.runtime.sql import execute
from stdbmod.schema import Index
from tests.conftest import ALICE, OWNER

m = Module("keyless")


@m.table(public=True, indexes={"by_room_at": ("room", "at")})
class Event(msgspec.Struct):
    room: Annotated[str, Index()]
    at: int
    text: str
    tags: list[str] = []


@m.table
class Nick(msgspec.Struct):
    who: Identity
    nick: Annotated[str, Unique()]


@m.reducer
def post(ctx: ReducerContext, room: str, at: int, text: str) -> None:
    ctx.db.event.insert(Event(room, at, text, [room]))


@m.reducer
def unpost(ctx: ReducerContext, room: str, at: int, text: str) -> bool:
    return ctx.db.event.delete(Event(room, at, text, [room]))


@m.reducer
def nick(ctx: ReducerContext, name: str) -> str:
    taken = ctx.db.nick.try_insert(Nick(ctx.sender, name))
    return "ok" if isinstance(taken, Nick) else str(taken)


@m.reducer
def hand_over(ctx: ReducerContext, name: str, to: Identity) -> None:
    """`update` through a unique column: the row with that nick, replaced (a new whole row)."""
    ctx.db.nick.nick.update(Nick(to, name))


@pytest.fixture
def db(make_db: Callable[..., Database]) -> Database:
    return make_db(m)


def _events(db: Database) -> list[tuple[str, int, str]]:
    with db.read() as view:
        return sorted((e.room, e.at, e.text) for e in view.db.event.iter())


def test_insert_iterate_filter_and_delete_equal_rows(db: Database) -> None:
    for room, at, text in [("a", 1, "hi"), ("a", 2, "yo"), ("b", 1, "hi"), ("a", 1, "hi")]:
        db.call("post", room, at, text, sender=ALICE)
    assert _events(db) == [("a", 1, "hi"), ("a", 2, "yo"), ("b", 1, "hi")]  # the equal row once
    with db.read() as view:
        assert sorted(e.at for e in view.db.event.room.filter("a")) == [1, 2]
        assert [e.text for e in view.db.event.by_room_at.filter(("a", Range(2)))] == ["yo"]
        assert view.db.event.room.count("b") == 1 and view.db.event.count() == 3
    assert db.call("unpost", "a", 1, "other", sender=ALICE) is False  # no equal row
    assert db.call("unpost", "a", 1, "hi", sender=ALICE) is True
    assert db.call("unpost", "a", 1, "hi", sender=ALICE) is False
    assert _events(db) == [("a", 2, "yo"), ("b", 1, "hi")]
    assert db.check_integrity() == []


def test_unique_columns_of_a_keyless_table(db: Database) -> None:
    assert db.call("nick", "al", sender=ALICE) == "ok"
    assert db.call("nick", "al", sender=OWNER) == "duplicate value 'al' for unique column nick.nick"
    db.call("hand_over", "al", OWNER, sender=ALICE)
    with db.read() as view:
        assert [(n.who, n.nick) for n in view.db.nick.iter()] == [(OWNER, "al")]
        assert view.db.nick.nick.find("al") == Nick(OWNER, "al")
    assert db.check_integrity() == []
    with pytest.raises(UniqueConstraintViolation):
        execute(db, "INSERT INTO nick (who, nick) VALUES (0x" + ALICE.to_hex() + ", 'al')", OWNER)


def test_sql_replays_and_subscriptions(db: Database, make_db: Callable[..., Database]) -> None:
    updates: list[Any] = []
    sub = db.subscribe(["SELECT * FROM event WHERE room = 'a'"], updates.append, sender=ALICE, inline=True)
    db.call("post", "a", 1, "hi", sender=ALICE)
    db.call("post", "b", 1, "hi", sender=ALICE)
    execute(db, "UPDATE event SET text = 'hey' WHERE room = 'a'", OWNER)
    rows = execute(db, "SELECT * FROM event WHERE room = 'a'", ALICE)[0].rows
    assert [r[2] for r in rows] == ["hey"]
    execute(db, "DELETE FROM event WHERE room = 'b'", OWNER)
    assert _events(db) == [("a", 1, "hey")]
    assert sub.sync()
    sub.unsubscribe()
    # the subscription saw its rows, the post to room a, and the UPDATE (a delete and an insert)
    assert [type(u).__name__ for u in updates] == ["Applied", "Update", "Update"]
    assert [u.kind for u in updates[1:]] == ["call", "sql"]
    for replay in (apply_changes, reexecute):
        replica = make_db(m, owner=db.owner, identity=db.identity, run_init=False)
        replay(replica, db.commit_log())
        assert replica.state_hash() == db.state_hash()
