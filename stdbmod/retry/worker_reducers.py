"""Reducers for external workers (the worker role, or an admin): enqueue, claim, heartbeat,
complete, fail. Seed 000's routes call these."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..module import Module
from ..runtime import ReducerContext
from ..types import Timestamp
from . import transitions
from .claim import next_claimable
from .errors import InvalidTransition, StaleLease, TaskNotFound
from .limits import MAX_LEASE_SECONDS, check_int, check_name
from .roles import require_worker
from .tables import Outcome, Task, TaskStatus, settings_of

if TYPE_CHECKING:
    from .retry_module import RetryModule


def find_task(ctx: ReducerContext, task_id: int) -> Task:
    task: Task | None = ctx.db.task.id.find(task_id)
    if task is None:
        raise TaskNotFound(task_id)
    return task


def task_creator(rm: RetryModule, name: str, check: Callable[[ReducerContext, str], object], doc: str) -> Callable[..., Task]:
    """The reducer that adds a task, as `name`, after `check`ing the caller: `enqueue` (workers)
    and `submit` (admins) are the same function behind different role checks."""

    def create(
        ctx: ReducerContext,
        job_type: str,
        queue: str | None = None,
        payload: Any = None,
        max_attempts: int | None = None,
        backoff_seconds: int | None = None,
        run_after: Timestamp | None = None,
        priority: int = 0,
        idempotency_key: str | None = None,
    ) -> Task:
        check(ctx, name)
        spec = transitions.task_spec(job_type, queue, payload, max_attempts, backoff_seconds, run_after, priority, idempotency_key)
        return transitions.create_task(ctx, rm.handlers, spec)

    create.__name__ = create.__qualname__ = name
    create.__doc__ = doc
    return create


def held_task(ctx: ReducerContext, task_id: int, action: str, attempt: int | None = None) -> Task:
    """The running task `task_id`, if the caller holds its lease: the lease holder's identity,
    and, when the worker says which claim it acts for (`attempt`, the claim's `attempts`), that
    claim. The attempt fences processes that share one identity: a paused one's late report
    names an attempt that is no longer current."""
    task = find_task(ctx, task_id)
    if task.status is not TaskStatus.RUNNING:
        raise InvalidTransition(f"{action}: task {task_id} is {task.status.value}, not running")
    if task.lease_holder != ctx.sender or (attempt is not None and attempt != task.attempts):
        raise StaleLease(f"{action}: task {task_id} is leased to another claim (attempt {task.attempts}); yours is no longer current")
    return task


def lease_length(ctx: ReducerContext, lease_seconds: int | None) -> int:
    if lease_seconds is None:
        return settings_of(ctx.db).default_lease_seconds
    return check_int("lease_seconds", lease_seconds, 1, MAX_LEASE_SECONDS)


def register(mod: Module, rm: RetryModule) -> None:
    mod.reducer(task_creator(rm, "enqueue", require_worker, "Add a task (worker role or admin). The same idempotency key returns the first task."))

    @mod.reducer
    def claim(ctx: ReducerContext, queue: str | None = None, worker_id: str | None = None, lease_seconds: int | None = None) -> Task | None:
        """Atomically take the highest-priority, oldest ready task (of `queue`, or any), or None."""
        require_worker(ctx, "claim")
        if queue is not None:
            check_name("queue", queue)
        worker = ctx.sender.to_hex() if worker_id is None else check_name("worker_id", worker_id)
        lease = lease_length(ctx, lease_seconds)
        task = next_claimable(ctx.db, queue, ctx.timestamp)
        if task is None:
            return None
        return transitions.start_claim(ctx, task, worker, lease)

    @mod.reducer
    def heartbeat(ctx: ReducerContext, task_id: int, lease_seconds: int | None = None, attempt: int | None = None) -> Task:
        """Extend the caller's lease on a running task to now + lease_seconds."""
        require_worker(ctx, "heartbeat")
        lease = lease_length(ctx, lease_seconds)
        return transitions.extend_lease(ctx, held_task(ctx, task_id, "heartbeat", attempt), lease)

    @mod.reducer
    def complete(ctx: ReducerContext, task_id: int, result: Any = None, attempt: int | None = None) -> Task:
        require_worker(ctx, "complete")
        task = held_task(ctx, task_id, "complete", attempt)
        return transitions.succeed(ctx, task, result, task.claimed_by or ctx.sender.to_hex())

    @mod.reducer
    def fail(ctx: ReducerContext, task_id: int, error: str, attempt: int | None = None) -> Task:
        """A failed attempt: retried after backoff, or dead when it was the last one."""
        require_worker(ctx, "fail")
        task = held_task(ctx, task_id, "fail", attempt)
        return transitions.fail(ctx, rm.handlers, task, error, Outcome.FAILED, task.claimed_by or ctx.sender.to_hex())
