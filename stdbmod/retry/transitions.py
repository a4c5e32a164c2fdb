"""The task state machine: every change of a task's status goes through one function here, used
alike by worker reducers, admin reducers, the in-module attempt runner and the lease reaper.

    queued --claim / handler run--> running --complete / return--> completed
    running --fail, attempts < max--> queued (run_after = now + backoff * 2**(attempts-1))
    running --fail at max / GiveUp / fail retry=false--> dead (exhausted / gave_up / discarded)
    running --snooze--> queued (run_after = now + seconds, the attempt given back)
    queued --run_now--> queued, due now
    queued / running --cancel--> dead (cancelled);  dead --requeue--> queued (attempts reset)
    running --lease ends at last_attempted_at + timeout_seconds--> queued or dead (outcome timeout)

A task entering dead gets the fingerprint of its error (`died`), the dead-letter triage's key.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

import msgspec

from ..runtime import Range, ReducerContext
from ..types import At, TimeDuration, Timestamp
from . import retention
from .errors import InvalidArgument, InvalidTransition
from .fingerprint import fingerprint
from .limits import (
    DEFAULT_BACKOFF_SECONDS,
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_QUEUE,
    MAX_ATTEMPTS_LIMIT,
    MAX_BACKOFF_SECONDS,
    MAX_SNOOZES,
    MAX_TIMEOUT_SECONDS,
    PRIORITY_LIMIT,
    backoff_delay,
    check_fraction,
    check_int,
    check_name,
    clip_error,
    unstorable,
)
from .queues import Picked, note_claim, note_claim_under
from .singletons import arm_no_later, settings_of
from .tables import Attempt, AttemptTimer, DeadReason, LeaseSweep, NewTask, Outcome, Task, TaskStatus
from .unique import checked_unique, existing, unique_key

Handlers = Mapping[str, Callable[..., Any]]
_replace: Final = msgspec.structs.replace
_astuple: Final = msgspec.structs.astuple


# `checked` and `create_or_existing` take a NewTask apart in one call, by its fields' declared
# order: compiled, each attribute read of a Struct is a generic lookup (~200 instructions), and an
# enqueue read ~30. tests/retry/test_retry_spec.py sets every field apart and finds each in place.


def checked(task: NewTask) -> NewTask:
    """`task` with every option checked and the defaults filled in; InvalidArgument names the
    first bad one."""
    (
        job_type, queue, payload, max_attempts, backoff_seconds, run_after, priority, idempotency_key,
        max_backoff_seconds, backoff_jitter, partition_key, timeout_seconds, unique,
    ) = _astuple(task)  # fmt: skip
    why = unstorable(payload)
    if why is not None:
        raise InvalidArgument(f"payload cannot be stored: {why}")
    if run_after is not None and not isinstance(run_after, Timestamp):
        raise InvalidArgument("run_after must be a Timestamp")
    # a default stands in for None unchecked: the defaults are within the bounds (limits.py)
    return NewTask(
        job_type=check_name("job_type", job_type),
        queue=DEFAULT_QUEUE if queue is None else check_name("queue", queue),
        payload=payload,
        max_attempts=DEFAULT_MAX_ATTEMPTS if max_attempts is None else check_int("max_attempts", max_attempts, 1, MAX_ATTEMPTS_LIMIT),
        backoff_seconds=DEFAULT_BACKOFF_SECONDS if backoff_seconds is None else check_int("backoff_seconds", backoff_seconds, 0, MAX_BACKOFF_SECONDS),
        run_after=run_after,
        priority=check_int("priority", priority, -PRIORITY_LIMIT, PRIORITY_LIMIT),
        idempotency_key=None if idempotency_key is None else check_name("idempotency_key", idempotency_key),
        max_backoff_seconds=None if max_backoff_seconds is None else check_int("max_backoff_seconds", max_backoff_seconds, 0, MAX_BACKOFF_SECONDS),
        backoff_jitter=check_fraction("backoff_jitter", backoff_jitter),
        partition_key=None if partition_key is None else check_name("partition_key", partition_key),
        timeout_seconds=None if timeout_seconds is None else check_int("timeout_seconds", timeout_seconds, 1, MAX_TIMEOUT_SECONDS),
        unique=None if unique is None else checked_unique(unique),
    )


# --- timers ----------------------------------------------------------------------------------------


def arm_attempt(ctx: ReducerContext, task: Task) -> None:
    """Schedule the next in-module attempt of `task` at its run_after."""
    ctx.db.attempt_timer.task_id.delete(task.id)
    ctx.db.attempt_timer.insert(AttemptTimer(0, At(task.run_after), task.id))


def disarm(ctx: ReducerContext, task: Task) -> None:
    """Drop the next in-module attempt of `task` (as it was before the change): only a task
    queued for a handler has one, so a worker's claim costs no lookup."""
    if task.in_module:
        ctx.db.attempt_timer.task_id.delete(task.id)


