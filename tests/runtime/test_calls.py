"""Reducer calls are transactions: commit, roll back, errors, context, arguments, concurrency."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Annotated, Any

import msgspec
import pytest

from stdbmod import ConnectionId, Database, Identity, Module, PrimaryKey, ReducerContext, SenderError, Timestamp
from stdbmod.errors import ArgumentError, CallError, LifecycleCall, NoSuchReducer, ReducerFailed
from tests.conftest import ALICE, BOB, OWNER

m = Module("calls")


@m.table
class Note(msgspec.Struct):
    id: Annotated[int, PrimaryKey(auto_inc=True)]
    text: str
    author: Identity


@m.table
class Seen(msgspec.Struct):
    id: Annotated[int, PrimaryKey(auto_inc=True)]
    sender: Identity
    identity: Identity
    connection: ConnectionId | None
    timestamp: Timestamp
    rolls: list[int]
    kind: str


@m.init
def init(ctx: ReducerContext) -> None:
    ctx.db.seen.insert(Seen(0, ctx.sender, ctx.identity, ctx.connection_id, ctx.timestamp, [], "init"))


@m.client_connected
def hello(ctx: ReducerContext) -> None:
    if ctx.sender == BOB:
        raise SenderError("bob is banned")
    ctx.db.seen.insert(Seen(0, ctx.sender, ctx.identity, ctx.connection_id, ctx.timestamp, [], "connect"))


@m.reducer
def add(ctx: ReducerContext, text: str, times: int = 1) -> int:
    for _ in range(times):
        ctx.db.note.insert(Note(0, text, ctx.sender))
    if text == "refuse":
        raise SenderError("refused: " + text)
    if text == "crash":
        raise ZeroDivisionError("secret detail")
    return ctx.db.note.count()


@m.reducer
def probe(ctx: ReducerContext) -> None:
    first = ctx.timestamp
    ctx.db.seen.insert(Seen(0, ctx.sender, ctx.identity, ctx.connection_id, ctx.timestamp, [ctx.rng.randrange(1000) for _ in range(3)], "probe"))
    assert ctx.timestamp == first


@m.reducer
def nested(ctx: ReducerContext, text: str) -> None:
    """Calls another reducer as a plain function: same transaction."""
    add(ctx, text)
    add(ctx, text + "!")


@m.reducer
def savepoint(ctx: ReducerContext) -> int:
    ctx.db.note.insert(Note(0, "kept", ctx.sender))
    try:
        with ctx.savepoint():
            ctx.db.note.insert(Note(0, "dropped", ctx.sender))
            raise ValueError("inner")
    except ValueError:
        pass
    return ctx.db.note.count()


_HOLDER: dict[str, Database] = {}


@m.reducer
def reenter(ctx: ReducerContext) -> None:
    _HOLDER["db"].call("add", "x", sender=ctx.sender)


def notes(db: Database) -> list[str]:
    with db.read() as v:
        return [n.text for n in v.db.note.iter()]


@pytest.fixture
def db(make_db: Callable[..., Database]) -> Database:
    return make_db(m)


def test_a_successful_call_commits_and_returns(db: Database) -> None:
    assert db.call("add", "hi", 2, sender=ALICE) == 2
    assert notes(db) == ["hi", "hi"]


def test_a_sender_error_rolls_back_everything_and_reports_the_message(db: Database) -> None:
    with pytest.raises(SenderError, match="refused: refuse"):
        db.call("add", "refuse", 3, sender=ALICE)
    assert notes(db) == []
    assert db.logs()[-1].level == "error" and db.logs()[-1].reducer == "add"


def test_any_other_exception_rolls_back_and_hides_the_detail(db: Database) -> None:
    with pytest.raises(ReducerFailed) as e:
        db.call("add", "crash", sender=ALICE)
    assert "secret detail" not in str(e.value)
    assert notes(db) == []
    last = db.logs()[-1]
    assert last.level == "panic" and "ZeroDivisionError: secret detail" in last.message and "Traceback" in last.message


def test_failed_calls_write_no_commit_record(db: Database) -> None:
    before = len(db.commit_log())
    for text in ("refuse", "crash"):
        with pytest.raises((SenderError, ReducerFailed)):
            db.call("add", text, sender=ALICE)
    assert len(db.commit_log()) == before


def test_a_lone_failed_call_and_one_in_a_batch_leave_the_same_state_and_log(db: Database, make_db: Callable[..., Database]) -> None:
    """A lone call runs straight in its batch's transaction (no nested one) and a failure aborts
    that transaction; in a batch each call has a nested transaction. Same outcome either way."""
    other = make_db(m)
    outcomes = []
    for database, lone in ((db, True), (other, False)):
        database.call("add", "before", sender=ALICE)
        for text in ("refuse", "crash"):
            if lone:
                with pytest.raises((SenderError, ReducerFailed)):
                    database.call("add", text, 2, sender=ALICE)
            else:  # the batch: a good call on each side of the failing one, one commit
                results = database._writer.run_many([database.call_job(r, a, sender=ALICE) for r, a in (("add", ("a",)), ("add", (text, 2)), ("add", ("b",)))])
                with pytest.raises((SenderError, ReducerFailed)):
                    results[1].result()
                assert [results[0].result(), results[2].result()] == ([2, 3] if text == "refuse" else [4, 5])
        database.call("add", "after", sender=ALICE)
        logs = [(line.level, line.reducer, line.message.splitlines()[0]) for line in database.logs() if line.level in ("error", "panic")]
        outcomes.append((logs, [n for n in notes(database) if n not in ("a", "b")], [r.reducer for r in database.commit_log()]))
    assert outcomes[0][0] == outcomes[1][0] == [("error", "add", "refused: refuse"), ("panic", "add", "Traceback (most recent call last):")]
    assert outcomes[0][1] == outcomes[1][1] == ["before", "after"]
    assert outcomes[0][2] == ["init", "add", "add"]
    assert outcomes[1][2] == ["init", "add", "add", "add", "add", "add", "add"]


@pytest.mark.parametrize(
    "args, message",
    [
        ((), r"^add: missing argument text; it takes add\(text: str, times: int = 1\)$"),
        (("a", 1, 2), r"^add: too many arguments; it takes add\(text: str, times: int = 1\)$"),
        ((5,), r"^add: argument text: Expected `str`, got `int`$"),
        (("a", "x"), r"^add: argument times: Expected `int`, got `str`$"),
    ],
)
def test_wrong_arguments_are_clear_errors(db: Database, args: tuple[Any, ...], message: str) -> None:
    with pytest.raises(ArgumentError, match=message):
        db.call("add", *args, sender=ALICE)
    assert notes(db) == []


def test_json_arguments(db: Database) -> None:
    assert db.call_json("add", b'["hey", 2]', sender=ALICE) == 2
    with pytest.raises(ArgumentError):
        db.call_json("add", b'{"text": 1}', sender=ALICE)
    with pytest.raises(ArgumentError):
        db.call_json("add", b"[not json", sender=ALICE)


def test_unknown_lifecycle_and_bad_sender(db: Database) -> None:
    with pytest.raises(NoSuchReducer):
        db.call("nope", sender=ALICE)
    for lifecycle in ("init", "hello"):  # SpacetimeDB's 400, not "no such reducer" (issue 21)
        with pytest.raises(LifecycleCall):
            db.call(lifecycle, sender=ALICE)
    with pytest.raises(ArgumentError, match="sender must be an Identity"):
        db.call("add", "x", sender="alice")  # type: ignore[arg-type]
    with pytest.raises(ArgumentError, match="connection_id must be a ConnectionId"):
        db.call("add", "x", sender=ALICE, connection_id="c0ffee")  # type: ignore[arg-type]
    with db.read() as v:
        assert v.db.note.count() == 0  # neither ran


def test_context_carries_sender_identity_connection_timestamp_and_rng(db: Database, clock: Any) -> None:
    clock.advance(10)
    conn = ConnectionId.random()
    db.call("probe", sender=ALICE, connection_id=conn)
    db.call("probe", sender=BOB)
    with db.read() as v:
        a, b = [s for s in v.db.seen.iter() if s.kind == "probe"]
    assert (a.sender, a.identity, a.connection, a.timestamp) == (ALICE, db.identity, conn, clock.now())
    assert b.connection is None and b.sender == BOB
    assert db.identity != db.owner
    # The rng is seeded from the timestamp: same time, same numbers; re-running reproduces them.
    assert a.rolls == b.rolls and len(a.rolls) == 3
    clock.advance(1)
    db.call("probe", sender=ALICE)
    with db.read() as v:
        c = [s for s in v.db.seen.iter() if s.kind == "probe"][-1]
    assert c.rolls != a.rolls


def test_reducers_calling_reducers_share_the_transaction(db: Database) -> None:
    db.call("nested", "x", sender=ALICE)
    assert notes(db) == ["x", "x!"]
    with pytest.raises(SenderError):
        db.call("nested", "refuse", sender=ALICE)
    assert notes(db) == ["x", "x!"]


def test_savepoints_roll_back_only_their_part(db: Database) -> None:
    assert db.call("savepoint", sender=ALICE) == 1
    assert notes(db) == ["kept"]
    log = db.commit_log()[-1]
    assert len(log.changes[0].inserts) == 1


def test_db_call_inside_a_reducer_is_refused(db: Database) -> None:
    _HOLDER["db"] = db
    with pytest.raises(ReducerFailed):
        db.call("reenter", sender=ALICE)
    assert "cannot call db.call()" in db.logs()[-1].message


def test_concurrent_calls_are_serializable_and_a_failure_aborts_only_itself(db: Database) -> None:
    errors: list[Exception] = []

    def worker(i: int) -> None:
        try:
            db.call("add", "refuse" if i % 10 == 0 else f"n{i}", sender=ALICE)
        except SenderError as e:
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(60)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(errors) == 6
    assert sorted(notes(db)) == sorted(f"n{i}" for i in range(60) if i % 10)
    ids = [r.offset for r in db.commit_log()]
    assert ids == list(range(len(ids)))  # offsets dense and ordered


def test_call_many_and_async(db: Database) -> None:
    import asyncio

    out = db.call_many([("add", ("a",), ALICE), ("add", ("refuse",), ALICE), ("add", ("b",), BOB)])
    assert out[0] == 1 and isinstance(out[1], SenderError) and out[2] == 2
    assert asyncio.run(db.call_async("add", "c", sender=ALICE)) == 3


def test_call_many_checks_every_call_before_running_any(db: Database) -> None:
    before = len(db.commit_log())
    with pytest.raises(ArgumentError):
        db.call_many([("add", ("a",), ALICE), ("add", (b"not text",), ALICE), ("add", ("b",), ALICE)])
    db.call("add", "after", sender=ALICE)  # runs after anything the failed call_many had queued
    assert len(db.commit_log()) == before + 1 and notes(db) == ["after"]


def test_call_many_beyond_one_batch_answers_in_order(db: Database) -> None:
    """More calls than one batch takes (MAX_BATCH): several commits, answered in order."""
    from stdbmod.runtime.writer import MAX_BATCH

    n = MAX_BATCH + 10
    before = len(db.commit_log())
    out = db.call_many([("add", (f"n{i}",), ALICE) for i in range(n)])
    assert out == list(range(1, n + 1))
    assert len(db.commit_log()) == before + n and notes(db) == [f"n{i}" for i in range(n)]


def test_init_ran_once_as_owner_and_connections_run_lifecycle(db: Database) -> None:
    conn = db.connect(ALICE)
    with pytest.raises(SenderError, match="banned"):
        db.connect(BOB)
    db.disconnect(ALICE, conn)  # no hook: nothing happens, nothing fails
    with db.read() as v:
        kinds = [(s.kind, s.sender, s.connection) for s in v.db.seen.iter()]
    assert kinds == [("init", OWNER, None), ("connect", ALICE, conn)]


def test_closed_database_refuses_calls(db: Database) -> None:
    db.close()
    with pytest.raises(CallError.__mro__[1]):  # StdbError
        db.call("add", "x", sender=ALICE)
