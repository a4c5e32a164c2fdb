"""Schedule tables: one-shot and interval rows, who runs them, cleanup, cancellation, the loop."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import msgspec
import pytest

from stdbmod import At, Database, Every, Identity, ManualClock, Module, PrimaryKey, ReducerContext, ScheduleAt, Scheduler, SenderError, TimeDuration, Timestamp
from stdbmod.errors import NoSuchReducer
from stdbmod.runtime.clock import SystemClock
from stdbmod.runtime.commitlog import CommitRecord
from tests.conftest import ALICE

m = Module("sched")


@m.table(scheduled="fire")
class Timer(msgspec.Struct):
    scheduled_id: Annotated[int, PrimaryKey(auto_inc=True)]
    scheduled_at: ScheduleAt
    label: str


@m.table
class Fired(msgspec.Struct):
    id: Annotated[int, PrimaryKey(auto_inc=True)]
    label: str
    sender: Identity
    has_connection: bool
    timestamp: Timestamp
    saw_own_row: bool


@m.reducer
def fire(ctx: ReducerContext, timer: Timer) -> None:
    ctx.require_scheduler()
    row_still_there = ctx.db.timer.scheduled_id.find(timer.scheduled_id) is not None
    ctx.db.fired.insert(Fired(0, timer.label, ctx.sender, ctx.connection_id is not None, ctx.timestamp, row_still_there))
    if timer.label.startswith("fail"):
        raise SenderError("scheduled failure")
    if timer.label == "reschedule":
        ctx.db.timer.scheduled_id.update(msgspec.structs.replace(timer, scheduled_at=At(ctx.timestamp + TimeDuration.from_seconds(5)), label="rescheduled"))


@m.reducer
def schedule(ctx: ReducerContext, label: str, seconds: float, repeat: bool) -> int:
    d = TimeDuration.from_seconds(seconds)
    at: ScheduleAt = Every(d) if repeat else At(ctx.timestamp + d)
    row = ctx.db.timer.insert(Timer(0, at, label))
    if label == "rollback":
        raise SenderError("the insert rolls back, so the timer never fires")
    return int(row.scheduled_id)


@m.reducer
def schedule_at(ctx: ReducerContext, label: str, at: Timestamp) -> None:
    ctx.db.timer.insert(Timer(0, At(at), label))


@m.reducer
def cancel(ctx: ReducerContext, scheduled_id: int) -> None:
    ctx.db.timer.scheduled_id.delete(scheduled_id)


def fired(db: Database) -> list[Fired]:
    with db.read() as v:
        return list(v.db.fired.iter())


def timers(db: Database) -> list[Timer]:
    with db.read() as v:
        return list(v.db.timer.iter())


@pytest.fixture
def db(make_db: Callable[..., Database]) -> Database:
    return make_db(m)


def test_one_shot_fires_at_its_time_as_the_database(db: Database, clock: ManualClock) -> None:
    db.call("schedule", "once", 10, False, sender=ALICE)
    due = db.next_due()
    assert due == clock.now() + TimeDuration.from_seconds(10)
    clock.advance(9.999)
    assert db.run_due() == 0 and fired(db) == []
    clock.advance(0.001)
    assert db.run_due() == 1
    [f] = fired(db)
    assert (f.label, f.sender, f.has_connection, f.timestamp, f.saw_own_row) == ("once", db.identity, False, due, True)
    assert timers(db) == [] and db.next_due() is None
    rec = db.commit_log()[-1]
    assert rec.kind == "scheduled" and rec.reducer == "fire"
    assert {c.table for c in rec.changes} == {"fired", "timer"}  # deleted in the same transaction


def test_a_late_fire_uses_now_as_its_timestamp(db: Database, clock: ManualClock) -> None:
    db.call("schedule", "late", 1, False, sender=ALICE)
    clock.advance(100)
    db.run_due()
    assert fired(db)[0].timestamp == clock.now()


def test_a_failed_one_shot_is_deleted_in_its_own_transaction(db: Database, clock: ManualClock) -> None:
    db.call("schedule", "fail-once", 1, False, sender=ALICE)
    clock.advance(1)
    assert db.run_due() == 1
    assert fired(db) == [] and timers(db) == []
    rec = db.commit_log()[-1]
    assert rec.kind == "schedule_cleanup" and [c.table for c in rec.changes] == ["timer"]
    assert db.logs()[-1].message == "scheduled failure"
    clock.advance(100)
    assert db.run_due() == 0  # no automatic retry


def test_intervals_repeat_and_skip_missed_ticks(db: Database, clock: ManualClock) -> None:
    start = clock.now()
    db.call("schedule", "tick", 10, True, sender=ALICE)
    clock.advance(10)
    db.run_due()
    clock.advance(35)  # ticks at 20, 30, 40 were missed: one run now, next at 50
    db.run_due()
    assert len(fired(db)) == 2
    assert db.next_due() == start + TimeDuration.from_seconds(50)
    assert len(timers(db)) == 1


def test_an_interval_tick_falling_exactly_at_now_is_not_fired_twice(db: Database, clock: ManualClock) -> None:
    """The boundary of a missed tick: a tick at exactly the firing instant counts as fired by
    that firing (the next is one interval after it); one a microsecond later is still ahead."""
    start = clock.now()
    db.call("schedule", "tick", 10, True, sender=ALICE)
    clock.advance(20)  # ticks due at 10 and, exactly now, at 20
    assert db.run_due() == 1 and db.run_due() == 0
    assert db.next_due() == start + TimeDuration.from_seconds(30)
    clock.set(start + TimeDuration(30_000_000 - 1))  # a microsecond before the next tick
    assert db.run_due() == 0
    clock.advance(TimeDuration(1))
    assert db.run_due() == 1 and db.next_due() == start + TimeDuration.from_seconds(40)
    clock.set(start + TimeDuration(50_000_000 - 1))  # 40 missed, 50 a microsecond ahead: 40 fires now, 50 is next
    assert db.run_due() == 1 and db.next_due() == start + TimeDuration.from_seconds(50)
    assert [f.timestamp for f in fired(db)] == [start + TimeDuration.from_seconds(s) for s in (20, 30)] + [clock.now()]


def test_a_failing_interval_keeps_running(db: Database, clock: ManualClock) -> None:
    db.call("schedule", "fail-tick", 10, True, sender=ALICE)
    for _ in range(3):
        clock.advance(10)
        assert db.run_due() == 1
    assert len(timers(db)) == 1 and len(db.logs()) == 3


def test_a_rolled_back_insert_never_fires(db: Database, clock: ManualClock) -> None:
    with pytest.raises(SenderError):
        db.call("schedule", "rollback", 0, False, sender=ALICE)
    assert db.next_due() is None
    clock.advance(10)
    assert db.run_due() == 0


def test_deleting_a_row_cancels_and_updating_it_reschedules(db: Database, clock: ManualClock) -> None:
    sid = db.call("schedule", "cancel-me", 5, False, sender=ALICE)
    db.call("cancel", sid, sender=ALICE)
    db.call("schedule", "reschedule", 1, False, sender=ALICE)
    clock.advance(1)
    db.run_due()
    [row] = timers(db)
    assert row.label == "rescheduled" and db.next_due() == clock.now() + TimeDuration.from_seconds(5)
    clock.advance(5)
    db.run_due()
    assert [f.label for f in fired(db)] == ["reschedule", "rescheduled"] and timers(db) == []


def test_scheduled_reducers_cannot_be_called_by_clients(db: Database) -> None:
    with pytest.raises(NoSuchReducer):
        db.call("fire", {"scheduled_id": 1, "scheduled_at": {"type": "time", "time": 0}, "label": "x"}, sender=ALICE)


def test_the_loop_wakes_when_an_earlier_row_is_inserted(db: Database, clock: ManualClock) -> None:
    db.call("schedule", "far", 3600, False, sender=ALICE)
    sched = Scheduler(db).start()
    try:
        done = threading.Event()
        original = db.hooks.on_commit

        def watch(records: list[CommitRecord]) -> None:
            if any(getattr(r, "kind", "") == "scheduled" for r in records):
                done.set()

        db.hooks.on_commit = watch
        db.call("schedule", "now", 0, False, sender=ALICE)  # due at once: the loop must wake for it
        assert done.wait(timeout=30), "the scheduler did not wake up for the earlier row"
        assert [f.label for f in fired(db)] == ["now"]
        db.hooks.on_commit = original
    finally:
        sched.stop()


def test_the_loop_fires_rows_on_time_by_the_real_clock(tmp_path: Path) -> None:
    """The production loop under the system clock, at a coarse grain: rows due 200 ms and 400 ms
    from now fire at their time (milliseconds late, idle; the bound, 2 s, is generous for a
    loaded machine, and a loop oversleeping by seconds fails it), however far off the loop
    planned to wake when they were armed (here: a row an hour away). Each row's firing timestamp
    is when it ran (a late row runs at now), so the database's own clock measures how late each
    one was; the test only waits on an event, with a generous bound, for the firings to happen."""
    db = Database.create(tmp_path / "real-clock", m, owner=ALICE, durable=False)
    try:
        assert isinstance(db.clock, SystemClock)
        ran = threading.Event()
        db.hooks.on_commit = lambda records: ran.set() if len(fired(db)) == 2 else None
        db.call("schedule", "far", 3600, False, sender=ALICE)
        sched = Scheduler(db).start()
        try:
            now = db.clock.now()
            due = {"soon": now + TimeDuration.from_seconds(0.2), "next": now + TimeDuration.from_seconds(0.4)}
            for label, at in due.items():
                db.call("schedule_at", label, at, sender=ALICE)
            assert ran.wait(timeout=60), "the loop did not fire the rows"
        finally:
            sched.stop()
        late = {f.label: (f.timestamp.micros - due[f.label].micros) / 1e6 for f in fired(db)}
        assert set(late) == {"soon", "next"}
        assert all(0 <= s < 2.0 for s in late.values()), late
    finally:
        db.close()


def test_commits_report_the_earliest_row_they_armed_and_deletions_none(db: Database, clock: ManualClock) -> None:
    seen: list[int] = []
    db.hooks.on_schedule_change = seen.append
    a = db.call("schedule", "later", 60, False, sender=ALICE)
    db.call("cancel", a, sender=ALICE)  # only removes a row: nothing to wake for
    with pytest.raises(SenderError):
        db.call("schedule", "rollback", 5, False, sender=ALICE)  # rolled back: nothing armed
    assert seen == [clock.now().micros + 60_000_000]


def test_the_loop_is_woken_only_by_rows_due_before_its_plan(db: Database) -> None:
    """A claim arms a lease timer minutes away; the sleeping loop must not wake for that, but
    must for anything due before its planned wake-up, and for everything while it has no plan."""
    sched = Scheduler(db)  # not started: the decision alone
    sched._sleep_until = None
    sched._armed(10**18)
    assert sched._wake.is_set()
    sched._wake.clear()
    sched._sleep_until = 5_000
    sched._armed(5_000)
    sched._armed(9_000)
    assert not sched._wake.is_set()
    sched._armed(4_999)
    assert sched._wake.is_set()