def arm_sweep(ctx: ReducerContext, expires: Timestamp) -> None:
    """Make the lease sweep due no later than `expires`."""
    arm_no_later(ctx.db.lease_sweep, LeaseSweep, expires)


# After a firing the sweep waits at least this long. Without it, N long jobs whose heartbeats
# keep moving their leases would make it fire (and find nothing) about once per heartbeat each;
# with it, at most once a second, and a lease is reaped at most this late.
SWEEP_SPACING: Final = TimeDuration.from_seconds(1)


def sweep_leases(ctx: ReducerContext, handlers: Handlers) -> None:
    """Reap every claim whose lease has ended, the earliest first (the sweep firing), then move
    the sweep to the next lease end (or a second from now, if later): an index walk over the
    ended leases and one more entry."""
    now = ctx.timestamp
    index = ctx.db.task.by_end  # running tasks (never finished) by lease end
    ended = list(index.filter((TaskStatus.RUNNING, None, Range(Timestamp(-(1 << 63)), now, hi_inclusive=True))))
    for task in ended:
        reap(ctx, handlers, task)
    upcoming: Task | None = next(iter(index.filter((TaskStatus.RUNNING, None, Range(now, lo_inclusive=False)))), None)
    if upcoming is not None and upcoming.lease_expires_at is not None:
        ctx.db.lease_sweep.scheduled_id.update(LeaseSweep(0, At(max(upcoming.lease_expires_at, now + SWEEP_SPACING))))


def reap(ctx: ReducerContext, handlers: Handlers, task: Task) -> None:
    """A lease ended with neither complete nor fail: the worker is presumed dead, the attempt
    failed. A lease that ended at the attempt's deadline (timeout_seconds) is a timeout."""
    deadline = attempt_deadline(task)
    if deadline is not None and task.lease_expires_at is not None and task.lease_expires_at >= deadline:
        error = f"timeout: the attempt ran past its timeout_seconds ({task.timeout_seconds} s); worker {task.claimed_by}"
        fail(ctx, handlers, task, error, Outcome.TIMEOUT, task.claimed_by or "?")
        return
    expired = task.lease_expires_at.isoformat() if task.lease_expires_at else "?"
    error = f"lease expired at {expired}: worker {task.claimed_by} neither completed nor failed the task"
    fail(ctx, handlers, task, error, Outcome.LEASE_EXPIRED, task.claimed_by or "?")


# --- creating ----------------------------------------------------------------------------------------


def create_task(ctx: ReducerContext, handlers: Handlers, spec: NewTask, recurring_id: int | None = None) -> Task:
    """Insert a queued task from a `checked` spec (or return the one already holding its
    idempotency key, or its unique key inside the window). A job type with a handler gets its
    first attempt scheduled at run_after: at once, by default."""
    return create_or_existing(ctx, handlers, spec, recurring_id)[0]


