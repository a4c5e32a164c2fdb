"""What a worker's reducers do once the caller's role is checked (reducers.py): the checks before
a transition (the task a call names and whether the caller holds its lease, the lease's length,
the worker's name), and the claim and the completion themselves, one body each for the single
and the batch form. Compiled (stdbmod/_mypyc.py): every claim, heartbeat and finish goes
through here, and a compiled caller calls the rest natively (an interpreted reducer calling
each step paid the wrapper that parses a compiled function's arguments every time)."""

from __future__ import annotations

from ..runtime import ReducerContext
from . import transitions
from .errors import AttemptTimedOut, InvalidTransition, StaleLease, TaskCancelled, TaskNotFound
from .limits import MAX_LEASE_SECONDS, check_int, check_name
from .queues import pick
from .singletons import settings_of
from .tables import DeadReason, Task, TaskStatus


def find_task(ctx: ReducerContext, task_id: int) -> Task:
    task: Task | None = ctx.db.task.id.find(task_id)
    if task is None:
        raise TaskNotFound(task_id)
    return task


def held_task(ctx: ReducerContext, task_id: int, action: str, attempt: int | None = None) -> Task:
    """The running task `task_id`, if the caller holds its lease: the lease holder's identity,
    and, when the worker says which claim it acts for (`attempt`, the claim's `attempts`), that
    claim. The attempt fences processes that share one identity: a paused one's late report
    names an attempt that is no longer current."""
    task = find_task(ctx, task_id)
    mine = attempt is None or attempt == task.attempts
    if task.dead_reason is DeadReason.CANCELLED and task.lease_holder == ctx.sender and mine:
        raise TaskCancelled(f"{action}: task {task_id} was cancelled by an admin while it ran; stop its work")
    if task.status is not TaskStatus.RUNNING:
        raise InvalidTransition(f"{action}: task {task_id} is {task.status.value}, not running")
    if task.lease_holder != ctx.sender or not mine:
        raise StaleLease(f"{action}: task {task_id} is leased to another claim (attempt {task.attempts}); yours is no longer current")
    deadline = transitions.attempt_deadline(task)
    if deadline is not None and ctx.timestamp >= deadline:
        raise AttemptTimedOut(f"{action}: task {task_id}'s attempt ran past its timeout_seconds ({task.timeout_seconds} s); it has ended")
    return task


def lease_length(ctx: ReducerContext, lease_seconds: int | None) -> int:
    if lease_seconds is None:
        return settings_of(ctx.db).default_lease_seconds
    return check_int("lease_seconds", lease_seconds, 1, MAX_LEASE_SECONDS)


def worker_id_of(ctx: ReducerContext, worker_id: str | None) -> str:
    return ctx.sender.to_hex() if worker_id is None else check_name("worker_id", worker_id)


def claim_up_to(ctx: ReducerContext, limit: int, queue: str | None, worker_id: str | None, lease_seconds: int | None) -> list[Task]:
    """Up to `limit` ready tasks (of `queue`, or any), each claimed with its own lease, in the
    order claims one by one would take them: `claim` (limit 1) and `claim_many`."""
    if queue is not None:
        check_name("queue", queue)
    worker = worker_id_of(ctx, worker_id)
    lease = lease_length(ctx, lease_seconds)
    claimed: list[Task] = []
    while len(claimed) < limit:
        picked = pick(ctx.db, queue, ctx.timestamp)
        if picked is None:
            break
        claimed.append(transitions.start_picked_claim(ctx, picked, worker, lease))
    return claimed


def complete_held(ctx: ReducerContext, task_id: int, result: object, attempt: int | None, action: str) -> Task:
    """Complete the running task `task_id` whose lease the caller holds: `complete` and each
    item of `complete_many`."""
    task = held_task(ctx, task_id, action, attempt)
    return transitions.succeed(ctx, task, result, task.claimed_by or ctx.sender.to_hex())
