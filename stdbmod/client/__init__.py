"""stdbmod's Python client and worker: they speak HTTP to a stdbmod server and never import the
server side (the runtime, the retry module, the HTTP app).

- `Client` / `AsyncClient`: every route, typed results (`Job`, `JobPage`...), errors that carry
  the server's status and message (`ClientError` and its subclasses);
- `Worker`: handlers by job type, run with leases, heartbeats, fencing, retries and graceful
  shutdown (docs/worker.md).
"""

try:  # the client extra, checked first: a base install gets a sentence, not a deep traceback
    import stamina  # noqa: F401
except ModuleNotFoundError as e:
    raise ModuleNotFoundError(f"stdbmod.client needs the client extra ({e.name} is not installed): pip install 'stdbmod[client]'", name=e.name) from None

from .client import DEFAULT_URL, AsyncClient, Client, JobRef  # noqa: E402
from .errors import (
    BadRequest,
    ClientError,
    Conflict,
    Forbidden,
    NotFound,
    PayloadTooLarge,
    ReducerError,
    ServerError,
    TransportError,
    Unauthorized,
)
from .execution import Outcome
from .jobcontext import JobContext, current_job
from .policy import GiveUp, RetryIn, Snooze
from .types import (
    BulkOperation,
    BulkResult,
    Completion,
    DatabaseInfo,
    DeadLetterGroup,
    HistoryEntry,
    IdentityToken,
    Job,
    JobPage,
    LogLine,
    NewJob,
    QueueInfo,
    Recurring,
    RetentionPolicy,
    Unique,
)
from .worker import Worker, WorkerSettings, WorkerStats

__all__ = [
    "Client",
    "AsyncClient",
    "DEFAULT_URL",
    "JobRef",
    "Job",
    "JobPage",
    "NewJob",
    "Recurring",
    "QueueInfo",
    "RetentionPolicy",
    "Unique",
    "DeadLetterGroup",
    "BulkOperation",
    "BulkResult",
    "Completion",
    "HistoryEntry",
    "IdentityToken",
    "DatabaseInfo",
    "LogLine",
    "Worker",
    "WorkerSettings",
    "WorkerStats",
    "Outcome",
    "JobContext",
    "current_job",
    "GiveUp",
    "RetryIn",
    "Snooze",
    "ClientError",
    "TransportError",
    "BadRequest",
    "PayloadTooLarge",
    "Unauthorized",
    "Forbidden",
    "NotFound",
    "Conflict",
    "ReducerError",
    "ServerError",
]
