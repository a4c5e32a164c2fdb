"""SpacetimeDB behaviours reproduced exactly (issue 21): delete of an equal row, try_insert, log
levels, lifecycle failures named by their hook, the owner's private calls, lifecycle calls
refused with 400, the scheduling horizon, arguments keyed by name, dangling connections, SQL
DML logged with its sender."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import msgspec
import pytest

from stdbmod import At, Database, Every, Identity, ManualClock, Module, PrimaryKey, ReducerContext, ScheduleAt, TimeDuration, Unique, codec
from stdbmod.errors import (
    ArgumentError,
    LifecycleCall,
    NoSuchReducer,
    ReducerFailed,
    ScheduleTooFar,
    UniqueConstraintViolation,
)
from stdbmod.runtime.schedules import MAX_DELAY_MICROS
from tests.conftest import ALICE, OWNER

m = Module("fidelity")


@m.table
class Item(msgspec.Struct):
    id: Annotated[int, PrimaryKey(auto_inc=True)]
    name: Annotated[str, Unique()]
    qty: int = 0


@m.table
class Seen(msgspec.Struct):
    id: Annotated[int, PrimaryKey(auto_inc=True)]
    what: str
    who: Identity


@m.table(scheduled="ping")
class Ping(msgspec.Struct):
    scheduled_id: Annotated[int, PrimaryKey(auto_inc=True)]
    scheduled_at: ScheduleAt
    text: str


@m.client_connected
def on_connect(ctx: ReducerContext) -> None:
    ctx.db.seen.insert(Seen(0, f"connect {ctx.connection_id}", ctx.sender))


@m.client_disconnected
def on_disconnect(ctx: ReducerContext) -> None:
    ctx.db.seen.insert(Seen(0, f"disconnect {ctx.connection_id}", ctx.sender))
    if ctx.sender == ALICE:
        raise RuntimeError("alice's goodbye breaks")


@m.reducer
def add(ctx: ReducerContext, name: str, qty: int = 0) -> int:
    return ctx.db.item.insert(Item(0, name, qty)).id  # type: ignore[no-any-return]


@m.reducer
def delete_as(ctx: ReducerContext, id: int, name: str, qty: int) -> bool:
    return ctx.db.item.delete(Item(id, name, qty))


@m.reducer
def add_twice(ctx: ReducerContext, name: str) -> str:
    """try_insert: the second insert's violation is a value; the call goes on and commits."""
    first = ctx.db.item.try_insert(Item(0, name))
    second = ctx.db.item.try_insert(Item(0, name, 5))
    assert isinstance(first, Item) and isinstance(second, UniqueConstraintViolation)
    ctx.db.seen.insert(Seen(0, str(second), ctx.sender))
    return str(second)


@m.reducer
def log_at(ctx: ReducerContext, level: str) -> None:
    ctx.log("hello", level)


@m.reducer
def ping(ctx: ReducerContext, row: Ping) -> None:
    ctx.db.seen.insert(Seen(0, f"ping {row.text}", ctx.sender))


@m.reducer
def schedule_in(ctx: ReducerContext, micros: int, every: bool) -> str:
    at: ScheduleAt = Every(TimeDuration(micros)) if every else At(ctx.timestamp + TimeDuration(micros))
    result = ctx.db.ping.try_insert(Ping(0, at, "later"))
    return "ok" if isinstance(result, Ping) else f"refused: {result}"


@m.reducer
def schedule_raising(ctx: ReducerContext, micros: int) -> None:
    ctx.db.ping.insert(Ping(0, At(ctx.timestamp + TimeDuration(micros)), "far"))


bad_init = Module("badinit")


@bad_init.table
class Nothing(msgspec.Struct):
    id: Annotated[int, PrimaryKey()]


@bad_init.init
def my_broken_init(ctx: ReducerContext) -> None:
    raise RuntimeError("init breaks")


@pytest.fixture
def db(make_db: Callable[..., Database]) -> Database:
    return make_db(m)


def _items(db: Database) -> list[Item]:
    with db.read() as view:
        return list(view.db.item.iter())


def test_delete_row_deletes_only_an_equal_row(db: Database) -> None:
    item_id = db.call("add", "apple", 3, sender=ALICE)
    assert db.call("delete_as", item_id, "apple", 4, sender=ALICE) is False  # same key, another qty
    assert db.call("delete_as", item_id, "pear", 3, sender=ALICE) is False
    assert _items(db) == [Item(item_id, "apple", 3)]
    assert db.call("delete_as", item_id, "apple", 3, sender=ALICE) is True
    assert _items(db) == []
    assert db.call("delete_as", item_id, "apple", 3, sender=ALICE) is False


def test_try_insert_returns_the_row_or_the_error_and_the_call_goes_on(db: Database) -> None:
    message = db.call("add_twice", "plum", sender=ALICE)
    assert message == "duplicate value 'plum' for unique column item.name"
    assert [(i.name, i.qty) for i in _items(db)] == [("plum", 0)]  # the failed insert changed nothing
    with db.read() as view:
        assert [s.what for s in view.db.seen.iter()] == [message]


def test_log_levels_are_spacetimedbs_only(db: Database) -> None:
    for level in ("trace", "debug", "info", "warn", "error", "panic"):
        db.call("log_at", level, sender=ALICE)
    assert [line.level for line in db.logs()] == ["trace", "debug", "info", "warn", "error", "panic"]
    for bad in ("warning", "INFO", "fatal"):
        with pytest.raises(ReducerFailed):
            db.call("log_at", bad, sender=ALICE)
    last = db.logs(last=1)[0]
    assert last.level == "panic" and last.reducer == "log_at" and "log level 'fatal' is not one of" in last.message