def create_or_existing(ctx: ReducerContext, handlers: Handlers, spec: NewTask, recurring_id: int | None = None) -> tuple[Task, bool]:
    """`create_task`, saying whether the task already existed (a duplicate)."""
    (
        job_type, queue, payload, max_attempts, backoff, run_after, priority, idempotency_key,
        max_backoff_seconds, backoff_jitter, partition_key, timeout_seconds, unique,
    ) = _astuple(spec)  # fmt: skip
    if idempotency_key is not None:
        for found in ctx.db.task.idempotency_key.filter(idempotency_key):
            return found, True
    key = None
    if unique is not None:
        key = unique_key(spec, unique)
        duplicate = existing(ctx, key, unique)
        if duplicate is not None:
            return duplicate, True
    assert queue is not None and max_attempts is not None and backoff is not None  # checked() filled them in
    now = ctx.timestamp
    in_module = job_type in handlers
    task: Task = ctx.db.task.insert(
        Task(
            id=0,
            created_at=now,
            updated_at=now,
            queue=queue,
            job_type=job_type,
            payload=payload,
            status=TaskStatus.QUEUED,
            dead_reason=None,
            attempts=0,
            max_attempts=max_attempts,
            backoff_seconds=backoff,
            priority=priority,
            neg_priority=-priority,
            in_module=in_module,
            run_after=run_after or now,
            idempotency_key=idempotency_key,
            max_backoff_seconds=max_backoff_seconds,
            backoff_jitter=backoff_jitter,
            recurring_id=recurring_id,
            partition_key=partition_key,
            timeout_seconds=timeout_seconds,
            unique_key=key,
        )
    )
    if in_module:
        arm_attempt(ctx, task)
    return task, False


# --- attempts ----------------------------------------------------------------------------------------


def start_attempt(ctx: ReducerContext, task: Task, **claim: Any) -> Task:
    """queued -> running; attempts counts attempts started. `claim` sets the lease fields."""
    if task.status is not TaskStatus.QUEUED:
        raise InvalidTransition(f"task {task.id} is {task.status.value}, not queued")
    now = ctx.timestamp
    running = _replace(task, status=TaskStatus.RUNNING, attempts=task.attempts + 1, last_attempted_at=now, updated_at=now, **claim)
    ctx.db.task.id.update(running)
    return running


def attempt_deadline(task: Task) -> Timestamp | None:
    """When a running attempt must end: its start plus the task's timeout_seconds (None: no bound)."""
    if task.timeout_seconds is None or task.last_attempted_at is None:
        return None
    return task.last_attempted_at + TimeDuration.from_seconds(task.timeout_seconds)


def _lease_end(ctx: ReducerContext, deadline: Timestamp | None, lease_seconds: int) -> Timestamp:
    """A lease of `lease_seconds` from now, cut at the attempt's deadline: no lease or heartbeat
    carries an attempt past its timeout, so the sweep ends it there."""
    expires = ctx.timestamp + TimeDuration.from_seconds(lease_seconds)
    return expires if deadline is None else min(expires, deadline)


def start_claim(ctx: ReducerContext, task: Task, worker_id: str, lease_seconds: int) -> Task:
    running = _leased(ctx, task, worker_id, lease_seconds)
    note_claim(ctx, running)
    return running


def start_picked_claim(ctx: ReducerContext, picked: Picked, worker_id: str, lease_seconds: int) -> Task:
    """`start_claim` of what `queues.pick` chose, with the control row it read."""
    running = _leased(ctx, picked[0], worker_id, lease_seconds)
    note_claim_under(ctx, running, picked[1])
    return running


def _leased(ctx: ReducerContext, task: Task, worker_id: str, lease_seconds: int) -> Task:
    deadline = None if task.timeout_seconds is None else ctx.timestamp + TimeDuration.from_seconds(task.timeout_seconds)
    expires = _lease_end(ctx, deadline, lease_seconds)
    running = start_attempt(
        ctx, task, claimed_at=ctx.timestamp, claimed_by=worker_id, lease_holder=ctx.sender, lease_expires_at=expires
    )
    arm_sweep(ctx, expires)
    return running


def extend_lease(ctx: ReducerContext, task: Task, lease_seconds: int) -> Task:
    expires = _lease_end(ctx, attempt_deadline(task), lease_seconds)
    extended = _replace(task, lease_expires_at=expires, updated_at=ctx.timestamp)
    ctx.db.task.id.update(extended)
    arm_sweep(ctx, expires)  # a shorter lease than the sweep's time moves it earlier
    return extended


