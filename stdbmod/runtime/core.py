"""The engine under `Database`: runs batches of jobs on the writer thread.

One batch = one outer storage transaction, one nested transaction per job, one commit. A job that
raises has its nested transaction aborted and nothing else; its failure goes to the database log
in the outer transaction. When the map is full the whole batch is aborted, the map grown and the
batch run again (nobody has been answered yet). An LMDB panic fails the batch and the database.
"""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from time import perf_counter_ns
from typing import Any, Final

from ..errors import ReducerFailed, SenderError, StorageError, StoragePanic, TransientStorageError
from ..module import Module
from ..storage import Storage, StorageFull, WriteTxn
from ..types import Identity
from . import commitlog
from .clock import Clock
from .context import ContextFactory, explain
from .dblog import DbLog
from .jobs import Job, record_of
from .transaction import RowCache, Transaction

log: Final = logging.getLogger("stdbmod")

# (the batch, each job's (ok, result or error), each job's nanoseconds, the commit's nanoseconds)
BatchTimes = tuple[list[tuple[Job, Future[Any]]], list[tuple[bool, Any]], list[int], int]

# How long a batch whose storage failed transiently (PostgreSQL: a lost connection before
# COMMIT, a serialization failure) is run again before its callers get the error; nobody has
# been answered, and the jobs keep their timestamps, so a re-run is the same calls.
RETRY_FOR: Final = 30.0

# A committed batch and its outcomes, (ok, value) a job, not yet handed to its callers.
Held = tuple[list[tuple[Job, Future[Any]]], list[tuple[bool, Any]]]
# How long a held batch's callers may wait into the next batch's calls: past it (a batch of slow
# calls), they are answered between two calls rather than at the commit.
HOLD_FOR_NS: Final = 1_000_000


@dataclass
class Hooks:
    """What a database tells the code around it (`Database.hooks`), on the thread that ran the
    batch, after its commit."""

    on_commit: Callable[[list[commitlog.CommitRecord]], None] | None = None  # the batch's records
    # The earliest due time (micros) a commit armed: the scheduler wakes only if that is before
    # its planned wake-up. Removing a row needs no wake: a scheduler that wakes for it finds
    # nothing due and sleeps on.
    on_schedule_change: Callable[[int], None] | None = None
    on_panic: Callable[[StoragePanic], None] | None = None  # the storage is unusable: restart
    # Each call's and the commit's duration (metrics). It must only hand the tuple on (O(1));
    # unset, the batch reads no clock for it.
    on_batch: Callable[[BatchTimes], None] | None = None
    # Called (no arguments) just before a batch's commit, whose flush runs without the GIL: the
    # metrics feed drains then (http/metrics_feed.py). It must only signal (O(1)).
    before_commit: Callable[[], None] | None = None
    # Called (no arguments) after every commit that wrote a record: runtime/follow.py wakes on it.
    commit_taps: list[Callable[[], None]] = field(default_factory=list)
    # Called (no arguments) after every commit that wrote database log lines (log followers).
    log_taps: list[Callable[[], None]] = field(default_factory=list)


