"""A scheduler pass: every row due by now, whatever instant it fell due at, fires in one batch
under one commit, each in its own nested transaction; a failing fire aborts only itself."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Annotated, Any

import msgspec
import pytest

from stdbmod import At, Database, ManualClock, Module, PrimaryKey, ReducerContext, Scheduler, SenderError, TimeDuration, Timestamp
from stdbmod.runtime.commitlog import CommitRecord
from tests.conftest import ALICE

m = Module("passes")
threads_seen: list[int] = []
gate = threading.Event()
entered = threading.Event()


@m.table(scheduled="fire")
class Timer(msgspec.Struct):
    scheduled_id: Annotated[int, PrimaryKey(auto_inc=True)]
    scheduled_at: At
    label: str


@m.table
class Fired(msgspec.Struct):
    id: Annotated[int, PrimaryKey(auto_inc=True)]
    label: str
    timestamp: Timestamp


@m.reducer
def fire(ctx: ReducerContext, timer: Timer) -> None:
    ctx.require_scheduler()
    threads_seen.append(threading.get_ident())
    ctx.db.fired.insert(Fired(0, timer.label, ctx.timestamp))
    if timer.label.startswith("fail"):
        raise SenderError("scheduled failure")


@m.reducer
def arm(ctx: ReducerContext, label: str, seconds: float) -> None:
    ctx.db.timer.insert(Timer(0, At(ctx.timestamp + TimeDuration.from_seconds(seconds)), label))


@m.reducer
def hold(ctx: ReducerContext) -> None:
    """Keep the writer busy until the test opens the gate."""
    entered.set()
    assert gate.wait(10)


@pytest.fixture
def db(make_db: Callable[..., Database]) -> Database:
    threads_seen.clear()
    gate.clear()
    entered.clear()
    return make_db(m)


def _commits(db: Database) -> list[list[CommitRecord]]:
    """The records of each commit from now on, one list per commit (one outer transaction)."""
    commits: list[list[CommitRecord]] = []
    db.hooks.on_commit = commits.append
    return commits


def _fired(db: Database) -> list[str]:
    with db.read() as v:
        return [f.label for f in v.db.fired.iter()]


def _timers(db: Database) -> list[str]:
    with db.read() as v:
        return [t.label for t in v.db.timer.iter()]


def _arm(db: Database, *plan: tuple[str, float]) -> None:
    for label, seconds in plan:
        db.call("arm", label, seconds, sender=ALICE)


def test_rows_due_at_several_instants_fire_in_one_commit(db: Database, clock: ManualClock) -> None:
    _arm(db, ("a", 1), ("b", 2), ("c", 3), ("later", 60))
    commits = _commits(db)
    clock.advance(5)
    assert db.run_due() == 3
    assert len(commits) == 1
    assert [(r.kind, r.reducer) for r in commits[0]] == [("scheduled", "fire")] * 3
    assert _fired(db) == ["a", "b", "c"]  # in due order
    assert _timers(db) == ["later"]  # each one-shot row deleted with its run
    for r in commits[0]:
        assert {c.table for c in r.changes} == {"fired", "timer"}
    assert db.check_integrity() == []


def test_a_failing_fire_aborts_only_itself_in_the_shared_commit(db: Database, clock: ManualClock) -> None:
    _arm(db, ("a", 1), ("fail-b", 2), ("c", 3))
    commits = _commits(db)
    clock.advance(3)
    assert db.run_due() == 3
    assert len(commits) == 1
    # b's run rolled back (its Fired insert with it); its row went in a cleanup of its own
    assert [r.kind for r in commits[0]] == ["scheduled", "schedule_cleanup", "scheduled"]
    assert [c.table for c in commits[0][1].changes] == ["timer"]
    assert _fired(db) == ["a", "c"] and _timers(db) == []
    assert db.logs()[-1].message == "scheduled failure"


def test_fire_due_is_bounded_and_says_when_the_next_row_is_due(db: Database, clock: ManualClock) -> None:
    start = clock.now()
    _arm(db, ("a", 1), ("b", 2), ("c", 3), ("later", 60))
    clock.advance(3)
    assert db.fire_due(limit=2) == (2, start + TimeDuration.from_seconds(3))
    assert db.fire_due() == (1, start + TimeDuration.from_seconds(60))
    assert db.fire_due() == (0, start + TimeDuration.from_seconds(60))
    assert _fired(db) == ["a", "b", "c"]
    clock.advance(60)
    assert db.fire_due() == (1, None)


def test_a_pass_runs_on_the_calling_thread_when_the_writer_is_idle(db: Database, clock: ManualClock) -> None:
    _arm(db, ("a", 1), ("b", 2))
    clock.advance(2)
    assert db.run_due() == 2
    assert threads_seen == [threading.get_ident()] * 2


def test_a_pass_behind_a_busy_writer_is_queued_and_still_shares_one_commit(db: Database, clock: ManualClock) -> None:
    _arm(db, ("a", 1), ("b", 2), ("c", 3))
    clock.advance(3)
    holder = threading.Thread(target=db.call, args=("hold",), kwargs={"sender": ALICE})
    holder.start()
    assert entered.wait(10)
    commits = _commits(db)
    out: list[Any] = []
    passer = threading.Thread(target=lambda: out.append(db.run_due()))
    passer.start()
    while db._writer._queued < 3:  # the pass queued its fires behind the busy writer
        threading.Event().wait(0.001)
    gate.set()
    holder.join(10)
    passer.join(10)
    assert out == [3]
    assert [len(c) for c in commits] == [3]  # `hold` changed nothing, so no record of its own
    assert threads_seen == [db._writer.thread.ident] * 3


def test_the_loop_fires_a_backlog_at_several_instants_in_one_pass(db: Database, clock: ManualClock) -> None:
    _arm(db, ("a", 1), ("b", 2), ("c", 3))
    clock.advance(10)
    commits = _commits(db)
    done = threading.Event()

    def watch(records: list[CommitRecord]) -> None:
        commits.append(records)
        done.set()

    db.hooks.on_commit = watch
    sched = Scheduler(db).start()
    try:
        assert done.wait(30), "the scheduler did not fire the backlog"
    finally:
        sched.stop()
    assert [len(c) for c in commits] == [3] and _fired(db) == ["a", "b", "c"]
