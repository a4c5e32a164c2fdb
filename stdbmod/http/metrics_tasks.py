"""How many tasks each queue holds in each status, and its oldest ready task's age: counted in the
task table's indexes (`ix.count`), never by reading rows, in one read snapshot.

Queues are found by skipping through the `queue` index (one seek per queue); the counts walk the
`by_claim_queue` index's keys under each (status, in_module, queue) prefix; the oldest ready
task is the first entry of each priority under (queued, in_module, queue), one seek per priority
(as a claim finds its task), and the ready count is the queued count less the tasks not due yet.
Walking keys still costs about 0.2 s per million tasks, so a snapshot is kept and shared: it is
taken again only when it is older than ten times what it cost to take (and at least `MIN_AGE`
seconds), which bounds the CPU spent on it to a tenth of one core however many scrapes and
dashboards ask.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import msgspec

from ..retry.tables import Task, TaskStatus
from ..runtime import Database, Range
from ..types import Timestamp

MIN_AGE = 1.0
COST_FACTOR = 10.0
STATUSES = tuple(TaskStatus)


class QueueCounts(msgspec.Struct):
    queue: str
    counts: dict[str, int]  # status -> tasks
    ready: int  # queued with run_after <= now
    oldest_ready_micros: int | None  # run_after of the oldest ready task (None: none ready)


class Snapshot(msgspec.Struct):
    taken_micros: int  # the database clock when taken
    queues: list[QueueCounts]
    cost_seconds: float
    offset: int = -1  # the newest commit the asker had seen when it was taken (the live pages' version)

    def totals(self) -> dict[str, int]:
        out = dict.fromkeys((s.value for s in STATUSES), 0)
        for q in self.queues:
            for status, n in q.counts.items():
                out[status] += n
        return out


def queues(tasks: Any) -> Iterator[str]:
    """Every queue name some task has, in order: one seek per queue."""
    row: Task | None = next(iter(tasks.queue.filter(Range())), None)
    while row is not None:
        yield row.queue
        row = next(iter(tasks.queue.filter(Range(lo=row.queue, lo_inclusive=False))), None)


def _waiting(tasks: Any, queue: str, now: Timestamp) -> tuple[int, int | None]:
    """How many queued tasks of `queue` are not due yet, and the oldest ready one's run_after.
    Per priority under (queued, in_module, queue), the first entry has the earliest run_after
    and the tasks not due are a run_after range after `now`: usually the few waiting out a
    backoff, so ready = queued - waiting costs no walk over the ready ones."""
    waiting, oldest = 0, None
    for in_module in (False, True):
        prefix = (TaskStatus.QUEUED, in_module, queue)
        spec: tuple[Any, ...] = prefix
        while True:
            row: Task | None = next(iter(tasks.by_claim_queue.filter(spec)), None)
            if row is None:
                break
            waiting += tasks.by_claim_queue.count((*prefix, row.neg_priority, Range(lo=now, lo_inclusive=False)))
            if row.run_after <= now and (oldest is None or row.run_after.micros < oldest):
                oldest = row.run_after.micros
            spec = (*prefix, Range(lo=row.neg_priority, lo_inclusive=False))
    return waiting, oldest


def take(db: Database) -> Snapshot:
    """Count now, in one read snapshot."""
    started = time.perf_counter()
    with db.read() as view:
        tasks = view.db.task
        now = view.view.timestamp
        out = []
        for q in queues(tasks):
            counts = {s.value: tasks.by_claim_queue.count((s, False, q)) + tasks.by_claim_queue.count((s, True, q)) for s in STATUSES}
            waiting, oldest = _waiting(tasks, q, now)
            out.append(QueueCounts(q, counts, counts[TaskStatus.QUEUED.value] - waiting, oldest))
    return Snapshot(now.micros, out, time.perf_counter() - started)


class Counts:
    """The shared, self-limiting snapshot (see the module's docstring)."""

    def __init__(self, clock: Any = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._snapshot: Snapshot | None = None
        self._at = 0.0

    def get(self, db: Database, offset: int = -1) -> Snapshot:
        """The shared snapshot, taken again if it is too old; `offset`: the newest commit the
        caller has seen, recorded with a snapshot it makes."""
        with self._lock:  # concurrent askers wait for one count rather than each counting
            snap = self._snapshot
            now = self._clock()
            if snap is None or now - self._at >= max(MIN_AGE, COST_FACTOR * snap.cost_seconds):
                snap = self._snapshot = take(db)
                snap.offset = offset
                self._at = now
            return snap