class Core:
    def __init__(self, storage: Storage, module: Module, clock: Clock, identity: Identity) -> None:
        self.storage = storage
        self.clock = clock
        self.dblog = DbLog()
        self.broken: StoragePanic | None = None
        self.hooks = Hooks()
        self.contexts = ContextFactory(module, identity)
        self._logged = False  # whether the batch being run wrote log lines
        # Rows of `cached` tables (roles, settings) the calls read, kept from batch to batch while
        # no other writer commits in between: valid for the batch whose transaction has serial
        # `_cache_serial` (set after a commit that changed something; see WriteTxn.serial)
        self._cache: RowCache = {}
        self._cache_serial: int | None = None
        # the commit log's next offset after that batch: valid with the cache, it spares each
        # batch a read of the log's last key
        self._next_offset: int | None = None
        self._spent: list[int] = []  # a timed batch's job durations (hooks.on_batch)
        self._tx: Transaction | None = None  # every job's, reset for each (Transaction.reset)
        # the last batch's outcomes, if held back (run_batch's `more`): at most one; a list, so
        # that settling it in place empties it for whoever holds it
        self._held: list[Held] = []
        self.hold_for_ns = HOLD_FOR_NS

    # --- batches -------------------------------------------------------------------------------

    def _begin(self) -> WriteTxn:
        """The storage's write transaction. A backend's must derive from `WriteTxn`: compiled,
        the runtime calls it through that native class, and an object that only looks like one
        was refused before the batch could abort it, which left LMDB's writer taken and a close
        waiting on it for good. Refused here in either build, after an abort if it has one."""
        storage: Any = self.storage  # Any: compiled, a typed result would be checked at the call
        txn = storage.begin_write()
        if isinstance(txn, WriteTxn):
            return txn
        abort = getattr(txn, "abort", None)
        if callable(abort):
            abort()
        raise StorageError(f"{type(storage).__name__}.begin_write returned a {type(txn).__name__}, not a WriteTxn (stdbmod.storage)")

    def run_batch(self, batch: list[tuple[Job, Future[Any]]], more: Callable[[], bool] | None = None) -> None:
        """Run `batch` in one transaction and commit it, then settle each job's outcome. With
        `more` (the writer thread's batches), the outcomes are held back while `more()` says more
        calls are queued: they are settled just before the next batch's commit, whose flush runs
        without the GIL, instead of now, when the callers woken would take turns at the GIL with
        the next batch's calls (docs/architecture.md, "Decisions changed"); if that batch's calls
        run longer than `hold_for_ns`, between two of them. `release` settles them when no next
        batch comes."""
        held = self._held  # this batch's commit settles them, whatever happens to it
        hold_until = perf_counter_ns() + self.hold_for_ns if held else 0
        try:
            if self.broken is not None:
                for _, fut in batch:
                    fut.set_exception(self.broken)
                return
            started = 0.0  # when storage first failed transiently (RETRY_FOR counts from there)
            tries = 0
            timed = self.hooks.on_batch is not None  # a hook that wants timings: time each job and the commit
            run_job = self._timed_job if timed else self._run_job
            # A lone job runs straight in the batch's transaction, not in a nested one of its own
            # (LMDB: a nested one keeps an undo log, ~1,000 instructions a write), where the storage
            # can abort and begin again cheaply; if it fails, that is what undoes its writes.
            lone = len(batch) == 1 and self.storage.cheap_abort
            shared = self.storage.shared  # Storage.shared: other processes to tell of a commit
            while True:
                outcomes: list[tuple[bool, Any]] = []
                records: list[commitlog.CommitRecord] = []
                armed: int | None = None
                committing = 0
                self._logged = False
                if timed:
                    self._spent = []
                try:
                    outer = self._begin()
                except StoragePanic as e:
                    self._panic(e, batch)
                    return
                except TransientStorageError as e:
                    tries += 1
                    started = started or time.monotonic()  # the first failure's time
                    if self._again(e, batch, held, started, tries):
                        continue
                    return
                serial = outer.serial()
                # the log's next offset, or None: read from the log when a job first has a record
                offset: int | None = self._next_offset
                if serial is None or serial != self._cache_serial:
                    self._cache.clear()  # another writer may have changed what it holds
                    offset = None  # and appended to the log
                self._cache_serial = None  # until this batch commits
                try:
                    for job, _ in batch:
                        if lone:
                            try:
                                ok, value, record, sched = run_job(job, outer, offset, False)
                            except _Unwound as failed:
                                # the lone call failed with its writes in `outer`: drop them all, and
                                # record the failure (log lines, follow-up) in a fresh transaction
                                outer.abort()
                                serial = offset = None  # another process may write in between
                                outer = self._begin()
                                ok, value, record, sched = self._failed(job, outer, failed.error, failed.logs, offset)
                        else:
                            ok, value, record, sched = run_job(job, outer, offset, True)
                        if record is not None:
                            records.append(record)
                            offset = record.offset + 1
                        elif job.skip_record and job.offset is not None:
                            offset = None  # it appended a record of its own (a replayed procedure's)
                        if sched is not None and (armed is None or sched < armed):
                            armed = sched
                        outcomes.append((ok, value))
                        if held and perf_counter_ns() > hold_until:  # a long batch: answer them now
                            settle_held(held)
                    # other nodes (PostgreSQL) hear of it if and when it commits: followers read the
                    # log, their scheduler wakes for `armed`. Nobody else writes LMDB or memory: no
                    # message to build for them on every commit.
                    if shared and (records or armed is not None):
                        outer.announce(f"commit {'-' if armed is None else armed}")
                    elif shared and self._logged:
                        outer.announce("log")  # only log lines (a failed call): wakes log followers
                    before = self.hooks.before_commit
                    if before is not None:
                        before()
                    settle_held(held)  # the last batch's callers are answered during this flush
                    if timed:
                        t0 = perf_counter_ns()
                        outer.commit()
                        committing = perf_counter_ns() - t0
                    else:
                        outer.commit()
                    if records and serial is not None:
                        self._cache_serial = serial + 1  # it changed something: LMDB moved one on
                        self._next_offset = offset
                    break
                except TransientStorageError as e:
                    outer.abort()
                    tries += 1
                    started = started or time.monotonic()  # the first failure's time
                    if self._again(e, batch, held, started, tries):
                        continue
                    return
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
        finally:
            settle_held(held)
        if more is not None and more():
            held.append((batch, outcomes))
        else:
            settle(batch, outcomes)
        hooks = self.hooks
        if armed is not None and hooks.on_schedule_change is not None:
            hooks.on_schedule_change(armed)
        if records and hooks.on_commit is not None:
            hooks.on_commit(records)
        if timed and hooks.on_batch is not None:
            hooks.on_batch((batch, outcomes, self._spent, committing))
        if records:
            for tap in hooks.commit_taps:
                tap()
        if self._logged:
            for tap in hooks.log_taps:
                tap()

    def release(self) -> None:
        """Settle the outcomes `run_batch` held back for a next batch that did not come."""
        settle_held(self._held)

    def _again(self, e: TransientStorageError, batch: list[tuple[Job, Future[Any]]], held: list[Held], started: float, tries: int) -> bool:
        """Whether to run the batch again after a transient storage failure (after a pause that
        grows with the tries); if not, every job of the batch gets the error. The last batch's
        outcomes, if still `held`, are settled first: committed, they do not wait for the pauses."""
        settle_held(held)
        if time.monotonic() - started > RETRY_FOR:
            log.error("storage failed for %.0f s, giving up on a batch of %d: %s", RETRY_FOR, len(batch), e)
            for _, fut in batch:
                fut.set_exception(e)
            return False
        log.warning("storage: %s; running the batch of %d again (try %d)", e, len(batch), tries + 1)
        if tries > 1:
            time.sleep(min(1.0, 0.02 * 2 ** (tries - 2)))
        return True

    def _panic(self, e: StoragePanic, batch: list[tuple[Job, Future[Any]]]) -> None:
        self.broken = e
        for _, fut in batch:
            if not fut.done():
                fut.set_exception(e)
        log.critical("storage panic: %s", e)
        if self.hooks.on_panic is not None:
            self.hooks.on_panic(e)

    def _timed_job(
        self, job: Job, outer: WriteTxn, offset: int | None, nested: bool
    ) -> tuple[bool, Any, commitlog.CommitRecord | None, int | None]:
        """`_run_job`, its nanoseconds appended to `_spent` (for `hooks.on_batch`)."""
        t0 = perf_counter_ns()
        try:
            return self._run_job(job, outer, offset, nested)
        finally:
            self._spent.append(perf_counter_ns() - t0)

    def _run_job(
        self, job: Job, outer: WriteTxn, offset: int | None, nested: bool = True
    ) -> tuple[bool, Any, commitlog.CommitRecord | None, int | None]:
        """(ok, result or error, commit record, the earliest due time it armed). `offset`: the
        next record's, or None when no job of the batch wrote one yet (then the log says; a
        call that changes nothing never reads it). `nested`: in a transaction of its own inside
        `outer`; if not, it writes straight into `outer` and a failure raises `_Unwound` (the
        caller must abort `outer`, then record the failure with `_failed`)."""
        if job.timestamp is None:
            job.timestamp = job.start_time(self.clock.now())
        txn = outer.child() if nested else outer
        tx = self._tx
        if tx is None:
            tx = self._tx = Transaction(txn, job.timestamp, self._cache)
        else:
            tx.reset(txn, job.timestamp, self._cache)
        logs = tx.logs
        try:
            value = job.run(self.contexts, tx)
            record = None if job.skip_record else record_of(job, tx, txn, offset)
            if tx.event_tables:
                tx.drop_events()  # after the record took them: events are logged, never stored
            if record is not None:
                commitlog.append(txn, record)
                job.offset = record.offset  # whoever tracks the call finds its commit by it
            if nested:
                txn.commit()
        except (StorageFull, StorageError):
            if nested:
                txn.abort()
            self._cache.clear()
            raise
        except Exception as e:
            if nested:
                txn.abort()
            self._cache.clear()  # it may hold rows the failed call wrote
            if isinstance(e, SenderError):
                error: Exception = e
                logs.append(("error", str(e)))
            else:
                error = ReducerFailed(job.reducer)
                shown = explain(e).with_traceback(e.__traceback__)
                logs.append(("panic", "".join(traceback.format_exception(shown)).rstrip()))
            if not nested:
                raise _Unwound(error, logs) from None
            return self._failed(job, outer, error, logs, offset)
        if logs:
            self._logged = True
            for level, message in logs:
                self.dblog.append(outer, job.timestamp.micros, level, job.reducer, message)
        return True, value, record, tx.earliest_armed

    def _failed(
        self, job: Job, outer: WriteTxn, error: Exception, logs: list[tuple[str, str]], offset: int | None
    ) -> tuple[bool, Any, commitlog.CommitRecord | None, int | None]:
        """A failed job's outcome, written to `outer` (whose transaction holds none of the job's
        writes): its log lines, and its follow-up's commit."""
        assert job.timestamp is not None
        if logs:
            self._logged = True
            for level, message in logs:
                self.dblog.append(outer, job.timestamp.micros, level, job.reducer, message)
        follow_up = job.follow_up()
        if follow_up is not None:  # a failed schedule row's cleanup (schedules.py, rule 4)
            _, _, rec, _ = self._run_job(follow_up, outer, offset)
            if rec is not None:
                return False, error, rec, None
        return False, error, None, None  # a failed call's rows are gone: it armed nothing


def settle(batch: list[tuple[Job, Future[Any]]], outcomes: list[tuple[bool, Any]]) -> None:
    """Hand each job of a committed batch its outcome."""
    for (_, fut), (ok, value) in zip(batch, outcomes):
        if ok:
            fut.set_result(value)
        else:
            fut.set_exception(value)


def settle_held(held: list[Held]) -> None:
    """Settle what `held` holds (run_batch's last batch, if held back), once."""
    while held:
        settle(*held.pop())


class _Unwound(Exception):
    """A job run straight in the batch's transaction failed (its error and log lines)."""

    def __init__(self, error: Exception, logs: list[tuple[str, str]]) -> None:
        self.error = error
        self.logs = logs
