"""The task-retry module: durable tasks retried with exponential backoff until they succeed, give
up, or exhaust their attempts and land in the dead-letter tier; an admin role; a capped attempt
history. Tasks run in-module (handlers registered per job type) or are claimed by external workers.

An ordinary module on the runtime's public API: publish `create_retry_module().module`, or include
it in your own module. See docs/retry.md.
"""

from . import queries
from .batch_reducers import Completion, NewTask
from .errors import GiveUp, InvalidArgument, InvalidTransition, NotAuthorized, RetryableError, StaleLease, TaskNotFound
from .handlers import Handler, HandlerContext
from .limits import backoff_delay
from .queries import Page, is_admin, is_worker
from .retry_module import RetryModule, create_retry_module, enqueue_in
from .tables import (
    Attempt,
    AttemptTimer,
    DeadReason,
    LeaseSweep,
    LeaseTimer,
    Outcome,
    RetryAdmin,
    RetrySettings,
    RetryWorker,
    Task,
    TaskStatus,
)

default_retry = create_retry_module()
"""The built-in instance `stdbmod serve` / `stdbmod publish` use when no module is given: no
handlers, so every task waits for external workers."""
default_module = default_retry.module

__all__ = [
    "RetryModule",
    "create_retry_module",
    "enqueue_in",
    "default_retry",
    "default_module",
    "Handler",
    "HandlerContext",
    "GiveUp",
    "RetryableError",
    "NotAuthorized",
    "TaskNotFound",
    "InvalidTransition",
    "StaleLease",
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
    "Completion",
    "Page",
    "queries",
    "is_admin",
    "is_worker",
    "backoff_delay",
]
