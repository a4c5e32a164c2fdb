"""A retry database made with the task table's previous indexes (one on run_after alone,
(status, error_fingerprint) for the dead-letter groups, lease_expires_at alone for the lease
sweep, (status, finished_at) for retention, and by_claim over every status) opens with today's
module: the indexes nothing walks any more are dropped with their entries, error_fingerprint and
by_end are built from the rows, by_claim is rebuilt partial (queued tasks only), and claims, the
lease sweep, retention, the dead-letter groups and a bulk requeue work on the old rows."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import msgspec

from stdbmod import Database, ManualClock, Module, Range, ReducerContext, TimeDuration, Timestamp
from stdbmod.retry import DeadReason, RetryAdmin, RetryModule, RetryWorker, TaskStatus, queries
from stdbmod.retry.tables import TASK_INDEXES, Task
from stdbmod.retry.triage import BulkAction, TriageFilter, dlq_groups, preview
from stdbmod.runtime import spaces
from stdbmod.schema import Index
from stdbmod.storage import LmdbStorage
from tests.retry.support import ADMIN, WORKER

PREVIOUS_INDEXES = {
    **{k: v for k, v in TASK_INDEXES.items() if k not in ("by_end", "by_claim")},
    "by_claim": ("status", "in_module", "neg_priority", "run_after"),  # dense: every status
    "by_finished": ("status", "finished_at"),
    "by_fingerprint": ("status", "error_fingerprint"),
}


def previous_task() -> Any:
    """Today's Task with the previous indexes: run_after and lease_expires_at indexed, error_fingerprint not."""
    columns: list[tuple[Any, ...]] = []
    for f in msgspec.structs.fields(Task):
        kind = f.type
        if f.name == "run_after":
            kind = Annotated[Timestamp, Index()]
        elif f.name == "lease_expires_at":
            kind = Annotated[Timestamp | None, Index()]
        elif f.name == "error_fingerprint":
            kind = str | None
        columns.append((f.name, kind) if f.required else (f.name, kind, f.default))
    return msgspec.defstruct("Task", columns)


def previous_module() -> Module:
    task = previous_task()
    m = Module("retry")
    m.table(task, indexes=PREVIOUS_INDEXES)
    m.table(RetryAdmin, cached=True)
    m.table(RetryWorker, cached=True)

    @m.reducer
    def old_rows(ctx: ReducerContext) -> None:
        now = ctx.timestamp
        ctx.db.retry_admin.insert(RetryAdmin(ctx.sender, now, ctx.sender))
        ctx.db.retry_worker.insert(RetryWorker(WORKER, now, ctx.sender))
        later = now + TimeDuration.from_seconds(60)

        def row(status: TaskStatus, run_after: Timestamp, fp: str | None, reason: DeadReason | None = None, lease: Timestamp | None = None) -> Any:
            finished = now if status in (TaskStatus.DEAD, TaskStatus.COMPLETED) else None
            return task(
                id=0, created_at=now, updated_at=now, queue="q", job_type="j", payload=None, status=status, dead_reason=reason,
                attempts=1 if reason or lease else 0, max_attempts=1, backoff_seconds=0, priority=0, neg_priority=0, in_module=False,
                run_after=run_after, last_error="boom" if fp else None, finished_at=finished, error_fingerprint=fp,
                lease_holder=WORKER if lease else None, lease_expires_at=lease, claimed_by="w" if lease else None,
                last_attempted_at=now if lease else None,
            )  # fmt: skip

        ctx.db.task.insert(row(TaskStatus.QUEUED, later, None))  # 1: not due yet
        ctx.db.task.insert(row(TaskStatus.QUEUED, now, None))  # 2: due
        ctx.db.task.insert(row(TaskStatus.DEAD, now, "fp-a", DeadReason.EXHAUSTED))  # 3
        ctx.db.task.insert(row(TaskStatus.QUEUED, later, "fp-a"))  # 4: sent back by a bulk requeue, keeps it
        ctx.db.task.insert(row(TaskStatus.DEAD, now, "fp-a", DeadReason.EXHAUSTED))  # 5
        ctx.db.task.insert(row(TaskStatus.DEAD, now, "fp-b", DeadReason.GAVE_UP))  # 6
        ctx.db.task.insert(row(TaskStatus.RUNNING, now, None, lease=now + TimeDuration.from_seconds(30)))  # 7: its lease ends at +30
        ctx.db.task.insert(row(TaskStatus.COMPLETED, now, None))  # 8

    return m


