"""A retry database made before the shared columns and enum members of issues 16 and 17 opens
with today's module: old rows decode with the new columns' defaults, the new indexes are built
from the rows, and the new dead reasons and outcomes can be written beside the old ones."""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Annotated, Any

import msgspec

from stdbmod import Database, Identity, ManualClock, Module, PrimaryKey, ReducerContext, Timestamp
from stdbmod.retry import DeadReason, Outcome, RetryAdmin, RetryModule, TaskStatus, queries
from stdbmod.schema import Index
from tests.retry.support import ADMIN, WORKER

# --- the tables as they were (class names matter: the schema names the enum types) --------------


class OldStatus(str, enum.Enum):
    QUEUED = "queued"
    RUNNING = "running"
    COMPLETED = "completed"
    DEAD = "dead"


class OldReason(str, enum.Enum):
    EXHAUSTED = "exhausted"
    GAVE_UP = "gave_up"
    CANCELLED = "cancelled"


class OldOutcome(str, enum.Enum):
    COMPLETED = "completed"
    FAILED = "failed"
    GAVE_UP = "gave_up"
    LEASE_EXPIRED = "lease_expired"


OldStatus.__name__, OldReason.__name__, OldOutcome.__name__ = "TaskStatus", "DeadReason", "Outcome"


def old_module() -> Module:
    task = msgspec.defstruct(
        "Task",
        [
            ("id", Annotated[int, PrimaryKey(auto_inc=True)]),
            ("created_at", Annotated[Timestamp, Index()]),
            ("updated_at", Timestamp),
            ("queue", Annotated[str, Index()]),
            ("job_type", Annotated[str, Index()]),
            ("payload", Any),
            ("status", Annotated[OldStatus, Index()]),
            ("dead_reason", OldReason | None),
            ("attempts", int),
            ("max_attempts", int),
            ("backoff_seconds", int),
            ("priority", int),
            ("neg_priority", int),
            ("in_module", bool),
            ("run_after", Annotated[Timestamp, Index()]),
            ("claimed_at", Timestamp | None, None),
            ("claimed_by", str | None, None),
            ("lease_holder", Identity | None, None),
            ("lease_expires_at", Annotated[Timestamp | None, Index()], None),
            ("last_attempted_at", Timestamp | None, None),
            ("last_error", str | None, None),
            ("completed_at", Timestamp | None, None),
            ("result", Any, None),
            ("idempotency_key", Annotated[str | None, Index()], None),
        ],
    )
    attempt = msgspec.defstruct(
        "Attempt",
        [
            ("id", Annotated[int, PrimaryKey(auto_inc=True)]),
            ("task_id", Annotated[int, Index()]),
            ("job_type", str),
            ("attempt", int),
            ("outcome", OldOutcome),
            ("error", str | None),
            ("worker", str),
            ("started_at", Timestamp),
            ("finished_at", Timestamp),
        ],
    )
    m = Module("retry")
    m.table(task, indexes={
        "by_claim_queue": ("status", "in_module", "queue", "neg_priority", "run_after"),
        "by_claim": ("status", "in_module", "neg_priority", "run_after"),
    })  # fmt: skip
    m.table(attempt)
    m.table(RetryAdmin)  # unchanged since

    @m.reducer
    def old_rows(ctx: ReducerContext) -> None:
        now = ctx.timestamp
        ctx.db.retry_admin.insert(RetryAdmin(ctx.sender, now, ctx.sender))
        for i, (status, reason) in enumerate([(OldStatus.QUEUED, None), (OldStatus.DEAD, OldReason.GAVE_UP), (OldStatus.COMPLETED, None)]):
            ctx.db.task.insert(task(0, now, now, "default", "j", {"n": i}, status, reason, 1, 3, 0, 0, 0, False, now))
        ctx.db.attempt.insert(attempt(0, 2, "j", 1, OldOutcome.GAVE_UP, "bad", "w", now, now))

    return m


def test_an_old_retry_database_opens_with_the_new_columns_and_members(tmp_path: Path, rm: RetryModule, clock: ManualClock) -> None:
    where = tmp_path / "old"
    old = Database.create(where, old_module(), owner=ADMIN, clock=clock, durable=False)
    old.call("old_rows", sender=ADMIN)
    old.close()

    db = Database.open(where, rm.module, clock=clock, durable=False)
    try:
        assert db.check_integrity() == []  # the new indexes were built from the old rows
        with db.read() as v:
            queued, dead, done = (v.db.task.id.find(i) for i in (1, 2, 3))
            assert (queued.status, dead.dead_reason, done.status) == (TaskStatus.QUEUED, DeadReason.GAVE_UP, TaskStatus.COMPLETED)
            assert (dead.finished_at, dead.unique_key, dead.snoozes, dead.backoff_jitter, dead.triage_hold) == (None, None, 0, 0.0, False)
            assert [t.id for t in v.db.task.by_end.filter((TaskStatus.DEAD, None))] == [2]
            assert [t.id for t in v.db.task.unique_key.filter(None)] == [1, 2, 3]
            assert [a.outcome for a in v.db.attempt.iter()] == [Outcome.GAVE_UP]
            assert [t.id for t in v.db.task.error_fingerprint.filter(None)] == [1, 2, 3]
        # the old rows run on under the new module: the queued task is claimed and cancelled
        db.call("grant_worker", WORKER, sender=ADMIN)
        claimed = db.call("claim", None, "w", sender=WORKER)
        assert claimed.id == 1
        failed = db.call("fail", 1, "boom", sender=WORKER)
        assert failed.status is TaskStatus.QUEUED
        cancelled = db.call("cancel", 1, "no longer needed", sender=ADMIN)
        assert (cancelled.dead_reason, cancelled.finished_at) == (DeadReason.CANCELLED, clock.now())
        assert {a.outcome for a in queries.history(db, ADMIN)} == {Outcome.GAVE_UP, Outcome.FAILED}
    finally:
        db.close()
    # and it opens again (the stored schema is now the new one)
    Database.open(where, rm.module, clock=clock, durable=False).close()
