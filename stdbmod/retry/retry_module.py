"""`RetryModule`: one instance of the task-retry module, with its own handler registry.

    rm = create_retry_module()

    @rm.handler("send_email")
    def send_email(ctx: HandlerContext, payload: dict) -> dict: ...

    db = Database.create(path, rm.module, owner=alice)      # alice is the first admin
    # or: my_module.include(rm.module), then rm.enqueue_in(ctx, ...) from my reducers
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

from ..module import Module
from ..runtime import ReducerContext
from ..types import Timestamp
from . import admin_reducers, batch_reducers, transitions, worker_reducers
from .errors import InvalidArgument
from .handlers import Handler, HandlerContext, run_handler_attempt
from .limits import check_name
from .tables import (
    DEFAULT_HISTORY_CAP,
    DEFAULT_LEASE_SECONDS,
    AttemptTimer,
    LeaseSweep,
    LeaseTimer,
    RetryAdmin,
    RetrySettings,
    Task,
    TaskStatus,
    declare_tables,
)

# Which instance owns a database's `task` table, for the module-level `enqueue_in`.
_owners: weakref.WeakValueDictionary[int, RetryModule] = weakref.WeakValueDictionary()


class RetryModule:
    def __init__(self, name: str = "retry") -> None:
        self.module = Module(name)
        self.handlers: dict[str, Handler] = {}
        declare_tables(self.module)
        _register_lifecycle(self.module, self)
        worker_reducers.register(self.module, self)
        batch_reducers.register(self.module, self)
        admin_reducers.register(self.module, self)
        _owners[id(self.module.tables["task"])] = self

    def handler(self, job_type: str) -> Callable[[Handler], Handler]:
        """Register `func(ctx: HandlerContext, payload) -> result` as the handler of job_type.
        Tasks of that type queued from now on run in-module instead of waiting for workers."""
        check_name("job_type", job_type)

        def register(func: Handler) -> Handler:
            if job_type in self.handlers:
                raise InvalidArgument(f"job type {job_type!r} already has a handler")
            self.handlers[job_type] = func
            return func

        return register

    def enqueue_in(
        self,
        ctx: ReducerContext | HandlerContext,
        job_type: str,
        payload: Any = None,
        *,
        queue: str | None = None,
        max_attempts: int | None = None,
        backoff_seconds: int | None = None,
        run_after: Timestamp | None = None,
        priority: int = 0,
        idempotency_key: str | None = None,
    ) -> Task:
        """Add a task inside the calling reducer's transaction (no role check: the calling
        module decides who may do this). It exists only if that reducer commits."""
        rctx = ctx.reducer_context if isinstance(ctx, HandlerContext) else ctx
        spec = transitions.task_spec(job_type, queue, payload, max_attempts, backoff_seconds, run_after, priority, idempotency_key)
        return transitions.create_task(rctx, self.handlers, spec)

    def __repr__(self) -> str:
        return f"RetryModule({self.module.name!r}, handlers={sorted(self.handlers)})"


def create_retry_module(name: str = "retry") -> RetryModule:
    """A fresh instance (tests make their own, so handler registries never leak between them)."""
    return RetryModule(name)


def enqueue_in(ctx: ReducerContext | HandlerContext, job_type: str, payload: Any = None, **options: Any) -> Task:
    """`RetryModule.enqueue_in` of the retry module included in the calling reducer's database."""
    rctx = ctx.reducer_context if isinstance(ctx, HandlerContext) else ctx
    owner = _owners.get(id(rctx.db.task.definition))  # the TableDef object is the instance's own
    if owner is None:
        raise InvalidArgument("this database does not include a retry module")
    return owner.enqueue_in(ctx, job_type, payload, **options)


def _register_lifecycle(mod: Module, rm: RetryModule) -> None:
    @mod.init
    def retry_init(ctx: ReducerContext) -> None:
        """The publisher becomes the first admin."""
        ctx.db.retry_admin.insert(RetryAdmin(ctx.sender, ctx.timestamp, ctx.sender))
        if ctx.db.retry_settings.id.find(0) is None:
            ctx.db.retry_settings.insert(RetrySettings(0, DEFAULT_HISTORY_CAP, DEFAULT_LEASE_SECONDS))

    @mod.reducer
    def run_attempt(ctx: ReducerContext, timer: AttemptTimer) -> None:
        """Scheduled: the next in-module attempt of a task."""
        run_handler_attempt(ctx, rm.handlers, timer)

    @mod.reducer
    def sweep_leases(ctx: ReducerContext, sweep: LeaseSweep) -> None:
        """Scheduled at the earliest lease end: reap the claims whose lease has ended."""
        ctx.require_scheduler()
        transitions.sweep_leases(ctx, rm.handlers)

    @mod.reducer
    def reap_lease(ctx: ReducerContext, timer: LeaseTimer) -> None:
        """Legacy per-claim reaper (rows of databases made before the sweep)."""
        ctx.require_scheduler()
        task: Task | None = ctx.db.task.id.find(timer.task_id)
        if task is None or task.status is not TaskStatus.RUNNING or task.attempts != timer.attempt:
            return
        if task.lease_expires_at is not None and task.lease_expires_at > ctx.timestamp:
            return  # heartbeats now move the sweep, not this row: the lease is still good
        transitions.reap(ctx, rm.handlers, task)

