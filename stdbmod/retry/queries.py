"""Reads for admins (and `get_task` for workers): the task lists, the dead-letter tier and the
attempt history. Each runs in one read snapshot that never waits for the writer, and checks the
caller's role inside that snapshot.

Lists are newest first (highest id first) and paginated; `total` counts every match.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator
from itertools import islice
from typing import Any

import msgspec

from ..runtime import Database, Range
from ..types import Identity, Timestamp
from .errors import InvalidArgument, NotAuthorized, TaskNotFound
from .limits import MAX_HISTORY_CAP, check_int, check_page
from .queues import control_of
from .retention import FINISHED, policy_of
from .roles import is_admin, is_worker
from .tables import Attempt, RetryQueue, RetryRetention, Task, TaskStatus

__all__ = ["Page", "QueueInfo", "queue_list", "queue_info", "retention", "list_tasks", "pending", "dead_letter", "get_task", "history", "is_admin", "is_worker"]


class Page(msgspec.Struct):
    items: list[Task]
    page: int
    per_page: int
    total: int


def _require_admin(tables: Any, caller: Identity, what: str) -> None:
    if not is_admin(tables, caller):
        raise NotAuthorized(f"{what}: only an admin may read this ({caller} is not one)")


def _status(value: TaskStatus | str) -> TaskStatus:
    try:
        return TaskStatus(value)
    except ValueError:
        raise InvalidArgument(f"status must be one of {', '.join(s.value for s in TaskStatus)}, not {value!r}") from None


def _newest_first(tables: Any, statuses: list[TaskStatus], queue: str | None, job_type: str | None) -> Iterator[Task]:
    """Matching tasks by id descending, driven by the most specific index at hand."""
    source: Iterable[Task]
    if statuses:
        runs = [tables.task.status.filter(s, reverse=True) for s in statuses]
        source = heapq.merge(*runs, key=lambda t: t.id, reverse=True) if len(runs) > 1 else runs[0]
    elif job_type is not None:
        source = tables.task.job_type.filter(job_type, reverse=True)
    elif queue is not None:
        source = tables.task.queue.filter(queue, reverse=True)
    else:
        source = tables.task.id.filter(Range(), reverse=True)
    for task in source:
        if (queue is None or task.queue == queue) and (job_type is None or task.job_type == job_type):
            yield task


def _page(
    db: Database, caller: Identity, what: str, statuses: list[TaskStatus], queue: str | None, job_type: str | None, page: int, per_page: int
) -> Page:
    check_page(page, per_page)
    with db.read() as view:
        _require_admin(view.db, caller, what)
        if queue is None and job_type is None:  # the total is in the indexes: read only the page
            tasks = view.db.task
            total = sum(tasks.status.count(s) for s in statuses) if statuses else tasks.count()
            matches = _newest_first(view.db, statuses, None, None)
            items = list(islice(matches, (page - 1) * per_page, page * per_page))
        else:
            items, total = [], 0
            start = (page - 1) * per_page
            for task in _newest_first(view.db, statuses, queue, job_type):
                if start <= total < start + per_page:
                    items.append(task)
                total += 1
    return Page(items=items, page=page, per_page=per_page, total=total)


def list_tasks(
    db: Database,
    caller: Identity,
    *,
    status: TaskStatus | str | None = None,
    queue: str | None = None,
    job_type: str | None = None,
    page: int = 1,
    per_page: int = 50,
) -> Page:
    """Tasks (admin only), filtered by status, queue and job type."""
    statuses = [] if status is None else [_status(status)]
    return _page(db, caller, "list_tasks", statuses, queue, job_type, page, per_page)


def pending(db: Database, caller: Identity, *, queue: str | None = None, job_type: str | None = None, page: int = 1, per_page: int = 50) -> Page:
    """Work not finished yet, queued or running (admin only)."""
    return _page(db, caller, "pending", [TaskStatus.QUEUED, TaskStatus.RUNNING], queue, job_type, page, per_page)


def dead_letter(db: Database, caller: Identity, *, queue: str | None = None, page: int = 1, per_page: int = 50) -> Page:
    """The dead-letter tier (admin only): dead tasks, whatever the reason."""
    return _page(db, caller, "dead_letter", [TaskStatus.DEAD], queue, None, page, per_page)


def get_task(db: Database, caller: Identity, task_id: int) -> Task:
    """One task, for an admin or a worker."""
    with db.read() as view:
        if not (is_admin(view.db, caller) or is_worker(view.db, caller)):
            raise NotAuthorized(f"get_task: needs the worker role or admin ({caller} has neither)")
        task: Task | None = view.db.task.id.find(task_id)
    if task is None:
        raise TaskNotFound(task_id)
    return task


def history(db: Database, caller: Identity, *, limit: int = 100, task_id: int | None = None) -> list[Attempt]:
    """The newest `limit` attempt rows (admin only), of one task or of all."""
    check_int("limit", limit, 1, MAX_HISTORY_CAP)
    with db.read() as view:
        _require_admin(view.db, caller, "history")
        rows: Iterable[Attempt]
        if task_id is None:
            rows = view.db.attempt.id.filter(Range(), reverse=True)
        else:
            rows = view.db.attempt.task_id.filter(task_id, reverse=True)
        return list(islice(rows, limit))


# --- queues (queues.py) ---------------------------------------------------------------------------


class QueueInfo(msgspec.Struct):
    """A queue as an operator sees it: its tasks per status (counted in the claim index, never
    by reading a row), its controls, and how long its oldest ready task has waited."""

    queue: str
    counts: dict[str, int]
    paused: bool
    concurrency: int | None
    rate_limit: int | None
    rate_period_seconds: int
    partition_limit: int | None
    oldest_ready_age_seconds: float | None  # None: nothing is ready


def _oldest_ready(tables: Any, queue: str, now: Timestamp) -> Timestamp | None:
    """The earliest run_after among the queue's due queued tasks: the first entry of each
    priority of the claim index (worker and in-module tasks alike), one read per priority."""
    oldest: Timestamp | None = None
    for in_module in (False, True):
        prefix = (TaskStatus.QUEUED, in_module, queue)
        spec: tuple[Any, ...] = prefix
        while (row := next(iter(tables.task.by_claim_queue.filter(spec)), None)) is not None:
            if row.run_after <= now and (oldest is None or row.run_after < oldest):
                oldest = row.run_after
            spec = (*prefix, Range(lo=row.neg_priority, lo_inclusive=False))
    return oldest


def _queue_info(tables: Any, queue: str, now: Timestamp) -> QueueInfo:
    index = tables.task.by_claim_queue
    counts = {s.value: index.count((s, False, queue)) + index.count((s, True, queue)) for s in TaskStatus}
    row = control_of(tables, queue) or RetryQueue(queue)
    oldest = _oldest_ready(tables, queue, now)
    age = None if oldest is None else (now.micros - oldest.micros) / 1e6
    return QueueInfo(queue, counts, row.paused, row.concurrency, row.rate_limit, row.rate_period_seconds, row.partition_limit, age)


def _queue_names(tables: Any) -> list[str]:
    """Every queue that has a task or a control row: one seek per queue in the queue index."""
    names = {r.queue for r in tables.retry_queue.iter()}
    spec: Any = Range()
    while (task := next(iter(tables.task.queue.filter(spec)), None)) is not None:
        names.add(task.queue)
        spec = Range(lo=task.queue, lo_inclusive=False)
    return sorted(names)


def queue_list(db: Database, caller: Identity) -> list[QueueInfo]:
    """Every queue (admin only), by name."""
    with db.read() as view:
        _require_admin(view.db, caller, "queues")
        now = db.clock.now()
        return [_queue_info(view.db, q, now) for q in _queue_names(view.db)]


def queue_info(db: Database, caller: Identity, queue: str) -> QueueInfo:
    """One queue (admin only); a queue nobody used shows zero counts."""
    with db.read() as view:
        _require_admin(view.db, caller, "queues")
        return _queue_info(view.db, queue, db.clock.now())


def retention(db: Database, caller: Identity) -> list[RetryRetention]:
    """The retention of completed and dead tasks (admin only); defaults where none was set."""
    with db.read() as view:
        _require_admin(view.db, caller, "retention")
        return [policy_of(view.db, s) for s in FINISHED]