def entries(path: Path, index: str) -> int:
    storage = LmdbStorage(str(path))
    try:
        if spaces.index("task", index) not in storage.space_names():
            return 0
        with storage.begin_read() as r:
            return r.count(spaces.index("task", index))
    finally:
        storage.close()


def test_a_database_with_the_previous_task_indexes_opens_and_works(tmp_path: Path, rm: RetryModule, clock: ManualClock) -> None:
    where = tmp_path / "previous"
    old = Database.create(where, previous_module(), owner=ADMIN, clock=clock, durable=False)
    old.call("old_rows", sender=ADMIN)
    old.close()
    assert [entries(where, ix) for ix in ("run_after", "by_fingerprint", "lease_expires_at", "by_finished", "by_claim")] == [8, 8, 8, 8, 8]

    db = Database.open(where, rm.module, clock=clock, durable=False)
    try:
        assert db.check_integrity() == []  # error_fingerprint's and by_end's indexes were built from the rows
        with db.read() as v:
            assert [t.id for t in v.db.task.error_fingerprint.filter("fp-a")] == [3, 4, 5]
            assert [t.id for t in v.db.task.by_end.filter((TaskStatus.RUNNING, None, Range()))] == [7]
            assert [t.id for t in v.db.task.by_end.filter(TaskStatus.COMPLETED)] == [8]
        # the dead-letter tier reads as before: dead tasks only, grouped, by id
        assert [(g.fingerprint, g.count) for g in dlq_groups(db, ADMIN)] == [("fp-a", 2), ("fp-b", 1)]
        assert [t.id for t in preview(db, ADMIN, TriageFilter(fingerprint="fp-a")).sample] == [3, 5]
        assert [t.id for t in queries.dead_letter(db, ADMIN).items] == [6, 5, 3]
        # the claim walks its index as before: the due task, then nothing until the others are due
        assert db.call("claim", None, "w", sender=WORKER).id == 2
        assert db.call("claim", None, "w", sender=WORKER) is None
        # the old claim's lease ends: a claim arms the sweep (at its own, later, lease end: the
        # sweep armed before the upgrade is not there), which reaps the old one when it fires
        clock.advance(60)
        assert [db.call("claim", None, "w", 30, sender=WORKER).id for _ in range(2)] == [1, 4]
        clock.advance(31)
        db.run_due()
        with db.read() as v:  # one attempt each, ended with the lease: dead
            assert [v.db.task.id.find(i).status for i in (7, 1, 4)] == [TaskStatus.DEAD] * 3
        op = db.call("bulk_dlq", BulkAction.REQUEUE, TriageFilter(fingerprint="fp-a"), sender=ADMIN)
        assert (op.done, op.processed) == (True, 2)
        with db.read() as v:
            assert [v.db.task.id.find(i).status for i in (3, 5, 6)] == [TaskStatus.QUEUED, TaskStatus.QUEUED, TaskStatus.DEAD]
        assert db.check_integrity() == []
    finally:
        db.close()
    after = [entries(where, ix) for ix in ("run_after", "by_fingerprint", "lease_expires_at", "by_finished", "error_fingerprint", "by_end", "by_claim")]
    # error_fingerprint is sparse: entries only for the six tasks that have one (not 2, 8); by_end
    # and by_claim are partial: the six tasks not queued (not 3, 5), and the two queued ones
    assert after == [0, 0, 0, 0, 6, 6, 2]
    Database.open(where, rm.module, clock=clock, durable=False).close()  # and it opens again
