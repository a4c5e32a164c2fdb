"""The task-retry module: durable tasks retried with exponential backoff until they succeed, give
up, or exhaust their attempts and land in the dead-letter tier; an admin role; a capped attempt
history. Tasks run in-module (handlers registered per job type) or are claimed by external workers.

An ordinary module on the runtime's public API: publish `create_retry_module().module`, or include
it in your own module. See docs/retry.md.
"""

import threading
from typing import Any

from . import queries
from .errors import (
    AttemptTimedOut,
    GiveUp,
    InvalidArgument,
    InvalidTransition,
    NotAuthorized,
    RetryableError,
    RetryIn,
    Snooze,
    StaleLease,
    TaskCancelled,
    TaskNotFound,
)
from .handlers import Handler, HandlerContext
from .io_handlers import IoAttempt, IoHandlerContext
from .limits import backoff_delay
from .queries import Page, is_admin, is_worker
from .retry_module import RetryModule, create_retry_module, enqueue_in
from .tables import (
    Attempt,
    AttemptTimer,
    Completion,
    DeadReason,
    Enqueued,
    LeaseSweep,
    LeaseTimer,
    NewTask,
    Outcome,
    RetryAdmin,
    RetrySettings,
    RetryWorker,
    Task,
    TaskStatus,
    UniqueSpec,
)

_default: RetryModule | None = None
_default_lock = threading.Lock()


def __getattr__(name: str) -> Any:
    """`default_retry` (and its `default_module`): the built-in instance `stdbmod serve` and
    `stdbmod publish` use when no module is given: no handlers, so every task waits for external
    workers. Made on first use, not when the package is imported."""
    global _default
    if name not in ("default_retry", "default_module"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    with _default_lock:
        if _default is None:
            _default = create_retry_module()
    return _default if name == "default_retry" else _default.module

__all__ = [
    "RetryModule",
    "create_retry_module",
    "enqueue_in",
    "default_retry",
    "default_module",
    "Handler",
    "HandlerContext",
    "IoHandlerContext",
    "IoAttempt",
    "GiveUp",
    "RetryableError",
    "RetryIn",
    "Snooze",
    "NotAuthorized",
    "TaskNotFound",
    "InvalidTransition",
    "StaleLease",
    "TaskCancelled",
    "AttemptTimedOut",
    "InvalidArgument",
    "Task",
    "TaskStatus",
    "DeadReason",
    "Attempt",
    "Outcome",
    "RetryAdmin",
    "RetryWorker",
    "RetrySettings",
    "AttemptTimer",
    "LeaseSweep",
    "LeaseTimer",
    "NewTask",
    "UniqueSpec",
    "Enqueued",
    "Completion",
    "Page",
    "queries",
    "is_admin",
    "is_worker",
    "backoff_delay",
]
