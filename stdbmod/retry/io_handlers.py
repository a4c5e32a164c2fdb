"""Handlers that may do I/O (`@rm.handler(job_type, io=True)`): run as procedures, outside the
writer, so a handler waiting on a payment API stalls no other call.

One attempt is three transactions, as an external worker's:

1. Claim. The `run_attempt` reducer (fired by the task's `attempt_timer` row) takes the task
   queued -> running with a lease held by the database's own identity, worker "handler"
   (`transitions.start_claim`, which arms the lease sweep), and inserts an `io_attempt` row due
   now, naming the task and the attempt number.
2. Run. That row fires the `run_io_attempt` procedure; the runtime deletes the row before the
   procedure starts (SpacetimeDB's rule: at most once). The handler runs outside any
   transaction; it may read (`ctx.read()`), log, extend its lease (`ctx.heartbeat()`), and
   name writes to make with its success (`ctx.on_success(fn)`).
3. Outcome. One transaction, fenced by the attempt: only if the task is still running this
   very attempt (the same attempt number, claimed by "handler" under the database's identity)
   does it apply the `on_success` writes and record success, retryable failure, snooze or
   give-up, exactly as the in-transaction form does (attempt_outcome.py). Otherwise the attempt
   was reaped meanwhile (its lease ended) or changed by an admin: nothing is written.

A process that dies in step 2 leaves the task running with a lease; the lease sweep reaps it
(outcome `lease_expired`, retried with backoff), as for a dead worker. The handler may then have
done its I/O once already: make it idempotent (a key with the request), as for workers.
"""

from __future__ import annotations

import random
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import msgspec

from ..module import Module
from ..runtime import ProcedureContext, ReadView, ReducerContext
from ..schema import PrimaryKey
from ..types import At, Identity, ScheduleAt, Timestamp
from . import transitions
from .attempt_outcome import HANDLER_WORKER, AttemptFacts, AttemptResult, run_handler, settle
from .singletons import settings_of
from .tables import Task, TaskStatus

if TYPE_CHECKING:
    from .handlers import HandlerContext


class IoAttempt(msgspec.Struct):
    """Starts the procedure that runs attempt `attempt` of task `task_id` (claimed already)."""

    scheduled_id: Annotated[int, PrimaryKey(auto_inc=True)]
    scheduled_at: ScheduleAt
    task_id: int
    attempt: int


@dataclass(frozen=True)
class IoHandler:
    """A handler registered with `io=True`: what runs, and its lease (None: the settings')."""

    func: Callable[[IoHandlerContext, Any], Any]
    lease_seconds: int | None = None

    def __call__(self, ctx: HandlerContext, payload: Any) -> Any:
        raise TypeError("an I/O handler runs as a procedure, never inside a transaction")


class IoHandlerContext(AttemptFacts):
    """What an I/O handler sees: the task and its attempt number, the procedure's `timestamp`,
    `rng`, `identity`; `read()` (a snapshot), `log`, `heartbeat` and `on_success`. It has no
    `db` to write: writes go with the outcome (`on_success`), or, not atomic with it, in a
    transaction of their own (`with_tx`)."""

    __slots__ = ("_ctx", "task", "_writes", "_lease")

    def __init__(self, ctx: ProcedureContext, task: Task, lease_seconds: int) -> None:
        self._ctx = ctx
        self.task = task
        self._writes: list[Callable[[ReducerContext], Any]] = []
        self._lease = lease_seconds

    @property
    def timestamp(self) -> Timestamp:
        return self._ctx.timestamp

    @property
    def identity(self) -> Identity:
        return self._ctx.identity

    @property
    def rng(self) -> random.Random:
        return self._ctx.rng

    def read(self) -> ReadView:
        return self._ctx.read()

    def log(self, message: str, level: str = "info") -> None:
        self._ctx.log(message, level)

    def on_success(self, fn: Callable[[ReducerContext], Any]) -> None:
        """Run `fn(tx)` in the outcome's transaction if the attempt succeeds (or gives up), still
        current: its writes commit with the task's completion, or not at all."""
        self._writes.append(fn)

    def with_tx(self, fn: Callable[[ReducerContext], Any]) -> Any:
        """`fn(tx)` in a transaction of its own, now (committed whatever the attempt's outcome)."""
        return self._ctx.with_tx(fn)

    def heartbeat(self, lease_seconds: int | None = None) -> bool:
        """Extend this attempt's lease to now + `lease_seconds` (default: its handler's lease);
        False if the attempt is no longer current (reaped: stop and return)."""
        task_id, attempt = self.task.id, self.task.attempts
        self_lease = self._lease

        def extend(tx: ReducerContext) -> bool:
            current: Task | None = tx.db.task.id.find(task_id)
            if not is_current(current, attempt, tx.identity, tx.timestamp):
                return False
            assert current is not None
            transitions.extend_lease(tx, current, lease_seconds or self_lease)
            return True

        return bool(self._ctx.with_tx(extend))

    def __repr__(self) -> str:
        return f"IoHandlerContext(task_id={self.task.id}, job_type={self.task.job_type!r}, attempt={self.task.attempts})"


