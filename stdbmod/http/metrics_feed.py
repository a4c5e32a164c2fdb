"""`Feed`: what the writer commits, handed on without slowing it down, and turned into task
events off its thread.

The runtime tells two hooks after every committed batch, on the writer thread: `on_commit` (the
batch's commit records) and `on_batch` (each call's and the commit's duration). Here each only
appends what it is given to a deque: O(1), no decoding, no lock the writer could wait on. A
daemon thread drains the deques when the writer starts a commit with `DRAIN_EVERY` commits
undrained (`before_commit`: the commit's flush runs without the GIL, so the drain takes a GIL
the writer does not need then), and at least once a second; every reader drains them first (a
scrape, a dashboard poll), so a reader sees every commit made before it started. Draining decodes just the
task table's rows of each record into `TaskEvent`s for the listeners: the Prometheus counters
and the dashboard's throughput.
"""

from __future__ import annotations

import collections
import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

import msgspec

from ..retry.tables import DeadReason, Task, TaskStatus
from ..rowformat import ARRAY, RowFormat, is_map
from ..runtime import CommitRecord, Database
from ..runtime.core import BatchTimes
from .metrics_access import has_tasks

log = logging.getLogger("stdbmod.http")

DRAIN_SECONDS = 1.0
DRAIN_EVERY = 8  # commits left undrained that wake the drain at the next commit's flush
# The reducers that reap ended leases: an attempt they end is a lease expiry.
REAPERS = frozenset({"sweep_leases", "reap_lease"})


class TaskEvent(msgspec.Struct, frozen=True, gc=False):
    kind: str  # enqueued, started, completed, failed, lease_expired, dead
    queue: str
    job_type: str
    at: int  # the transaction's timestamp, in microseconds
    seconds: float | None = None  # completed / failed: how long the attempt ran
    reason: str | None = None  # dead: exhausted, gave_up, cancelled


# What an event needs of a task row, by position: the columns of tables.Task up to the last one
# wanted, the others left as raw bytes. A drain holds the GIL the writer and the event loop need,
# and decoding every column (payloads, times through their hook) was most of its time. Every row
# is read up to `attempts`; only a row whose attempt just ended is read again, further, for when
# the attempt started (each column skipped still costs a `Raw`).
_WANTED: dict[str, Any] = {"id": int, "queue": str, "job_type": str, "status": TaskStatus, "dead_reason": DeadReason | None, "attempts": int}
_ENDED: dict[str, Any] = {"last_attempted_at": int | None}  # stored as integer microseconds
_COLUMNS = [f.name for f in msgspec.structs.fields(Task)]


def _prefix(name: str, wanted: dict[str, Any]) -> Any:
    last = max(map(_COLUMNS.index, wanted))
    return msgspec.defstruct(name, [(n, wanted.get(n, msgspec.Raw)) for n in _COLUMNS[: 1 + last]], array_like=True)


_seen_decoder = msgspec.msgpack.Decoder(_prefix("_Seen", _WANTED))
_ended_decoder = msgspec.msgpack.Decoder(_prefix("_Ended", _ENDED))


def _stored(form: RowFormat, raw: bytes) -> bytes:
    """A stored task row in the array form; a row stored in the older map form is converted."""
    return form.hashed(raw, ARRAY) if is_map(raw) else raw


TaskListener = Callable[[list[TaskEvent]], None]
BatchListener = Callable[[BatchTimes], None]


