"""The engine under `Database`: runs batches of jobs on the writer thread.

One batch = one outer storage transaction, one nested transaction per job, one commit. A job that
raises has its nested transaction aborted and nothing else; its failure goes to the database log
in the outer transaction. When the map is full the whole batch is aborted, the map grown and the
batch run again (nobody has been answered yet). An LMDB panic fails the batch and the database.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from ..errors import ReducerFailed, SenderError, StorageError, StoragePanic
from ..module import Module
from ..storage import Storage, StorageFull, WriteTxn
from ..types import Identity, Timestamp
from . import commitlog
from .clock import Clock
from .context import ReducerContext
from .dblog import DbLog
from .jobs import Job, ScheduledJob, record_of
from .tables import DbView
from .transaction import Transaction, TxView

log = logging.getLogger("stdbmod")


class Core:
    def __init__(self, storage: Storage, module: Module, clock: Clock, identity: Identity) -> None:
        self.storage = storage
        self.module = module
        self.clock = clock
        self.identity = identity
        self.dblog = DbLog()
        self.broken: StoragePanic | None = None
        self.on_panic: Callable[[StoragePanic], None] | None = None
        # Called after a commit that armed schedule rows, with the earliest due time (micros):
        # the scheduler wakes only if that is before its planned wake-up. Removing a row needs
        # no wake: a scheduler that wakes for it finds nothing due and sleeps on.
        self.on_schedule_change: Callable[[int], None] | None = None
        self.on_commit: Callable[[list[commitlog.CommitRecord]], None] | None = None
        self._running_here: Callable[[], bool] = lambda: False
        self._writer_db: DbView | None = None  # see `context`

    # --- contexts ------------------------------------------------------------------------------

    def dbview(self, view: TxView) -> DbView:
        return DbView(view, self.module.tables)

    def context(self, tx: Transaction, job: Job) -> ReducerContext:
        """Only on the writer side (one batch at a time): reducers share one rebound DbView."""
        db = self._writer_db
        if db is None:
            db = self._writer_db = self.dbview(tx)
        else:
            db.rebind(tx)
        return ReducerContext(
            tx,
            db,
            sender=job.sender,
            identity=self.identity,
            connection_id=job.connection_id,
            reducer=job.reducer,
        )

    # --- batches -------------------------------------------------------------------------------

    def run_batch(self, batch: list[tuple[Job, Future[Any]]]) -> None:
        if self.broken is not None:
            for _, fut in batch:
                fut.set_exception(self.broken)
            return
        while True:
            outcomes: list[tuple[bool, Any]] = []
            records: list[commitlog.CommitRecord] = []
            armed: int | None = None
            try:
                outer = self.storage.begin_write()
            except StoragePanic as e:
                self._panic(e, batch)
                return
            try:
                offset = commitlog.next_offset(outer)
                for job, _ in batch:
                    ok, value, record, sched = self._run_job(job, outer, offset)
                    if record is not None:
                        records.append(record)
                        offset += 1
                    if sched is not None and (armed is None or sched < armed):
                        armed = sched
                    outcomes.append((ok, value))
                outer.commit()
                break
            except StorageFull:
                outer.abort()
                self.storage.grow()
                log.info("storage full: grew the map and retried a batch of %d", len(batch))
            except StoragePanic as e:
                outer.abort()
                self._panic(e, batch)
                return
            except StorageError as e:
                outer.abort()
                for _, fut in batch:
                    fut.set_exception(e)
                return
            except BaseException:  # KeyboardInterrupt in a caller running its own call
                outer.abort()
                raise
        for (_, fut), (ok, value) in zip(batch, outcomes):
            if ok:
                fut.set_result(value)
            else:
                fut.set_exception(value)
        if armed is not None and self.on_schedule_change is not None:
            self.on_schedule_change(armed)
        if records and self.on_commit is not None:
            self.on_commit(records)

    def _panic(self, e: StoragePanic, batch: list[tuple[Job, Future[Any]]]) -> None:
        self.broken = e
        for _, fut in batch:
            if not fut.done():
                fut.set_exception(e)
        log.critical("storage panic: %s", e)
        if self.on_panic is not None:
            self.on_panic(e)

    def _run_job(self, job: Job, outer: WriteTxn, offset: int) -> tuple[bool, Any, commitlog.CommitRecord | None, int | None]:
        """(ok, result or error, commit record, the earliest due time it armed)."""
        if job.timestamp is None:
            now = self.clock.now()
            if isinstance(job, ScheduledJob) and job.queue_key:
                now = max(now, Timestamp(job.intended))  # SpacetimeDB: max(intended, now)
            job.timestamp = now
        child = outer.child()
        tx = Transaction(child, job.timestamp)
        logs = tx.logs
        try:
            value = job.run(self, tx)
            record = None if job.skip_record else record_of(job, tx, offset)
            if record is not None:
                commitlog.append(child, record)
            child.commit()
            ok, result = True, value
        except (StorageFull, StorageError):
            child.abort()
            raise
        except SenderError as e:
            child.abort()
            ok, result, record = False, e, None
            logs.append(("error", str(e)))
        except Exception as e:
            child.abort()
            ok, result, record = False, ReducerFailed(job.reducer), None
            logs.append(("panic", "".join(traceback.format_exception(e)).rstrip()))
        for level, message in logs:
            self.dblog.append(outer, job.timestamp.micros, level, job.reducer, message)
        if not ok and isinstance(job, ScheduledJob) and not job.cleanup:
            cleanup = ScheduledJob(
                kind="schedule_cleanup", reducer=job.reducer, sender=job.sender, timestamp=job.timestamp, queue_key=job.queue_key, cleanup=True
            )
            _, _, rec, _ = self._run_job(cleanup, outer, offset)
            if rec is not None:
                return ok, result, rec, None
        return ok, result, record, tx.earliest_armed if ok else None  # a failed call's rows are gone

    # --- threads -------------------------------------------------------------------------------

    def set_writer(self, running_here: Callable[[], bool]) -> None:
        self._running_here = running_here

    def on_writer_thread(self) -> bool:
        """Whether the calling thread is running a batch (the writer's, or a caller's own)."""
        return self._running_here()