def _record(ctx: ReducerContext, task: Task, outcome: Outcome, error: str | None, worker: str) -> None:
    """One history row; the oldest rows beyond the cap go in this same transaction."""
    ctx.db.attempt.insert(
        Attempt(
            id=0,
            task_id=task.id,
            job_type=task.job_type,
            attempt=task.attempts,
            outcome=outcome,
            error=error,
            worker=worker,
            started_at=task.last_attempted_at or ctx.timestamp,
            finished_at=ctx.timestamp,
        )
    )
    trim_history(ctx, settings_of(ctx.db).history_cap)


def trim_history(ctx: ReducerContext, cap: int) -> int:
    excess = ctx.db.attempt.count() - cap
    if excess <= 0:
        return 0
    return ctx.db.attempt.delete_first(excess)  # the lowest ids: the oldest attempts


def succeed(ctx: ReducerContext, task: Task, result: Any, worker: str) -> Task:
    _record(ctx, task, Outcome.COMPLETED, None, worker)
    now = ctx.timestamp
    done = _replace(
        task,
        status=TaskStatus.COMPLETED,
        completed_at=now,
        finished_at=now,
        result=result,
        lease_holder=None,
        lease_expires_at=None,
        updated_at=now,
    )
    ctx.db.task.id.update(done)
    disarm(ctx, task)
    retention.finished(ctx, TaskStatus.COMPLETED)
    return done


def fail(
    ctx: ReducerContext, handlers: Handlers, task: Task, error: str, outcome: Outcome, worker: str, *, retry_in: int | None = None
) -> Task:
    """A failed attempt: back to queued with backoff (or after `retry_in` seconds, when the
    worker or handler said so), or dead when given up, discarded (`retry: false`) or out of
    attempts."""
    error = clip_error(error)
    _record(ctx, task, outcome, error, worker)
    now = ctx.timestamp
    after = _replace(task, last_error=error, lease_holder=None, lease_expires_at=None, updated_at=now)
    if outcome is Outcome.GAVE_UP:
        after = died(after, DeadReason.GAVE_UP, now)
    elif outcome is Outcome.DISCARDED:
        after = died(after, DeadReason.DISCARDED, now)
    elif task.attempts >= task.max_attempts:
        after = died(after, DeadReason.EXHAUSTED, now)
    else:
        if retry_in is not None:
            delay = TimeDuration.from_seconds(retry_in)
        elif task.backoff_jitter > 0:
            delay = backoff_delay(task.backoff_seconds, task.attempts, task.max_backoff_seconds, task.backoff_jitter, ctx.rng)
        else:
            delay = backoff_delay(task.backoff_seconds, task.attempts, task.max_backoff_seconds)
        after = _replace(after, status=TaskStatus.QUEUED, run_after=now + delay, in_module=task.job_type in handlers)
    ctx.db.task.id.update(after)
    disarm(ctx, task)
    if after.status is TaskStatus.QUEUED and after.in_module:
        arm_attempt(ctx, after)
    if after.status is TaskStatus.DEAD:
        retention.finished(ctx, TaskStatus.DEAD)
    return after


def died(task: Task, reason: DeadReason, now: Timestamp) -> Task:
    """`task` (its last_error set) as it enters the dead-letter tier: the fingerprint of its
    error groups it there. A task that a bulk requeue sent back under a fingerprint (and still
    carries it) and dies again with the same one is held (`triage_hold`): bulk requeues pass it
    by until an admin acts on it again, so a retry-all never loops (docs/operations.md)."""
    fp = fingerprint(task.last_error)
    hold = task.error_fingerprint == fp and reason is not DeadReason.CANCELLED
    return _replace(task, status=TaskStatus.DEAD, dead_reason=reason, finished_at=now, error_fingerprint=fp, triage_hold=hold)


# --- admin transitions ---------------------------------------------------------------------------


