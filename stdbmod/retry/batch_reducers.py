"""Batch forms of enqueue, claim and complete: many tasks in one reducer call (one transaction).

What Oban's `insert_all`, River's `InsertMany` and a worker fetching several jobs per poll give
their users: the per-call cost (role check, transaction, commit record, fsync) is paid once for
the batch. Each task still goes through the same transitions as its one-at-a-time reducer, so a
batch leaves exactly the rows the calls one by one would (tests/retry/test_retry_batch.py).

`enqueue_many` and `complete_many` are all-or-nothing: one bad item fails the call, naming it,
and nothing of the batch is written. `claim_many` takes up to `limit` ready tasks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from ..module import Module
from ..runtime import ReducerContext
from ..types import Timestamp
from . import transitions
from .claim import next_claimable
from .errors import InvalidArgument
from .limits import check_int, check_name
from .roles import require_worker
from .tables import Task
from .worker_reducers import held_task, lease_length

if TYPE_CHECKING:
    from .retry_module import RetryModule

MAX_BATCH = 1000  # items per call: bounds one transaction's size


class NewTask(msgspec.Struct, forbid_unknown_fields=True):
    """One task of `enqueue_many`: `enqueue`'s arguments."""

    job_type: str
    queue: str | None = None
    payload: Any = None
    max_attempts: int | None = None
    backoff_seconds: int | None = None
    run_after: Timestamp | None = None
    priority: int = 0
    idempotency_key: str | None = None


class Completion(msgspec.Struct, forbid_unknown_fields=True):
    """One task of `complete_many`: `complete`'s arguments."""

    task_id: int
    result: Any = None
    attempt: int | None = None


def _check_size(what: str, items: list[Any]) -> None:
    if not items:
        raise InvalidArgument(f"{what}: give at least one item")
    if len(items) > MAX_BATCH:
        raise InvalidArgument(f"{what}: {len(items)} items; the limit is {MAX_BATCH} per call")


def register(mod: Module, rm: RetryModule) -> None:
    @mod.reducer
    def enqueue_many(ctx: ReducerContext, tasks: list[NewTask]) -> list[Task]:
        """Add several tasks in one transaction (worker role or admin); all or none. An
        idempotency key already used (earlier, or by an earlier item) returns that task."""
        require_worker(ctx, "enqueue_many")
        _check_size("enqueue_many", tasks)
        specs = []
        for i, t in enumerate(tasks):
            try:
                specs.append(
                    transitions.task_spec(
                        t.job_type, t.queue, t.payload, t.max_attempts, t.backoff_seconds, t.run_after, t.priority, t.idempotency_key
                    )
                )
            except InvalidArgument as e:
                raise InvalidArgument(f"enqueue_many: tasks[{i}]: {e}") from None
        return [transitions.create_task(ctx, rm.handlers, spec) for spec in specs]

    @mod.reducer
    def claim_many(
        ctx: ReducerContext, limit: int, queue: str | None = None, worker_id: str | None = None, lease_seconds: int | None = None
    ) -> list[Task]:
        """Take up to `limit` ready tasks, in the order `claim` would take them one by one, each
        with its own lease; fewer (or none) when fewer are ready."""
        require_worker(ctx, "claim_many")
        check_int("limit", limit, 1, MAX_BATCH)
        if queue is not None:
            check_name("queue", queue)
        worker = ctx.sender.to_hex() if worker_id is None else check_name("worker_id", worker_id)
        lease = lease_length(ctx, lease_seconds)
        claimed: list[Task] = []
        while len(claimed) < limit:
            task = next_claimable(ctx.db, queue, ctx.timestamp)
            if task is None:
                break
            claimed.append(transitions.start_claim(ctx, task, worker, lease))
        return claimed

    @mod.reducer
    def complete_many(ctx: ReducerContext, completions: list[Completion]) -> list[Task]:
        """Complete several running tasks the caller holds; all or none (a task not running or
        leased to another claim fails the call, naming it)."""
        require_worker(ctx, "complete_many")
        _check_size("complete_many", completions)
        done: list[Task] = []
        for c in completions:
            task = held_task(ctx, c.task_id, "complete_many", c.attempt)
            done.append(transitions.succeed(ctx, task, c.result, task.claimed_by or ctx.sender.to_hex()))
        return done
