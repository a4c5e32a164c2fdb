"""Queue control (issue 16): pausing a queue and limiting its claims, checked inside the claim's
transaction so the limits hold across every worker and process.

One `retry_queue` row per queue that has a control set (paused, or a limit); a queue without a
row is open and unlimited, and a row that controls nothing is deleted. The table is `cached`:
every claim reads its queue's row (or its absence) by key and admins write it rarely, so from
the second call on the check costs no storage read (docs/modules.md: a write, a failed call or
another writer's commit drops what the writer kept). A paused queue hands out nothing: no claim, and no in-module
attempt runs (its timer fires and leaves the task queued; resume re-arms them). Enqueues land.

Rate limits are exact over a sliding window: each claim of a rate-limited queue writes a
`claim_mark` row (queue, partition key, time), and a claim is allowed while fewer than N marks
lie in (now - period, now]. Marks that left the window are deleted by the next claim of that
queue, so a queue holds at most about N marks. Limits govern worker claims; in-module handlers
respect pause only (they run inside the scheduler's transaction, one at a time).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import msgspec

from ..runtime import Range, ReducerContext
from ..types import TimeDuration, Timestamp
from .claim import ready_tasks
from .limits import MAX_CONCURRENCY, MAX_RATE_LIMIT, MAX_RATE_PERIOD_SECONDS, check_int, check_name
from .tables import ClaimMark, Limits, RetryQueue, Task, TaskStatus

_MIN_TIME = Timestamp(-(1 << 63))


# --- admin: pause, resume, limits -----------------------------------------------------------------


def control_of(db: Any, queue: str) -> RetryQueue | None:
    row: RetryQueue | None = db.retry_queue.queue.find(queue)
    return row


def _save(ctx: ReducerContext, row: RetryQueue) -> RetryQueue:
    """Write a queue's controls; a row that controls nothing is deleted (an open queue)."""
    row = msgspec.structs.replace(row, updated_at=ctx.timestamp)
    old = control_of(ctx.db, row.queue)
    idle = not row.paused and row.concurrency is None and row.rate_limit is None and row.partition_limit is None
    if idle:
        if old is not None:
            ctx.db.retry_queue.delete(old)
        ctx.db.claim_mark.by_queue.delete(row.queue)  # no rate window to keep
    elif old is None:
        ctx.db.retry_queue.insert(row)
    else:
        ctx.db.retry_queue.queue.update(row)
    return row


def set_paused(ctx: ReducerContext, queue: str, paused: bool, arm: Any) -> RetryQueue:
    """Pause or resume `queue`. Resuming arms the next attempt of each of its in-module tasks
    whose timer fired while it was paused (`arm(ctx, task)`), in claim order."""
    check_name("queue", queue)
    row = control_of(ctx.db, queue) or RetryQueue(queue)
    saved = _save(ctx, msgspec.structs.replace(row, paused=paused))
    if not paused:
        for task in list(ctx.db.task.by_claim_queue.filter((TaskStatus.QUEUED, True, queue))):
            if ctx.db.attempt_timer.task_id.find(task.id) is None:
                arm(ctx, task)
    return saved


def set_limits(ctx: ReducerContext, queue: str, limits: Limits) -> RetryQueue:
    """Replace `queue`'s limits (pause is kept). A rate window already counted is kept."""
    check_name("queue", queue)
    concurrency = None if limits.concurrency is None else check_int("concurrency", limits.concurrency, 1, MAX_CONCURRENCY)
    rate = None if limits.rate_limit is None else check_int("rate_limit", limits.rate_limit, 1, MAX_RATE_LIMIT)
    partition = None if limits.partition_limit is None else check_int("partition_limit", limits.partition_limit, 1, MAX_RATE_LIMIT)
    period = 60 if limits.rate_period_seconds is None else check_int("rate_period_seconds", limits.rate_period_seconds, 1, MAX_RATE_PERIOD_SECONDS)
    row = control_of(ctx.db, queue) or RetryQueue(queue)
    changed = msgspec.structs.replace(row, concurrency=concurrency, rate_limit=rate, rate_period_seconds=period, partition_limit=partition)
    return _save(ctx, changed)


# --- the claim under controls ----------------------------------------------------------------------


def _window(now: Timestamp, row: RetryQueue) -> Range:
    return Range(now - TimeDuration.from_seconds(row.rate_period_seconds), now, lo_inclusive=False, hi_inclusive=True)


