"""Finding the task a claim takes, by walking an index (never a scan).

The claim indexes order queued worker tasks by (queue,) -priority, run_after, id. Within one
priority the first entry is the oldest due task, unless it is in the future, in which case every
task of that priority is, and the walk seeks past the whole priority. A claim therefore reads one
index entry per distinct priority it passes over, however many tasks are queued.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..runtime import Range
from ..types import Timestamp
from .tables import Task, TaskStatus


def ready_tasks(db: Any, queue: str | None, now: Timestamp) -> Iterator[Task]:
    """Queued worker tasks that are due (of `queue`, or of any), in claim order: highest
    priority, then oldest run_after, then lowest id. Within a priority the walk stops at the
    first task in the future and seeks past the whole priority."""
    index, prefix = (db.task.by_claim, (TaskStatus.QUEUED, False)) if queue is None else (db.task.by_claim_queue, (TaskStatus.QUEUED, False, queue))
    spec: tuple[Any, ...] = prefix
    while True:
        jump: int | None = None
        for row in index.filter(spec):
            if row.run_after > now:
                jump = row.neg_priority
                break
            yield row
        if jump is None:
            return
        spec = (*prefix, Range(lo=jump, lo_inclusive=False))


def next_claimable(db: Any, queue: str | None, now: Timestamp) -> Task | None:
    """The highest-priority, oldest ready task for external workers, or None (queue controls
    aside: queues.next_allowed applies them)."""
    return next(ready_tasks(db, queue, now), None)
