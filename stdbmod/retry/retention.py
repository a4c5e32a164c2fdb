"""Retention (issue 16): finished tasks pruned by age and by count per status, in bounded batches.

A completed task is kept `max_age_seconds` after it finished (default 7 days), a dead one 30 days
(the dead-letter tier, cancelled tasks included, is kept longer to be looked at); `max_count`
(default none) keeps at most that many of a status, the oldest going first. Admins change both
at run time (`set_retention`); a status without a row has the defaults.

One schedule row, `retention_sweep`, does the pruning. A task entering completed or dead makes it
due no later than that task's age limit (or, when the status has a count limit, a minute from
now); otherwise a finish only reads it. Each firing deletes at most PRUNE_BATCH tasks, oldest
finished first, with their attempt history, so one transaction stays small however large the
backlog: with more to do it fires again a second later, else at the next task's age limit, or
goes when no finished task is left. The walk is the (status, finished_at, ...) index; nothing is
scanned. Freed pages are reused by LMDB, so a steady load keeps the data file flat (docs).
"""

from __future__ import annotations

from typing import Any

from ..runtime import Range, ReducerContext
from ..types import At, TimeDuration, Timestamp
from .errors import InvalidArgument
from .limits import MAX_RETENTION_COUNT, MAX_RETENTION_SECONDS, check_int
from .singletons import arm_no_later
from .tables import RetentionSweep, RetryRetention, Task, TaskStatus

PRUNE_BATCH = 500  # tasks per firing: bounds one transaction
PRUNE_AGAIN = TimeDuration.from_seconds(1)  # the next batch of a backlog
COUNT_CHECK = TimeDuration.from_seconds(60)  # how soon a finish under a count limit is checked
FINISHED = (TaskStatus.COMPLETED, TaskStatus.DEAD)
DEFAULT_AGE = {TaskStatus.COMPLETED: 7 * 86_400, TaskStatus.DEAD: 30 * 86_400}


# a status without a row: its defaults, built once (the rows are frozen values)
_DEFAULT = {s: RetryRetention(s, DEFAULT_AGE[s], None) for s in FINISHED}


def policy_of(db: Any, status: TaskStatus) -> RetryRetention:
    row: RetryRetention | None = db.retry_retention.status.find(status)
    return row if row is not None else _DEFAULT[status]


def _arm(ctx: ReducerContext, due: Timestamp) -> None:
    """Make the sweep due no later than `due`."""
    arm_no_later(ctx.db.retention_sweep, RetentionSweep, due)


def finished(ctx: ReducerContext, status: TaskStatus) -> None:
    """A task just became `status` (completed or dead): the sweep is due by its age limit, or a
    minute from now when the status has a count limit."""
    policy = policy_of(ctx.db, status)
    due: Timestamp | None = None if policy.max_count is None else ctx.timestamp + COUNT_CHECK
    if policy.max_age_seconds is not None:
        by_age = ctx.timestamp + TimeDuration.from_seconds(policy.max_age_seconds)
        due = by_age if due is None or by_age < due else due
    if due is not None:
        _arm(ctx, due)


def set_policy(ctx: ReducerContext, status: TaskStatus | str, max_age_seconds: int | None, max_count: int | None) -> RetryRetention:
    """Replace a status's limits; the sweep runs now under them."""
    try:
        which = TaskStatus(status)
    except ValueError:
        which = None
    if which not in FINISHED:
        raise InvalidArgument(f"status must be completed or dead, not {status!r}")
    assert which is not None
    age = None if max_age_seconds is None else check_int("max_age_seconds", max_age_seconds, 0, MAX_RETENTION_SECONDS)
    count = None if max_count is None else check_int("max_count", max_count, 0, MAX_RETENTION_COUNT)
    row = RetryRetention(which, age, count, ctx.timestamp)
    if ctx.db.retry_retention.status.find(which) is None:
        ctx.db.retry_retention.insert(row)
    else:
        ctx.db.retry_retention.status.update(row)
    _arm(ctx, ctx.timestamp)
    return row


def _delete(ctx: ReducerContext, task: Task) -> None:
    ctx.db.attempt.task_id.delete(task.id)  # its history goes with it
    ctx.db.task.delete(task)


def prune(ctx: ReducerContext, batch: int = PRUNE_BATCH) -> int:
    """The sweep firing: delete up to `batch` finished tasks past their status's age or count
    limit (oldest finished first, completed before dead), then re-arm; how many went."""
    now = ctx.timestamp
    budget = batch
    for status in FINISHED:
        policy = policy_of(ctx.db, status)
        if policy.max_age_seconds is not None and budget:
            cutoff = now - TimeDuration.from_seconds(policy.max_age_seconds)
            old = list(_take(ctx.db.task.by_end.filter((status, Range(hi=cutoff, hi_inclusive=True))), budget))
            for task in old:
                _delete(ctx, task)
            budget -= len(old)
        if policy.max_count is not None and budget:
            excess = ctx.db.task.by_end.count((status,)) - policy.max_count
            if excess > 0:
                extra = list(_take(ctx.db.task.by_end.filter((status,)), min(excess, budget)))
                for task in extra:
                    _delete(ctx, task)
                budget -= len(extra)
    pruned = batch - budget
    nxt = now + PRUNE_AGAIN if budget == 0 else _next_due(ctx, now)
    if nxt is not None:
        ctx.db.retention_sweep.scheduled_id.update(RetentionSweep(0, At(max(nxt, now + PRUNE_AGAIN))))
    return pruned


def _take(rows: Any, n: int) -> Any:
    for i, row in enumerate(rows):
        if i >= n:
            return
        yield row


def _next_due(ctx: ReducerContext, now: Timestamp) -> Timestamp | None:
    """When the sweep has work again: the oldest finished task's age limit per status, or a
    count check while a count-limited status holds tasks; None when neither."""
    due: list[Timestamp] = []
    for status in FINISHED:
        policy = policy_of(ctx.db, status)
        oldest: Task | None = next(iter(ctx.db.task.by_end.filter((status,))), None)
        if oldest is None:
            continue
        if policy.max_age_seconds is not None:
            since = oldest.finished_at if oldest.finished_at is not None else now
            due.append(since + TimeDuration.from_seconds(policy.max_age_seconds))
        if policy.max_count is not None:
            due.append(now + COUNT_CHECK)
    return min(due) if due else None