def is_current(task: Task | None, attempt: int, identity: Identity, now: Timestamp | None = None) -> bool:
    """Whether `task` is still running attempt `attempt` of an in-module I/O handler: the fence
    of every write the procedure makes after the claim. With `now` (a transaction's time), an
    attempt that reached its task's timeout_seconds is over too, as for a worker (issue 16)."""
    if task is None or not (
        task.status is TaskStatus.RUNNING and task.attempts == attempt and task.claimed_by == HANDLER_WORKER and task.lease_holder == identity
    ):
        return False
    deadline = transitions.attempt_deadline(task)
    return now is None or deadline is None or now < deadline


def start_io_attempt(ctx: ReducerContext, task: Task, handler: IoHandler) -> None:
    """Step 1, in the `run_attempt` reducer: claim the task with a lease, start the procedure."""
    lease = handler.lease_seconds or settings_of(ctx.db).default_lease_seconds
    running = transitions.start_claim(ctx, task, HANDLER_WORKER, lease)
    ctx.db.io_attempt.insert(IoAttempt(0, At(ctx.timestamp), running.id, running.attempts))


def declare_io(mod: Module, handlers: Mapping[str, Any]) -> None:
    """The `io_attempt` schedule table and the procedure it fires (steps 2 and 3)."""
    mod.table(IoAttempt, scheduled="run_io_attempt")

    @mod.procedure
    def run_io_attempt(ctx: ProcedureContext, row: IoAttempt) -> None:
        """Scheduled: run attempt `row.attempt` of task `row.task_id` outside the writer."""
        with ctx.read() as view:
            task: Task | None = view.db.task.id.find(row.task_id)
        if task is None or not is_current(task, row.attempt, ctx.identity):
            return  # reaped or changed before it could start
        handler = handlers.get(task.job_type)
        with ctx.read() as view:
            default_lease = settings_of(view.db).default_lease_seconds
        lease = handler.lease_seconds if isinstance(handler, IoHandler) and handler.lease_seconds else default_lease
        hctx = IoHandlerContext(ctx, task, lease)
        if isinstance(handler, IoHandler):
            result = run_handler(lambda: handler.func(hctx, task.payload))
        else:  # unregistered (or no longer io) since the claim
            result = AttemptResult(error=f"job type {task.job_type!r} has no I/O handler any more")

        def outcome(tx: ReducerContext) -> None:
            current: Task | None = tx.db.task.id.find(row.task_id)
            if not is_current(current, row.attempt, tx.identity, tx.timestamp):
                tx.log(f"task {row.task_id}: attempt {row.attempt} ended after it was reaped, changed or timed out; its outcome is dropped", "warn")
                return
            assert current is not None
            r = result
            if r.keeps_writes and hctx._writes:
                try:
                    with tx.savepoint():
                        for write in hctx._writes:
                            write(tx)
                except Exception:
                    r = AttemptResult(error="on_success failed:\n" + traceback.format_exc())
                current = tx.db.task.id.find(row.task_id)
                if current is None:  # the writes deleted the task: nothing left to account for
                    return
            settle(tx, handlers, current, r)

        ctx.with_tx(outcome)
