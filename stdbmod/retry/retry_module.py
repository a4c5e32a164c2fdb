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
from typing import Any, TypeVar

from ..module import Module
from ..runtime import ReducerContext
from ..types import Timestamp
from . import transitions
from .errors import InvalidArgument
from .handlers import Handler, HandlerContext
from .io_handlers import IoHandler, declare_io
from .limits import MAX_LEASE_SECONDS, check_int, check_name
from .recurring import declare_recurring_reducers, declare_recurring_tables
from .reducers import declare_reducers
from .roles import is_admin, is_worker
from .tables import NewTask, Task, UniqueSpec, declare_tables
from .triage import declare_triage_reducers, declare_triage_tables

F = TypeVar("F", bound=Callable[..., Any])

# Which instance owns a database's `task` table, for the module-level `enqueue_in`.
_owners: weakref.WeakValueDictionary[int, RetryModule] = weakref.WeakValueDictionary()


class RetryModule:
    def __init__(self, name: str = "retry") -> None:
        self.module = Module(name)
        self.handlers: dict[str, Handler] = {}
        declare_tables(self.module)
        declare_reducers(self.module, self.handlers)
        declare_recurring_tables(self.module)
        declare_recurring_reducers(self.module, self.handlers)
        declare_io(self.module, self.handlers)
        declare_triage_tables(self.module)
        declare_triage_reducers(self.module, self.handlers)
        # SQL and subscriptions: admins read every private table, workers the tasks (to wake on them)
        self.module.reader("retry admins")(is_admin)
        self.module.reader("retry workers", tables=("task",))(is_worker)
        _owners[id(self.module.tables["task"])] = self

    def handler(self, job_type: str, *, io: bool = False, lease_seconds: int | None = None) -> Callable[[F], F]:
        """Register `func(ctx, payload) -> result` as the handler of job_type. Tasks of that type
        queued from now on run in-module instead of waiting for workers.

        Default: `func(ctx: HandlerContext, payload)` runs inside the attempt's transaction, its
        writes atomic with the outcome; it must not do I/O (it holds the writer). `io=True`:
        `func(ctx: IoHandlerContext, payload)` runs as a procedure, outside any transaction,
        under a lease of `lease_seconds` (default: the settings'), claimed and settled in
        transactions of their own (io_handlers.py; docs/retry.md says which to use)."""
        check_name("job_type", job_type)
        if lease_seconds is not None:
            check_int("lease_seconds", lease_seconds, 1, MAX_LEASE_SECONDS)
            if not io:
                raise InvalidArgument("lease_seconds is for io=True handlers (the others hold no lease)")

        def register(func: F) -> F:
            if job_type in self.handlers:
                raise InvalidArgument(f"job type {job_type!r} already has a handler")
            self.handlers[job_type] = IoHandler(func, lease_seconds) if io else func
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
        max_backoff_seconds: int | None = None,
        backoff_jitter: float = 0.0,
        partition_key: str | None = None,
        timeout_seconds: int | None = None,
        unique: UniqueSpec | None = None,
    ) -> Task:
        """Add a task inside the calling reducer's transaction (no role check: the calling
        module decides who may do this). It exists only if that reducer commits. The options
        are `NewTask`'s, named here for editors."""
        rctx = ctx.reducer_context if isinstance(ctx, HandlerContext) else ctx
        task = NewTask(
            job_type, queue, payload, max_attempts, backoff_seconds, run_after, priority, idempotency_key, max_backoff_seconds, backoff_jitter,
            partition_key, timeout_seconds, unique,
        )
        return transitions.create_task(rctx, self.handlers, transitions.checked(task))

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
