"""Every reducer of the task-retry module, on one page.

    lifecycle and scheduled   retry_init, run_attempt, sweep_leases, reap_lease
    workers (or admins)       enqueue, claim, heartbeat, complete, fail (seed 000's routes), snooze
    batches                   enqueue_many, claim_many, complete_many
    admins                    submit, requeue, run_now, delete_task, cancel, add_admin, remove_admin,
                              grant_worker, revoke_worker, set_history_cap, set_default_lease

Each checks its caller inside its transaction first (roles.py) and refuses with NotAuthorized,
changing nothing; the state changes themselves are transitions.py's. `declare_reducers` adds
them to one instance's module; they share that instance's handler registry (job type ->
handler), which decides whether a queued task runs in the module or waits for a worker.

The batch forms are what Oban's `insert_all`, River's `InsertMany` and a worker fetching
several jobs per poll give their users: the per-call cost (role check, transaction, commit
record, fsync) is paid once. Each task still goes through the transitions its one-at-a-time
reducer uses, so a batch leaves exactly the rows the calls one by one would.
`enqueue_many` and `complete_many` are all-or-nothing: one bad item fails the call, naming it.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ..module import Module
from ..runtime import ReducerContext
from ..types import Identity
from . import retention, transitions
from .errors import InvalidArgument, InvalidTransition
from .handlers import run_handler_attempt
from .limits import MAX_BATCH, MAX_HISTORY_CAP, MAX_LEASE_SECONDS, MAX_SNOOZE_SECONDS, check_batch, check_int
from .queues import set_limits, set_paused
from .roles import require_admin, require_worker
from .singletons import settings_of
from .tables import (
    DEFAULT_HISTORY_CAP,
    DEFAULT_LEASE_SECONDS,
    AttemptTimer,
    Completion,
    Enqueued,
    LeaseSweep,
    LeaseTimer,
    Limits,
    NewTask,
    Outcome,
    RetentionSweep,
    RetryAdmin,
    RetryQueue,
    RetryRetention,
    RetrySettings,
    RetryWorker,
    Task,
    TaskStatus,
)
from .transitions import Handlers
from .workers import claim_up_to, complete_held, find_task, held_task, lease_length


def _save_settings(ctx: ReducerContext, **changes: Any) -> None:
    current = ctx.db.retry_settings.id.find(0)
    if current is None:  # the module was added to a database created without it
        ctx.db.retry_settings.insert(msgspec.structs.replace(settings_of(ctx.db), **changes))
    else:
        ctx.db.retry_settings.id.update(msgspec.structs.replace(current, **changes))


def declare_reducers(mod: Module, handlers: Handlers) -> None:
    # --- lifecycle and scheduled ----------------------------------------------------------------

    @mod.init
    def retry_init(ctx: ReducerContext) -> None:
        """The publisher becomes the first admin."""
        ctx.db.retry_admin.insert(RetryAdmin(ctx.sender, ctx.timestamp, ctx.sender))
        if ctx.db.retry_settings.id.find(0) is None:
            ctx.db.retry_settings.insert(RetrySettings(0, DEFAULT_HISTORY_CAP, DEFAULT_LEASE_SECONDS))

    @mod.reducer
    def run_attempt(ctx: ReducerContext, timer: AttemptTimer) -> None:
        """Scheduled: the next in-module attempt of a task."""
        run_handler_attempt(ctx, handlers, timer)

    @mod.reducer
    def sweep_leases(ctx: ReducerContext, sweep: LeaseSweep) -> None:
        """Scheduled at the earliest lease end: reap the claims whose lease has ended."""
        ctx.require_scheduler()
        transitions.sweep_leases(ctx, handlers)

    @mod.reducer
    def reap_lease(ctx: ReducerContext, timer: LeaseTimer) -> None:
        """Legacy per-claim reaper (rows of databases made before the sweep)."""
        ctx.require_scheduler()
        task: Task | None = ctx.db.task.id.find(timer.task_id)
        if task is None or task.status is not TaskStatus.RUNNING or task.attempts != timer.attempt:
            return
        if task.lease_expires_at is not None and task.lease_expires_at > ctx.timestamp:
            return  # heartbeats now move the sweep, not this row: the lease is still good
        transitions.reap(ctx, handlers, task)

    # --- workers (the worker role, or an admin) ---------------------------------------------------

    @mod.reducer(spread=True)
    def enqueue(ctx: ReducerContext, task: NewTask) -> Task:
        """Add a task (worker role or admin). The same idempotency key returns the first task."""
        require_worker(ctx, "enqueue")
        return transitions.create_task(ctx, handlers, transitions.checked(task))

    @mod.reducer(spread=True)
    def enqueue_unique(ctx: ReducerContext, task: NewTask) -> Enqueued:
        """`enqueue`, answering whether the task already existed (its unique key inside the
        window, or its idempotency key) instead of being added (worker role or admin)."""
        require_worker(ctx, "enqueue_unique")
        found, duplicate = transitions.create_or_existing(ctx, handlers, transitions.checked(task))
        return Enqueued(found, duplicate)

    @mod.reducer
    def claim(ctx: ReducerContext, queue: str | None = None, worker_id: str | None = None, lease_seconds: int | None = None) -> Task | None:
        """Atomically take the highest-priority, oldest ready task (of `queue`, or any), or None."""
        require_worker(ctx, "claim")
        claimed = claim_up_to(ctx, 1, queue, worker_id, lease_seconds)
        return claimed[0] if claimed else None

    @mod.reducer
    def heartbeat(ctx: ReducerContext, task_id: int, lease_seconds: int | None = None, attempt: int | None = None) -> Task:
        """Extend the caller's lease on a running task to now + lease_seconds."""
        require_worker(ctx, "heartbeat")
        lease = lease_length(ctx, lease_seconds)
        return transitions.extend_lease(ctx, held_task(ctx, task_id, "heartbeat", attempt), lease)

    @mod.reducer
    def complete(ctx: ReducerContext, task_id: int, result: Any = None, attempt: int | None = None) -> Task:
        require_worker(ctx, "complete")
        return complete_held(ctx, task_id, result, attempt, "complete")

    @mod.reducer
    def fail(
        ctx: ReducerContext, task_id: int, error: str, attempt: int | None = None, retry: bool = True, retry_in_seconds: int | None = None
    ) -> Task:
        """A failed attempt: retried after backoff (or after `retry_in_seconds`), or dead when it
        was the last one. `retry=False`: dead at once (discarded), whatever attempts are left."""
        require_worker(ctx, "fail")
        if retry_in_seconds is not None:
            check_int("retry_in_seconds", retry_in_seconds, 0, MAX_SNOOZE_SECONDS)
            if not retry:
                raise InvalidArgument("retry_in_seconds with retry false: a discarded task is not retried")
        task = held_task(ctx, task_id, "fail", attempt)
        outcome = Outcome.FAILED if retry else Outcome.DISCARDED
        return transitions.fail(ctx, handlers, task, error, outcome, task.claimed_by or ctx.sender.to_hex(), retry_in=retry_in_seconds)

    @mod.reducer
    def snooze(ctx: ReducerContext, task_id: int, seconds: int, attempt: int | None = None) -> Task:
        """Give the running task back, to run again in `seconds`: the attempt does not count
        (bounded: MAX_SNOOZES free snoozes per task, then a snooze spends the attempt)."""
        require_worker(ctx, "snooze")
        check_int("seconds", seconds, 0, MAX_SNOOZE_SECONDS)
        task = held_task(ctx, task_id, "snooze", attempt)
        return transitions.snooze(ctx, handlers, task, seconds, task.claimed_by or ctx.sender.to_hex())

    # --- batches: many tasks in one transaction ---------------------------------------------------

    @mod.reducer
    def enqueue_many(ctx: ReducerContext, tasks: list[NewTask]) -> list[Task]:
        """Add several tasks in one transaction (worker role or admin); all or none. An
        idempotency key already used (earlier, or by an earlier item) returns that task."""
        require_worker(ctx, "enqueue_many")
        check_batch("enqueue_many", tasks)
        specs = []
        for i, t in enumerate(tasks):
            try:
                specs.append(transitions.checked(t))
            except InvalidArgument as e:
                raise InvalidArgument(f"enqueue_many: tasks[{i}]: {e}") from None
        return [transitions.create_task(ctx, handlers, spec) for spec in specs]

    @mod.reducer
    def claim_many(
        ctx: ReducerContext, limit: int, queue: str | None = None, worker_id: str | None = None, lease_seconds: int | None = None
    ) -> list[Task]:
        """Take up to `limit` ready tasks, in the order `claim` would take them one by one, each
        with its own lease; fewer (or none) when fewer are ready."""
        require_worker(ctx, "claim_many")
        check_int("limit", limit, 1, MAX_BATCH)
        return claim_up_to(ctx, limit, queue, worker_id, lease_seconds)

    @mod.reducer
    def complete_many(ctx: ReducerContext, completions: list[Completion]) -> list[Task]:
        """Complete several running tasks the caller holds; all or none (a task not running or
        leased to another claim fails the call, naming it)."""
        require_worker(ctx, "complete_many")
        check_batch("complete_many", completions)
        return [complete_held(ctx, c.task_id, c.result, c.attempt, "complete_many") for c in completions]

    # --- admins -----------------------------------------------------------------------------------

    @mod.reducer(spread=True)
    def submit(ctx: ReducerContext, task: NewTask) -> Task:
        """Add a task directly (admin). A job type with a handler gets its first attempt now."""
        require_admin(ctx, "submit")
        return transitions.create_task(ctx, handlers, transitions.checked(task))

    @mod.reducer
    def requeue(ctx: ReducerContext, task_id: int) -> Task:
        """A dead task back to queued, due now, attempts reset."""
        require_admin(ctx, "requeue")
        return transitions.requeue(ctx, handlers, find_task(ctx, task_id))

    @mod.reducer
    def run_now(ctx: ReducerContext, task_id: int) -> Task:
        """A queued task (scheduled later, or backing off) due now (admin)."""
        require_admin(ctx, "run_now")
        return transitions.run_now(ctx, find_task(ctx, task_id))

    @mod.reducer
    def delete_task(ctx: ReducerContext, task_id: int) -> None:
        """Delete a dead task (its history rows stay)."""
        require_admin(ctx, "delete_task")
        transitions.delete(ctx, find_task(ctx, task_id))

    @mod.reducer
    def cancel(ctx: ReducerContext, task_id: int, reason: str | None = None) -> Task:
        """A queued or running task to dead/cancelled; `reason` goes to last_error. A running
        attempt ends (outcome `cancelled`) and its holder's next report is refused, TaskCancelled."""
        require_admin(ctx, "cancel")
        return transitions.cancel(ctx, find_task(ctx, task_id), reason)

    @mod.reducer
    def add_admin(ctx: ReducerContext, identity: Identity) -> None:
        require_admin(ctx, "add_admin")
        if ctx.db.retry_admin.identity.find(identity) is None:
            ctx.db.retry_admin.insert(RetryAdmin(identity, ctx.timestamp, ctx.sender))

    @mod.reducer
    def remove_admin(ctx: ReducerContext, identity: Identity) -> None:
        """Remove an admin (yourself included), but never the last one."""
        require_admin(ctx, "remove_admin")
        row = ctx.db.retry_admin.identity.find(identity)
        if row is None:
            raise InvalidArgument(f"{identity} is not an admin")
        if ctx.db.retry_admin.count() <= 1:
            raise InvalidTransition("the last admin cannot be removed; add another admin first")
        ctx.db.retry_admin.delete(row)

    @mod.reducer
    def grant_worker(ctx: ReducerContext, identity: Identity) -> None:
        require_admin(ctx, "grant_worker")
        if ctx.db.retry_worker.identity.find(identity) is None:
            ctx.db.retry_worker.insert(RetryWorker(identity, ctx.timestamp, ctx.sender))

    @mod.reducer
    def revoke_worker(ctx: ReducerContext, identity: Identity) -> None:
        """Take the worker role away. Leases it holds run out and the reaper requeues them."""
        require_admin(ctx, "revoke_worker")
        row = ctx.db.retry_worker.identity.find(identity)
        if row is None:
            raise InvalidArgument(f"{identity} does not have the worker role")
        ctx.db.retry_worker.delete(row)

    @mod.reducer
    def set_history_cap(ctx: ReducerContext, cap: int) -> None:
        """Keep at most `cap` attempt rows; a lower cap trims the oldest now."""
        require_admin(ctx, "set_history_cap")
        check_int("cap", cap, 0, MAX_HISTORY_CAP)
        _save_settings(ctx, history_cap=cap)
        transitions.trim_history(ctx, cap)

    @mod.reducer
    def set_default_lease(ctx: ReducerContext, seconds: int) -> None:
        """The lease a claim takes when it names none (leases already taken keep theirs)."""
        require_admin(ctx, "set_default_lease")
        check_int("seconds", seconds, 1, MAX_LEASE_SECONDS)
        _save_settings(ctx, default_lease_seconds=seconds)

    # --- retention (retention.py) ------------------------------------------------------------------

    @mod.reducer
    def prune_finished(ctx: ReducerContext, sweep: RetentionSweep) -> None:
        """Scheduled: delete a batch of finished tasks past their retention, with their history."""
        ctx.require_scheduler()
        retention.prune(ctx)

    @mod.reducer
    def set_retention(ctx: ReducerContext, status: str, max_age_seconds: int | None = None, max_count: int | None = None) -> RetryRetention:
        """How long `status` (completed or dead) tasks are kept: an age in seconds and a count,
        None for no such limit (admin). The sweep prunes under the new limits at once."""
        require_admin(ctx, "set_retention")
        return retention.set_policy(ctx, status, max_age_seconds, max_count)

    # --- admins: queue control (queues.py) --------------------------------------------------------

    @mod.reducer
    def pause_queue(ctx: ReducerContext, queue: str) -> RetryQueue:
        """Claims of `queue` get nothing and its in-module attempts wait; enqueues still land."""
        require_admin(ctx, "pause_queue")
        return set_paused(ctx, queue, True, transitions.arm_attempt)

    @mod.reducer
    def resume_queue(ctx: ReducerContext, queue: str) -> RetryQueue:
        """Undo pause_queue; the in-module attempts that waited are due again."""
        require_admin(ctx, "resume_queue")
        return set_paused(ctx, queue, False, transitions.arm_attempt)

    @mod.reducer
    def set_queue_limits(
        ctx: ReducerContext,
        queue: str,
        concurrency: int | None = None,
        rate_limit: int | None = None,
        rate_period_seconds: int | None = None,
        partition_limit: int | None = None,
    ) -> RetryQueue:
        """Replace `queue`'s concurrency and rate limits (None: no such limit; the period
        defaults to 60 s)."""
        require_admin(ctx, "set_queue_limits")
        return set_limits(ctx, queue, Limits(concurrency, rate_limit, rate_period_seconds, partition_limit))