def requeue(ctx: ReducerContext, handlers: Handlers, task: Task, *, bulk: bool = False) -> Task:
    """dead -> queued with attempts reset: a fresh start, due now. A bulk requeue (triage.py)
    keeps the error fingerprint on the live task, so that dying again with the same one holds it
    (`died`); an admin's own requeue clears it, and the hold."""
    if task.status is not TaskStatus.DEAD:
        raise InvalidTransition(f"task {task.id} is {task.status.value}; only a dead task can be requeued")
    now = ctx.timestamp
    fresh = _replace(
        task,
        status=TaskStatus.QUEUED,
        dead_reason=None,
        finished_at=None,
        attempts=0,
        snoozes=0,
        run_after=now,
        in_module=task.job_type in handlers,
        lease_holder=None,
        lease_expires_at=None,
        updated_at=now,
        error_fingerprint=task.error_fingerprint if bulk else None,
        triage_hold=False,
    )
    ctx.db.task.id.update(fresh)
    if fresh.in_module:
        arm_attempt(ctx, fresh)
    return fresh


def cancel(ctx: ReducerContext, task: Task, reason: str | None) -> Task:
    """queued or running -> dead (cancelled). A running attempt ends with outcome `cancelled`;
    its holder stays named in lease_holder (the lease itself is gone), so its next heartbeat,
    complete or fail is told `TaskCancelled` rather than a plain 409."""
    if task.status not in (TaskStatus.QUEUED, TaskStatus.RUNNING):
        raise InvalidTransition(f"task {task.id} is {task.status.value}; only a queued or running task can be cancelled")
    now = ctx.timestamp
    dead = _replace(task, updated_at=now)
    if task.status is TaskStatus.RUNNING:
        _record(ctx, task, Outcome.CANCELLED, reason or "cancelled by an admin", task.claimed_by or "?")
        dead = _replace(dead, lease_expires_at=None)
    if reason is not None:
        dead = _replace(dead, last_error=clip_error(reason))
    dead = died(dead, DeadReason.CANCELLED, now)
    ctx.db.task.id.update(dead)
    disarm(ctx, task)
    retention.finished(ctx, TaskStatus.DEAD)
    return dead


def delete(ctx: ReducerContext, task: Task) -> None:
    if task.status is not TaskStatus.DEAD:
        raise InvalidTransition(f"task {task.id} is {task.status.value}; only a dead task can be deleted")
    ctx.db.task.delete(task)
    disarm(ctx, task)


# --- failure policy (issue 17): snooze, run now ---------------------------------------------------


def snooze(ctx: ReducerContext, handlers: Handlers, task: Task, seconds: int, worker: str) -> Task:
    """running -> queued at now + seconds, the attempt given back (attempts goes down by one,
    snoozes up by one; history outcome `snoozed`). Past MAX_SNOOZES a snooze is no longer free:
    it is a failed attempt retried in `seconds` (or dead/exhausted), so no task snoozes forever."""
    if task.status is not TaskStatus.RUNNING:
        raise InvalidTransition(f"task {task.id} is {task.status.value}; only a running task can be snoozed")
    if task.snoozes >= MAX_SNOOZES:
        error = f"snoozed {task.snoozes} times, the limit: this snooze counts as a failed attempt"
        return fail(ctx, handlers, task, error, Outcome.FAILED, worker, retry_in=seconds)
    _record(ctx, task, Outcome.SNOOZED, None, worker)
    now = ctx.timestamp
    after = _replace(
        task,
        status=TaskStatus.QUEUED,
        attempts=task.attempts - 1,
        snoozes=task.snoozes + 1,
        run_after=now + TimeDuration.from_seconds(seconds),
        in_module=task.job_type in handlers,
        lease_holder=None,
        lease_expires_at=None,
        updated_at=now,
    )
    ctx.db.task.id.update(after)
    disarm(ctx, task)
    if after.in_module:
        arm_attempt(ctx, after)
    return after


def run_now(ctx: ReducerContext, task: Task) -> Task:
    """A queued task (scheduled, or backing off) becomes due now: it keeps its priority and
    attempts, and takes its place among the due tasks. One already due keeps its run_after."""
    if task.status is not TaskStatus.QUEUED:
        raise InvalidTransition(f"task {task.id} is {task.status.value}; only a queued task can be made to run now")
    now = ctx.timestamp
    if task.run_after <= now:
        return task
    due = _replace(task, run_after=now, updated_at=now)
    ctx.db.task.id.update(due)
    if due.in_module:
        arm_attempt(ctx, due)
    return due
