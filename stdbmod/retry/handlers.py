"""In-module handlers: what a handler sees, and how one attempt runs.

An attempt runs inside the scheduled reducer fired by the task's `attempt_timer` row, so its
bookkeeping and the handler's writes share one transaction. The handler itself runs in a
savepoint: a return or `GiveUp` keeps its writes; `RetryableError`, `RetryIn`, `Snooze` or any
other exception rolls them back while the attempt is still recorded (a snooze gives it back).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from ..runtime import ReducerContext
from ..types import Identity, Timestamp
from . import transitions
from .attempt_outcome import HANDLER_WORKER, AttemptFacts, run_handler, settle
from .io_handlers import IoHandler, start_io_attempt
from .queues import paused
from .tables import AttemptTimer, Task, TaskStatus

__all__ = ["HANDLER_WORKER", "HandlerContext", "Handler", "run_handler_attempt"]


class HandlerContext(AttemptFacts):
    """What a handler may touch: the tables (`db`), the attempt's fixed `timestamp`, a seeded
    `rng`, the task being attempted and its attempt number (1 on the first run)."""

    __slots__ = ("_ctx", "task")

    def __init__(self, ctx: ReducerContext, task: Task) -> None:
        self._ctx = ctx
        self.task = task

    @property
    def db(self) -> Any:
        return self._ctx.db

    @property
    def timestamp(self) -> Timestamp:
        return self._ctx.timestamp

    @property
    def identity(self) -> Identity:
        return self._ctx.identity

    @property
    def rng(self) -> random.Random:
        return self._ctx.rng

    @property
    def reducer_context(self) -> ReducerContext:
        """The scheduled reducer's context, e.g. for `enqueue_in` (a follow-up task)."""
        return self._ctx

    def log(self, message: str, level: str = "info") -> None:
        self._ctx.log(message, level)

    def __repr__(self) -> str:
        return f"HandlerContext(task_id={self.task.id}, job_type={self.task.job_type!r}, attempt={self.task.attempts})"


Handler = Callable[[HandlerContext, Any], Any]


def run_handler_attempt(ctx: ReducerContext, handlers: Mapping[str, Handler], timer: AttemptTimer) -> None:
    """The body of the `run_attempt` scheduled reducer."""
    ctx.require_scheduler()
    # Delete the firing row ourselves: a retry inserts a fresh timer row, which the runtime's
    # one-shot cleanup must not mistake for this one (a zero backoff gives the same due time).
    ctx.db.attempt_timer.scheduled_id.delete(timer.scheduled_id)
    task: Task | None = ctx.db.task.id.find(timer.task_id)
    if task is None or task.status is not TaskStatus.QUEUED or not task.in_module:
        return
    if paused(ctx.db, task.queue):  # left queued without a timer: resume_queue arms it again
        return
    handler = handlers.get(task.job_type)
    if handler is None:  # unregistered since it was queued: external workers may claim it now
        ctx.db.task.id.update(msgspec.structs.replace(task, in_module=False, updated_at=ctx.timestamp))
        return
    if isinstance(handler, IoHandler):  # may do I/O: claimed here, run as a procedure (io_handlers.py)
        start_io_attempt(ctx, task, handler)
        return
    running = transitions.start_attempt(ctx, task)
    r = run_handler(lambda: handler(HandlerContext(ctx, running), running.payload), ctx.savepoint)
    current: Task | None = ctx.db.task.id.find(running.id)
    if current is None:  # the handler deleted its own task; nothing left to account for
        return
    settle(ctx, handlers, current, r)