class Feed:
    def __init__(self) -> None:
        self.task_listeners: list[TaskListener] = []
        self.batch_listeners: list[BatchListener] = []
        # Work put off the request path, done at each drain (metrics.RequestHistogram.flush).
        self.deferred: list[Callable[[], None]] = []
        self._records: collections.deque[list[CommitRecord]] = collections.deque()
        self._batches: collections.deque[BatchTimes] = collections.deque()
        self._lock = threading.Lock()  # one drain at a time, so listeners see events in order
        self._form: RowFormat | None = None
        self._db: Database | None = None
        self._stop = threading.Event()
        self._drainer: threading.Thread | None = None
        self._wake: queue.SimpleQueue[None] = queue.SimpleQueue()

    # --- the writer's side ----------------------------------------------------------------------

    def attach(self, db: Database) -> None:
        """Hook into `db`'s writer (`Database.hooks`) and start draining. An `on_commit` set by
        someone else is kept and still called."""
        hooks = db.hooks
        self._db = db
        self._form = db.module.tables["task"].row_format if has_tasks(db) else None
        earlier = hooks.on_commit
        if earlier is None:
            hooks.on_commit = self._records.append
        else:
            sink = self._records.append

            def both(records: list[CommitRecord]) -> None:
                earlier(records)
                sink(records)

            hooks.on_commit = both
        if self.batch_listeners:
            hooks.on_batch = self._batches.append
        hooks.before_commit = self._before_commit
        self._stop.clear()
        self._drainer = threading.Thread(target=self._loop, name="stdbmod-feed", daemon=True)
        self._drainer.start()

    def detach(self) -> None:
        self._stop.set()
        self._wake.put(None)
        if self._drainer is not None:
            self._drainer.join(10)
            self._drainer = None
        if self._db is not None:
            hooks = self._db.hooks
            hooks.on_batch = None
            if hooks.before_commit == self._before_commit:
                hooks.before_commit = None
            if hooks.on_commit == self._records.append:
                hooks.on_commit = None
            self._db = None

    def _before_commit(self) -> None:
        # The writer is about to flush, without the GIL: what the last commits left is drained
        # then, instead of once a second in ~50 ms stretches under load that the writer and the
        # event loop queued behind. Not after every commit: each wake-up of this thread, and its
        # turn at the GIL, cost more than the drain of one commit (docs/performance.md,
        # "Thirty-second round").
        if len(self._records) >= DRAIN_EVERY or len(self._batches) >= DRAIN_EVERY:
            self._wake.put(None)

    # --- the readers' side ----------------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self._wake.get(timeout=DRAIN_SECONDS)
                while True:  # one drain answers every wake-up so far
                    self._wake.get_nowait()
            except queue.Empty:
                pass
            try:
                self.drain()
            except Exception:  # a listener's bug must not stop the metrics for good
                log.exception("metrics feed: draining failed")

    def drain(self) -> None:
        """Hand everything committed so far to the listeners."""
        with self._lock:
            for flush in self.deferred:
                flush()
            while self._batches:
                times = self._batches.popleft()
                for b in self.batch_listeners:
                    b(times)
            events: list[TaskEvent] = []  # every commit's, so each listener is called once a drain
            while self._records:
                records = self._records.popleft()
                if self._form is not None:
                    for r in records:
                        events.extend(self.task_events(r))
            if events:
                for t in self.task_listeners:
                    t(events)

    def task_events(self, record: CommitRecord) -> list[TaskEvent]:
        """What one transaction did to tasks, from its net row changes (it holds the task rows
        before and after; an attempt that started and ended inside it, as an in-module handler's
        does, shows as its `attempts` going up while the status is no longer running)."""
        form = self._form
        if form is None:  # not the task-retry module's tables: no task events
            return []
        for change in record.changes:
            if change.table == "task":
                break
        else:
            return []
        before: dict[int, Any] = {}
        for raw in change.deletes:
            was = _seen_decoder.decode(_stored(form, raw))
            before[was.id] = was
        out: list[TaskEvent] = []
        at = record.timestamp
        for raw in change.inserts:
            raw = _stored(form, raw)
            after = _seen_decoder.decode(raw)
            was = before.get(after.id)
            q, jt = after.queue, after.job_type
            if was is None:
                out.append(TaskEvent("enqueued", q, jt, at))
            started = after.attempts - (0 if was is None else was.attempts)
            for _ in range(max(started, 0)):
                out.append(TaskEvent("started", q, jt, at))
            ran = was is not None and was.status is TaskStatus.RUNNING
            if after.status is not TaskStatus.RUNNING and (ran or started > 0):
                began = _ended_decoder.decode(raw).last_attempted_at
                took = None if began is None else max(at - began, 0) / 1e6
                if after.status is TaskStatus.COMPLETED:
                    out.append(TaskEvent("completed", q, jt, at, took))
                else:
                    out.append(TaskEvent("failed", q, jt, at, took))
                    if record.reducer in REAPERS:
                        out.append(TaskEvent("lease_expired", q, jt, at))
            if after.status is TaskStatus.DEAD and (was is None or was.status is not TaskStatus.DEAD):
                reason = None if after.dead_reason is None else after.dead_reason.value
                out.append(TaskEvent("dead", q, jt, at, reason=reason))
        return out