def test_a_failing_lifecycle_hook_is_logged_under_its_own_name(db: Database, make_db: Callable[..., Database]) -> None:
    conn = db.connect(ALICE)
    db.disconnect(ALICE, conn)  # alice's goodbye raises: logged, the disconnect still happens
    line = db.logs(last=1)[0]
    assert (line.level, line.reducer) == ("panic", "on_disconnect") and "alice's goodbye breaks" in line.message
    with pytest.raises(ReducerFailed):
        make_db(bad_init)


def test_the_owner_may_call_a_scheduled_reducer_others_get_no_such_reducer(db: Database, clock: ManualClock) -> None:
    row = Ping(7, At(clock.now()), "direct")
    with pytest.raises(NoSuchReducer):
        db.call("ping", row, sender=ALICE)
    db.call("ping", row, sender=OWNER)
    db.call_json("ping", codec.json_encoder.encode([row]), sender=OWNER)
    with db.read() as view:
        assert [(s.what, s.who) for s in view.db.seen.iter()] == [("ping direct", OWNER)] * 2
        assert view.db.ping.count() == 0  # a direct call neither needs nor touches a row


@pytest.mark.parametrize("name, variant", [("init", "Init"), ("client_connected", "OnConnect"), ("on_connect", "OnConnect"), ("on_disconnect", "OnDisconnect")])
def test_a_lifecycle_reducer_called_directly_is_refused_with_400(db: Database, name: str, variant: str) -> None:
    for who in (ALICE, OWNER):
        with pytest.raises(LifecycleCall) as e:
            db.call(name, sender=who)
        assert str(e.value) == f"can't directly call special {variant} lifecycle reducer" and e.value.status_code == 400


def test_a_schedule_further_than_spacetimedb_allows_fails_the_insert(db: Database) -> None:
    limit = MAX_DELAY_MICROS
    assert db.call("schedule_in", limit - 1_000, False, sender=ALICE) == "ok"
    assert db.call("schedule_in", limit - 1_000, True, sender=ALICE) == "ok"
    for every in (False, True):
        refused = db.call("schedule_in", limit, every, sender=ALICE)
        assert refused.startswith("refused: Unable to schedule with long delay at 795") and "2.18 years" in refused
    with pytest.raises(ScheduleTooFar, match="Unable to schedule with long delay"):
        db.call("schedule_raising", limit + 1, sender=ALICE)
    with db.read() as view:
        assert view.db.ping.count() == 2
    assert db.check_integrity() == []


def test_arguments_as_an_object_keyed_by_parameter_name(db: Database) -> None:
    assert db.call_json("add", b'{"name": "fig", "qty": 2}', sender=ALICE) == 1
    assert db.call_json("add", b' {"qty": 4, "name": "kiwi"}', sender=ALICE) == 2
    assert db.call_json("add", b'{"name": "lime"}', sender=ALICE) == 3  # a default fills in
    assert [(i.name, i.qty) for i in _items(db)] == [("fig", 2), ("kiwi", 4), ("lime", 0)]
    for bad, why in ((b'{"qty": 1}', "missing required field `name`"), (b'{"name": "x", "colour": 1}', "unknown field `colour`"),
                     (b'{"name": 5}', "Expected `str`")):
        with pytest.raises(ArgumentError, match=why):
            db.call_json("add", bad, sender=ALICE)
    assert len(_items(db)) == 3


def test_connections_left_open_by_a_crash_get_client_disconnected_at_the_next_start(
    make_db: Callable[..., Database], clock: ManualClock, tmp_path: Path
) -> None:
    path = tmp_path / "conns"
    db = make_db(m, path=path)
    bob = Identity.from_claims("test", "bob2")
    closed = db.connect(bob)
    db.disconnect(bob, closed)
    left = db.connect(bob)
    assert db.dangling_connections() == [(bob, left)]
    db.close()  # as a crash would: the connection was never closed
    again = Database.open(path, m, clock=clock)
    try:
        assert again.disconnect_dangling() == 1
        assert again.disconnect_dangling() == 0
        with again.read() as view:
            whats = [s.what for s in view.db.seen.iter()]
        assert whats == [f"connect {closed}", f"disconnect {closed}", f"connect {left}", f"disconnect {left}"]
        alice_conn = again.connect(ALICE)
        again.disconnect(ALICE, alice_conn)  # her hook fails: the connection is closed all the same
        assert again.dangling_connections() == []
    finally:
        again.close()


def test_owner_sql_dml_is_one_logged_transaction_with_its_sender(db: Database) -> None:
    from stdbmod.runtime.sql import execute

    execute(db, "INSERT INTO item (id, name, qty) VALUES (40, 'date', 1)", OWNER)
    execute(db, "UPDATE item SET qty = 9 WHERE id = 40", OWNER)
    execute(db, "DELETE FROM item WHERE id = 40", OWNER)
    records = db.commit_log()[-3:]
    assert [(r.kind, Identity(r.sender)) for r in records] == [("sql", OWNER)] * 3
    assert [(len(c.inserts), len(c.deletes)) for r in records for c in r.changes if c.table == "item"] == [(1, 0), (1, 1), (0, 1)]
