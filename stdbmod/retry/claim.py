"""Finding the task a claim takes, by walking an index (never a scan).

The claim indexes order queued worker tasks by (queue,) -priority, run_after, id. Within one
priority the first entry is the oldest due task, unless it is in the future, in which case every
task of that priority is, and the walk seeks past the whole priority. A claim therefore reads one
index entry per distinct priority it passes over, however many tasks are queued.
"""

from __future__ import annotations

from typing import Any

from ..runtime import Range
from ..types import Timestamp
from .tables import Task, TaskStatus


def next_claimable(db: Any, queue: str | None, now: Timestamp) -> Task | None:
    """The highest-priority, oldest ready task for external workers, or None."""
    prefix: tuple[Any, ...]
    if queue is None:
        index, prefix = db.task.by_claim, (TaskStatus.QUEUED, False)
    else:
        index, prefix = db.task.by_claim_queue, (TaskStatus.QUEUED, False, queue)
    spec: tuple[Any, ...] = prefix
    while True:
        row: Task | None = next(iter(index.filter(spec)), None)
        if row is None:
            return None
        if row.run_after <= now:
            return row
        spec = (*prefix, Range(lo=row.neg_priority, lo_inclusive=False))
