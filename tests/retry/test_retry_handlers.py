"""In-module handlers: each outcome, the savepoint, and tasks without a handler."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import msgspec
import pytest

from stdbmod import Database, ManualClock, Module, PrimaryKey, TimeDuration
from stdbmod.retry import (
    DeadReason,
    GiveUp,
    HandlerContext,
    Outcome,
    RetryableError,
    RetryModule,
    TaskStatus,
    create_retry_module,
    queries,
)
from tests.retry.support import ADMIN, WORKER, next_due


class Note(msgspec.Struct):
    id: Annotated[int, PrimaryKey(auto_inc=True)]
    task_id: int
    attempt: int


@pytest.fixture
def app(tmp_path: Path, clock: ManualClock) -> Any:
    """A module with a `note` table that handlers write to, and a script of outcomes per attempt."""
    rm = create_retry_module()
    mod = Module("app")
    mod.include(rm.module)
    mod.table(Note)
    script: list[str] = []

    @rm.handler("scripted")
    def scripted(ctx: HandlerContext, payload: Any) -> Any:
        ctx.db.note.insert(Note(0, ctx.task_id, ctx.attempt))
        outcome = script.pop(0) if script else "ok"
        if outcome == "retry":
            raise RetryableError("try later")
        if outcome == "give_up":
            raise GiveUp("invalid address")
        if outcome == "crash":
            raise KeyError("boom")
        if outcome == "unstorable":
            return object()
        return {"attempt": ctx.attempt, "payload": payload}

    db = Database.create(tmp_path / "app", mod, owner=ADMIN, clock=clock, durable=False)
    db.call("grant_worker", WORKER, sender=ADMIN)
    yield db, rm, script
    db.close()


def _notes(db: Database) -> list[tuple[int, int]]:
    with db.read() as view:
        return [(n.task_id, n.attempt) for n in view.db.note.iter()]


def _task(db: Database, tid: int) -> Any:
    return queries.get_task(db, ADMIN, tid)


def test_first_attempt_runs_at_once_and_a_return_completes(app: Any, clock: ManualClock) -> None:
    db, rm, script = app
    t = db.call("submit", "scripted", None, {"to": "a@b"}, sender=ADMIN)
    assert t.in_module and next_due(db) == clock.now()
    assert db.run_due() == 1
    done = _task(db, t.id)
    assert (done.status, done.attempts, done.result) == (TaskStatus.COMPLETED, 1, {"attempt": 1, "payload": {"to": "a@b"}})
    assert done.completed_at == clock.now()
    assert _notes(db) == [(t.id, 1)]  # the handler's write committed with the attempt
    [h] = queries.history(db, ADMIN)
    assert (h.outcome, h.attempt, h.worker, h.error) == (Outcome.COMPLETED, 1, "handler", None)


def test_retryable_error_rolls_back_and_schedules_with_backoff(app: Any, clock: ManualClock) -> None:
    db, rm, script = app
    script.extend(["retry", "retry"])
    t = db.call("submit", "scripted", None, None, 5, 10, sender=ADMIN)
    start = clock.now()
    db.run_due()
    after1 = _task(db, t.id)
    assert (after1.status, after1.attempts, after1.last_error) == (TaskStatus.QUEUED, 1, "try later")
    assert after1.run_after == start + TimeDuration.from_seconds(10)
    assert next_due(db) == after1.run_after
    assert _notes(db) == []  # rolled back by the savepoint
    clock.advance(9)
    assert db.run_due() == 0  # not due yet
    clock.advance(1)
    db.run_due()
    after2 = _task(db, t.id)
    assert after2.attempts == 2 and after2.run_after == clock.now() + TimeDuration.from_seconds(20)
    clock.advance(20)
    db.run_due()
    assert _task(db, t.id).status is TaskStatus.COMPLETED
    assert _notes(db) == [(t.id, 3)]
    assert [h.outcome for h in queries.history(db, ADMIN)] == [Outcome.COMPLETED, Outcome.FAILED, Outcome.FAILED]


def test_exhausted_at_max_attempts(app: Any, clock: ManualClock) -> None:
    db, rm, script = app
    script.extend(["retry"] * 3)
    t = db.call("submit", "scripted", None, None, 3, 0, sender=ADMIN)
    db.run_due()  # a zero backoff retries at once, in the same run
    dead = _task(db, t.id)
    assert (dead.status, dead.dead_reason, dead.attempts) == (TaskStatus.DEAD, DeadReason.EXHAUSTED, 3)
    assert next_due(db) is None
    assert [t.id for t in queries.dead_letter(db, ADMIN).items] == [t.id]


def test_give_up_is_dead_at_once_and_keeps_writes(app: Any) -> None:
    db, rm, script = app
    script.append("give_up")
    t = db.call("submit", "scripted", sender=ADMIN)
    db.run_due()
    dead = _task(db, t.id)
    assert (dead.status, dead.dead_reason, dead.attempts, dead.last_error) == (TaskStatus.DEAD, DeadReason.GAVE_UP, 1, "invalid address")
    assert _notes(db) == [(t.id, 1)]  # written before giving up: committed with the attempt
    assert next_due(db) is None
    assert queries.history(db, ADMIN)[0].outcome is Outcome.GAVE_UP


def test_unexpected_exception_rolls_back_and_records_the_traceback(app: Any) -> None:
    db, rm, script = app
    script.append("crash")
    t = db.call("submit", "scripted", sender=ADMIN)
    db.run_due()
    after = _task(db, t.id)
    assert after.status is TaskStatus.QUEUED and after.attempts == 1
    assert after.last_error.startswith("Traceback (most recent call last)")
    assert "KeyError: 'boom'" in after.last_error and "in scripted" in after.last_error
    assert _notes(db) == []
    assert queries.history(db, ADMIN)[0].error == after.last_error


def test_an_unstorable_result_is_a_failed_attempt(app: Any) -> None:
    db, rm, script = app
    script.append("unstorable")
    t = db.call("submit", "scripted", sender=ADMIN)
    db.run_due()
    after = _task(db, t.id)
    assert after.status is TaskStatus.QUEUED and _notes(db) == []
    assert after.last_error == "the handler returned a result that cannot be stored: cannot encode object"


def test_a_job_type_without_handler_waits_for_workers(app: Any) -> None:
    db, rm, script = app
    t = db.call("submit", "elsewhere", sender=ADMIN)
    assert not t.in_module and next_due(db) is None
    assert db.run_due() == 0
    assert db.call("claim", sender=WORKER).id == t.id


def test_handler_tasks_are_not_claimable(app: Any) -> None:
    db, rm, script = app
    db.call("submit", "scripted", sender=ADMIN)
    assert db.call("claim", sender=WORKER) is None


def test_a_handler_removed_at_run_time_hands_the_task_to_workers(app: Any) -> None:
    db, rm, script = app
    t = db.call("submit", "scripted", sender=ADMIN)
    handler = rm.handlers.pop("scripted")
    db.run_due()
    assert not _task(db, t.id).in_module
    claimed = db.call("claim", sender=WORKER)
    assert claimed.id == t.id
    rm.handlers["scripted"] = handler
    again = db.call("fail", t.id, "no", sender=WORKER)  # back in the queue: a handler exists now
    assert again.in_module and next_due(db) == again.run_after


def test_handler_context_and_follow_up_tasks(tmp_path: Path, clock: ManualClock) -> None:
    rm: RetryModule = create_retry_module()
    seen: list[Any] = []

    @rm.handler("parent")
    def parent(ctx: HandlerContext, payload: Any) -> None:
        seen.append((ctx.task_id, ctx.attempt, ctx.job_type, ctx.timestamp, repr(ctx)))
        rm.enqueue_in(ctx, "child", {"from": ctx.task_id})

    db = Database.create(tmp_path / "db", rm.module, owner=ADMIN, clock=clock, durable=False)
    t = db.call("submit", "parent", sender=ADMIN)
    db.run_due()
    assert seen == [(t.id, 1, "parent", clock.now(), f"HandlerContext(task_id={t.id}, job_type='parent', attempt=1)")]
    child = queries.list_tasks(db, ADMIN, job_type="child").items
    assert [c.payload for c in child] == [{"from": t.id}]
    db.close()


def test_duplicate_handler_registration_is_refused() -> None:
    rm = create_retry_module()
    rm.handler("a")(lambda ctx, p: None)
    with pytest.raises(ValueError, match="already has a handler"):
        rm.handler("a")(lambda ctx, p: None)