def running_in(db: Any, queue: str) -> int:
    return sum(db.task.by_claim_queue.count((TaskStatus.RUNNING, m, queue)) for m in (False, True))


def blocked(db: Any, row: RetryQueue, now: Timestamp) -> bool:
    """Whether `row`'s queue hands out nothing now (paused, at its concurrency or rate limit)."""
    if row.paused:
        return True
    if row.concurrency is not None and running_in(db, row.queue) >= row.concurrency:
        return True
    return row.rate_limit is not None and db.claim_mark.by_queue.count((row.queue, _window(now, row))) >= row.rate_limit


def _first_allowed(db: Any, queue: str, row: RetryQueue | None, now: Timestamp) -> Task | None:
    """The task a claim of `queue` takes (its controls not blocking), skipping tasks whose
    partition is at its limit: the walk reads the ready tasks of full partitions ahead."""
    if row is None or row.partition_limit is None:
        return next(ready_tasks(db, queue, now), None)
    full: set[str] = set()
    window = _window(now, row)
    for task in ready_tasks(db, queue, now):
        key = task.partition_key
        if key is None:
            return task
        if key in full:
            continue
        if db.claim_mark.by_partition.count((queue, key, window)) < row.partition_limit:
            return task
        full.add(key)
    return None


def _queued_queues(db: Any) -> Iterator[str]:
    """Each queue that has queued worker tasks, once: one index seek per queue."""
    spec: tuple[Any, ...] = (TaskStatus.QUEUED, False)
    while (row := next(iter(db.task.by_claim_queue.filter(spec)), None)) is not None:
        yield row.queue
        spec = (TaskStatus.QUEUED, False, Range(lo=row.queue, lo_inclusive=False))


Picked = tuple[Task, RetryQueue | None]  # a claim's task, and its queue's control row as read


def next_allowed(db: Any, queue: str | None, now: Timestamp) -> Task | None:
    """The task a claim takes: `claim.next_claimable`'s, within the queues' controls."""
    picked = pick(db, queue, now)
    return None if picked is None else picked[0]


def pick(db: Any, queue: str | None, now: Timestamp) -> Picked | None:
    """`next_allowed`'s task with its queue's control row (None: the queue has none), read once
    for both the choice and the claim's rate marks (`note_claim_under`). The best task overall
    is taken when its queue has no control row or allows it, else the best of each open queue's
    first allowed task."""
    if queue is not None:
        row = control_of(db, queue)
        if row is not None and blocked(db, row, now):
            return None
        task = _first_allowed(db, queue, row, now)
        return None if task is None else (task, row)
    best = next(ready_tasks(db, None, now), None)
    if best is None:
        return None
    row = control_of(db, best.queue)  # a key read the cache answers, where a count of the table is not
    if row is None:
        return best, None
    if not blocked(db, row, now) and getattr(_first_allowed(db, best.queue, row, now), "id", None) == best.id:
        return best, row
    candidates: list[Picked] = []
    for q in _queued_queues(db):
        row = control_of(db, q)
        if row is not None and blocked(db, row, now):
            continue
        task = _first_allowed(db, q, row, now)
        if task is not None:
            candidates.append((task, row))
    return min(candidates, key=lambda p: (p[0].neg_priority, p[0].run_after, p[0].id), default=None)


def note_claim(ctx: ReducerContext, task: Task) -> None:
    """Count a claim in its queue's rate windows (only a rate-limited queue keeps marks), and
    drop the marks that have left the window."""
    note_claim_under(ctx, task, control_of(ctx.db, task.queue))


def note_claim_under(ctx: ReducerContext, task: Task, row: RetryQueue | None) -> None:
    """`note_claim` with the queue's control row this transaction already read (`pick`)."""
    if row is None or (row.rate_limit is None and row.partition_limit is None):
        return
    now = ctx.timestamp
    cutoff = now - TimeDuration.from_seconds(row.rate_period_seconds)
    ctx.db.claim_mark.by_queue.delete((task.queue, Range(_MIN_TIME, cutoff, hi_inclusive=True)))
    ctx.db.claim_mark.insert(ClaimMark(0, task.queue, task.partition_key, now))


def paused(db: Any, queue: str) -> bool:
    row = control_of(db, queue)
    return row is not None and row.paused
