"""The job queue the benchmark drives inside stdbmod.

The real task-retry module (`stdbmod.retry`) when it is installed; until then a tiny stand-in
with the same reducer names and arguments (enqueue, claim, complete), its table indexed the
same way a claim needs it (status, queue, run_after), so the numbers carry over.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

import msgspec

from stdbmod import Identity, Index, Module, PrimaryKey, Range, ReducerContext, SenderError, Timestamp


class Task(msgspec.Struct):
    id: Annotated[int, PrimaryKey(auto_inc=True)]
    created_at: Timestamp
    updated_at: Timestamp
    queue: str
    job_type: str
    payload: Any
    status: Annotated[str, Index()]
    attempts: int
    run_after: Timestamp
    claimed_by: str | None = None
    completed_at: Timestamp | None = None
    result: Any = None


def _mini_module() -> Module:
    mod = Module("benchq")

    mod.table(indexes={"by_claim": ("status", "queue", "run_after")})(Task)

    @mod.reducer
    def enqueue(ctx: ReducerContext, job_type: str, queue: str | None = None, payload: Any = None) -> Task:
        now = ctx.timestamp
        task: Task = ctx.db.task.insert(Task(0, now, now, queue or "default", job_type, payload, "queued", 0, now))
        return task

    @mod.reducer
    def bulk_enqueue(ctx: ReducerContext, first: int, count: int) -> None:
        for i in range(first, first + count):
            enqueue(ctx, "bench", None, {"n": i})

    @mod.reducer
    def claim(ctx: ReducerContext, queue: str | None = None, worker_id: str | None = None) -> Task | None:
        spec = ("queued", queue or "default", Range(hi=ctx.timestamp, hi_inclusive=True))
        for task in ctx.db.task.by_claim.filter(spec):
            t = msgspec.structs.replace(task, status="running", attempts=task.attempts + 1, claimed_by=worker_id, updated_at=ctx.timestamp)
            claimed: Task = ctx.db.task.id.update(t)
            return claimed
        return None

    @mod.reducer
    def complete(ctx: ReducerContext, task_id: int, result: Any = None) -> Task:
        task = ctx.db.task.id.find(task_id)
        if task is None or task.status != "running":
            raise SenderError(f"task {task_id} is not running")
        t = msgspec.structs.replace(task, status="completed", result=result, completed_at=ctx.timestamp, updated_at=ctx.timestamp)
        done: Task = ctx.db.task.id.update(t)
        return done

    return mod


@dataclass
class JobQueue:
    """Which module, and who calls it. `name` goes into the table's notes."""

    module: Module
    name: str
    sender: Identity

    def enqueue(self, i: int) -> tuple[str, tuple[Any, ...]]:
        return "enqueue", ("bench", None, {"n": i})

    def claim(self, worker: str) -> tuple[str, tuple[Any, ...]]:
        return "claim", (None, worker)

    def bulk(self, first: int, count: int) -> tuple[str, tuple[Any, ...]]:
        """`count` enqueues in one transaction (building big queues quickly)."""
        return "bulk_enqueue", (first, count)

    def complete(self, task_id: int) -> tuple[str, tuple[Any, ...]]:
        return "complete", (task_id, {"ok": True})


OWNER = Identity.from_claims("bench", "owner")


def _retry_module() -> Module | None:
    """The real task-retry module, plus one bench-only reducer (bulk enqueues through the
    module's own `enqueue_in`, for building big queues); None if it is not installed."""
    try:
        from stdbmod.retry import create_retry_module
    except ImportError:
        return None
    rm = create_retry_module("retry")
    mod = Module("benchq")
    mod.include(rm.module)

    @mod.reducer
    def bulk_enqueue(ctx: ReducerContext, first: int, count: int) -> None:
        for i in range(first, first + count):
            rm.enqueue_in(ctx, "bench", {"n": i})

    return mod


def job_queue() -> JobQueue:
    """A fresh module instance; the owner (publisher) is the retry module's first admin."""
    mod = _retry_module()
    if mod is None:
        return JobQueue(_mini_module(), "bench stand-in (stdbmod.retry not on this branch)", OWNER)
    return JobQueue(mod, "stdbmod.retry", OWNER)
