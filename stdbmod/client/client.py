"""`Client` and `AsyncClient`: every route of a stdbmod server, typed, over httpx.

Both send the requests `calls` describes, one method per route; they differ only in waiting.
Errors are `errors.ClientError`s carrying the server's status and message. Neither retries on its
own: an enqueue or a claim sent twice would do its work twice, so retrying is the caller's choice
(the `Worker` retries what is safe to retry, with backoff).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from types import TracebackType
from typing import Any, Self, TypeVar

import httpx

from . import calls
from .calls import Call
from .errors import TransportError
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

T = TypeVar("T")

DEFAULT_URL = "http://127.0.0.1:3000"
DEFAULT_DATABASE = "retry"
JobRef = Job | int
"""A job, or its id. Given a claimed `Job`, complete, fail and heartbeat send its attempt (fencing)."""

_JSON = {"Content-Type": "application/json"}


def _ref(job: JobRef, attempt: int | None) -> tuple[int, int | None]:
    if isinstance(job, Job):
        return job.id, job.attempts if attempt is None else attempt
    return job, attempt


def _new_job(job_type: str, payload: Any, options: dict[str, Any]) -> NewJob:
    try:
        return NewJob(job_type, payload, **options)
    except TypeError as e:  # an option NewJob does not have
        raise TypeError(f"enqueue: {e}; the options are NewJob's fields") from None


def _headers(token: str | None) -> dict[str, str]:
    return {} if token is None else {"Authorization": f"Bearer {token}"}


def _request(call: Call[Any]) -> dict[str, Any]:
    content = call.content()
    return {"method": call.method, "url": call.path, "content": content, "params": call.query(), "headers": _JSON if content is not None else None}


def _no_answer(call: Call[Any], e: httpx.TransportError) -> TransportError:
    return TransportError(f"{call.method} {call.path}: no answer from the server ({type(e).__name__}: {e})")


class Client:
    """A blocking client. `Client(url, token)`; use it as a context manager, or `close()` it.

    `database` is the name the `/v1` routes (admin calls, reducers, schema, logs) address;
    `transport` is any httpx transport (an `httpx.MockTransport`, `httpx.WSGITransport`...)."""

    def __init__(self, url: str = DEFAULT_URL, token: str | None = None, *, database: str = DEFAULT_DATABASE,
                 timeout: float = 30.0, transport: httpx.BaseTransport | None = None, max_connections: int = 20) -> None:
        self.url, self.database = url, database
        self._http = httpx.Client(base_url=url, headers=_headers(token), timeout=timeout, transport=transport,
                                  limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections))

    def __enter__(self) -> Self:
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def send(self, call: Call[T]) -> T:
        """Send one described request; the answer decoded, or the server's error raised."""
        try:
            r = self._http.request(**_request(call))
        except httpx.TransportError as e:
            raise _no_answer(call, e) from e
        return call.answer(r.status_code, r.content)

    # --- jobs -------------------------------------------------------------------------------------

    def enqueue(self, job_type: str, payload: Any = None, **options: Any) -> Job:
        """Enqueue one job (worker or admin). `options` are `NewJob`'s fields: queue, max_attempts,
        backoff_seconds, run_after, priority, idempotency_key (the same key returns the first
        job), max_backoff_seconds, backoff_jitter, partition_key, timeout_seconds, unique."""
        return self.send(calls.enqueue(_new_job(job_type, payload, options)))

    def enqueue_unique(self, job_type: str, payload: Any, unique: Unique, **options: Any) -> tuple[Job, bool]:
        """Enqueue unless a job with the same `unique.fields` is there (in `unique.states`, within
        `unique.period_seconds`): the job, new or already there, and whether it was there."""
        return self.send(calls.enqueue_unique(_new_job(job_type, payload, {**options, "unique": unique})))

    def enqueue_many(self, jobs: Iterable[NewJob]) -> list[Job]:
        """Enqueue up to 1,000 jobs in one transaction, all or none."""
        return self.send(calls.enqueue_many(jobs))

    def get(self, job_id: int) -> Job:
        return self.send(calls.get(job_id))

    def list_jobs(self, status: str | None = None, *, queue: str | None = None, job_type: str | None = None, page: int = 1, per_page: int = 50) -> JobPage:
        """Jobs, newest first, filtered and paginated (admin)."""
        return self.send(calls.list_jobs(status, queue, job_type, page, per_page))

    def claim(self, queue: str | None = None, *, worker_id: str | None = None, lease_seconds: int | None = None) -> Job | None:
        """The next ready job, now running under a lease held by this identity; None when none is ready."""
        return self.send(calls.claim(queue, worker_id, lease_seconds))

    def claim_many(self, limit: int, queue: str | None = None, *, worker_id: str | None = None, lease_seconds: int | None = None) -> list[Job]:
        return self.send(calls.claim_many(limit, queue, worker_id, lease_seconds))

    def complete(self, job: JobRef, result: Any = None, *, attempt: int | None = None) -> Job:
        job_id, attempt = _ref(job, attempt)
        return self.send(calls.complete(job_id, result, attempt))

    def complete_many(self, items: Sequence[Completion]) -> list[Job]:
        return self.send(calls.complete_many(items))

    def fail(self, job: JobRef, error: str, *, attempt: int | None = None, retry: bool = True, retry_in_seconds: int | None = None) -> Job:
        """Report a failure: queued again with backoff (or in `retry_in_seconds`), or dead when it
        was the last attempt; `retry=False` sends it to the dead-letter tier at once (discarded)."""
        job_id, attempt = _ref(job, attempt)
        return self.send(calls.fail(job_id, error, attempt, retry, retry_in_seconds))

    def snooze(self, job: JobRef, seconds: int, *, attempt: int | None = None) -> Job:
        """Give the job back to run in `seconds`, without spending the attempt."""
        job_id, attempt = _ref(job, attempt)
        return self.send(calls.snooze(job_id, seconds, attempt))

    def run_now(self, job_id: int) -> Job:
        """A queued job (scheduled later, or backing off) due now (admin)."""
        return self.send(calls.run_now(job_id))

    def heartbeat(self, job: JobRef, *, lease_seconds: int | None = None, attempt: int | None = None) -> Job:
        """Extend the lease: it now ends `lease_seconds` (default: the server's) from now."""
        job_id, attempt = _ref(job, attempt)
        return self.send(calls.heartbeat(job_id, lease_seconds, attempt))

    def cancel(self, job_id: int, reason: str | None = None) -> Job:
        """A queued job to the dead-letter tier (admin)."""
        return self.send(calls.cancel(job_id, reason))

    def dead_letter(self, queue: str | None = None, *, page: int = 1, per_page: int = 50) -> JobPage:
        return self.send(calls.dead_letter(queue, page, per_page))

    def requeue(self, job_id: int) -> Job:
        """A dead job back to queued, attempts reset, due now (admin)."""
        return self.send(calls.requeue(job_id))

    def delete(self, job_id: int) -> None:
        """Delete a dead job; its history stays (admin)."""
        return self.send(calls.delete(job_id))

    def history(self, limit: int = 100) -> list[HistoryEntry]:
        """The attempt history, newest first (admin)."""
        return self.send(calls.history(limit))

    # --- queue control (admin; docs/operations.md) ---------------------------------------------------

    def list_queues(self) -> list[QueueInfo]:
        return self.send(calls.list_queues())

    def pause_queue(self, queue: str) -> QueueInfo:
        return self.send(calls.pause_queue(queue))

    def resume_queue(self, queue: str) -> QueueInfo:
        return self.send(calls.resume_queue(queue))

    def set_queue_limits(self, queue: str, **limits: int | None) -> QueueInfo:
        """concurrency, rate_limit, rate_period_seconds, partition_limit: all replaced at once."""
        return self.send(calls.set_queue_limits(queue, **limits))

    def retention(self) -> list[RetentionPolicy]:
        """How long completed and dead jobs are kept (admin)."""
        return self.send(calls.retention())

    def set_retention(self, status: str, *, max_age_seconds: int | None = None, max_count: int | None = None) -> RetentionPolicy:
        """Keep `status` ("completed" or "dead") jobs at most `max_age_seconds` after they finished
        and at most `max_count` of them; both replaced at once, None: no such limit (admin)."""
        return self.send(calls.set_retention(status, max_age_seconds, max_count))

    # --- dead-letter triage (admin; docs/operations.md) -----------------------------------------------

    def dlq_groups(self, queue: str | None = None, *, job_type: str | None = None, limit: int = 50) -> list[DeadLetterGroup]:
        """The dead jobs grouped by error fingerprint, largest first."""
        return self.send(calls.dlq_groups(queue, job_type, limit))

    def bulk_requeue(self, *, dry_run: bool = False, **where: Any) -> BulkResult:
        """Requeue the dead jobs `where` takes (group, job_type, queue, finished_after, finished_before, include_held)."""
        return self.send(calls.bulk_requeue(dry_run, **where))

    def bulk_delete(self, *, dry_run: bool = False, **where: Any) -> BulkResult:
        return self.send(calls.bulk_delete(dry_run, **where))

    def bulk_operation(self, op_id: int) -> BulkOperation:
        return self.send(calls.bulk_operation(op_id))

    # --- recurring jobs (admin; docs/cron.md) ---------------------------------------------------------

    def list_recurring(self) -> list[Recurring]:
        return self.send(calls.list_recurring())

    def add_recurring(self, name: str, cron: str, job: dict[str, Any], *, timezone: str | None = None, enabled: bool | None = None,
                      catch_up: str | None = None, catch_up_limit: int | None = None) -> Recurring:  # fmt: skip
        """A recurring job: `cron` (five fields or @hourly...) in `timezone` enqueues `job` (an enqueue body)."""
        return self.send(calls.add_recurring(name, cron, job, timezone, enabled, catch_up, catch_up_limit))

    def change_recurring(self, recurring_id: int, **changes: Any) -> Recurring:
        return self.send(calls.change_recurring(recurring_id, **changes))

    def enable_recurring(self, recurring_id: int) -> Recurring:
        return self.send(calls.enable_recurring(recurring_id))

    def disable_recurring(self, recurring_id: int) -> Recurring:
        return self.send(calls.disable_recurring(recurring_id))

    def run_recurring_now(self, recurring_id: int) -> Job:
        return self.send(calls.run_recurring_now(recurring_id))

    def delete_recurring(self, recurring_id: int) -> None:
        return self.send(calls.delete_recurring(recurring_id))

    # --- roles and settings (the task-retry module's admin reducers) ---------------------------------

    def add_admin(self, identity: str) -> None:
        self.call("add_admin", identity)

    def remove_admin(self, identity: str) -> None:
        self.call("remove_admin", identity)

    def grant_worker(self, identity: str) -> None:
        self.call("grant_worker", identity)

    def revoke_worker(self, identity: str) -> None:
        self.call("revoke_worker", identity)

    def set_history_cap(self, cap: int) -> None:
        self.call("set_history_cap", cap)

    def set_default_lease(self, seconds: int) -> None:
        self.call("set_default_lease", seconds)

    # --- SpacetimeDB-style routes --------------------------------------------------------------------

    def call(self, reducer: str, *args: Any) -> Any:
        """Call a reducer of `database` as this identity; its return value as JSON. A refusal is a
        `ReducerError` (530) with the reducer's message."""
        return self.send(calls.call_reducer(self.database, reducer, args))

    def ping(self) -> None:
        self.send(calls.ping())

    def new_identity(self) -> IdentityToken:
        """Mint a new identity and its token (needs no token)."""
        return self.send(calls.new_identity())

    def verify(self, identity: str) -> bool:
        """Whether this client's token is `identity`'s."""
        return self.send(calls.verify(identity))

    def database_info(self) -> DatabaseInfo:
        return self.send(calls.database_info(self.database))

    def schema(self) -> dict[str, Any]:
        return self.send(calls.schema(self.database))

    def database_identity(self) -> str:
        return self.send(calls.database_identity(self.database))

    def sql(self, query: str) -> list[dict[str, Any]]:
        """Run SQL (`;`-separated statements): one {schema, rows, ...} per statement."""
        return self.send(calls.sql(self.database, query))

    def logs(self, num_lines: int | None = None) -> list[LogLine]:
        """The database log (owner only)."""
        return self.send(calls.logs(self.database, num_lines))

    def openapi(self) -> dict[str, Any]:
        """The server's OpenAPI document (every route it serves)."""
        return self.send(calls.openapi())

    def metrics(self) -> str:
        """The server's metrics in Prometheus' text format (an admin's token)."""
        return self.send(calls.metrics())


class AsyncClient:
    """`Client`'s twin for asyncio: the same methods, each a coroutine."""

    def __init__(self, url: str = DEFAULT_URL, token: str | None = None, *, database: str = DEFAULT_DATABASE,
                 timeout: float = 30.0, transport: httpx.AsyncBaseTransport | None = None, max_connections: int = 20) -> None:
        self.url, self.database = url, database
        self._http = httpx.AsyncClient(base_url=url, headers=_headers(token), timeout=timeout, transport=transport,
                                       limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections))

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def send(self, call: Call[T]) -> T:
        try:
            r = await self._http.request(**_request(call))
        except httpx.TransportError as e:
            raise _no_answer(call, e) from e
        return call.answer(r.status_code, r.content)

    # --- jobs -------------------------------------------------------------------------------------

    async def enqueue(self, job_type: str, payload: Any = None, **options: Any) -> Job:
        return await self.send(calls.enqueue(_new_job(job_type, payload, options)))

    async def enqueue_unique(self, job_type: str, payload: Any, unique: Unique, **options: Any) -> tuple[Job, bool]:
        return await self.send(calls.enqueue_unique(_new_job(job_type, payload, {**options, "unique": unique})))

    async def enqueue_many(self, jobs: Iterable[NewJob]) -> list[Job]:
        return await self.send(calls.enqueue_many(jobs))

    async def get(self, job_id: int) -> Job:
        return await self.send(calls.get(job_id))

    async def list_jobs(
        self, status: str | None = None, *, queue: str | None = None, job_type: str | None = None, page: int = 1, per_page: int = 50
    ) -> JobPage:
        return await self.send(calls.list_jobs(status, queue, job_type, page, per_page))

    async def claim(self, queue: str | None = None, *, worker_id: str | None = None, lease_seconds: int | None = None) -> Job | None:
        return await self.send(calls.claim(queue, worker_id, lease_seconds))

    async def claim_many(self, limit: int, queue: str | None = None, *, worker_id: str | None = None, lease_seconds: int | None = None) -> list[Job]:
        return await self.send(calls.claim_many(limit, queue, worker_id, lease_seconds))

    async def complete(self, job: JobRef, result: Any = None, *, attempt: int | None = None) -> Job:
        job_id, attempt = _ref(job, attempt)
        return await self.send(calls.complete(job_id, result, attempt))

    async def complete_many(self, items: Sequence[Completion]) -> list[Job]:
        return await self.send(calls.complete_many(items))

    async def fail(self, job: JobRef, error: str, *, attempt: int | None = None, retry: bool = True, retry_in_seconds: int | None = None) -> Job:
        job_id, attempt = _ref(job, attempt)
        return await self.send(calls.fail(job_id, error, attempt, retry, retry_in_seconds))

    async def snooze(self, job: JobRef, seconds: int, *, attempt: int | None = None) -> Job:
        job_id, attempt = _ref(job, attempt)
        return await self.send(calls.snooze(job_id, seconds, attempt))

    async def run_now(self, job_id: int) -> Job:
        return await self.send(calls.run_now(job_id))

    async def heartbeat(self, job: JobRef, *, lease_seconds: int | None = None, attempt: int | None = None) -> Job:
        job_id, attempt = _ref(job, attempt)
        return await self.send(calls.heartbeat(job_id, lease_seconds, attempt))

    async def cancel(self, job_id: int, reason: str | None = None) -> Job:
        return await self.send(calls.cancel(job_id, reason))

    async def dead_letter(self, queue: str | None = None, *, page: int = 1, per_page: int = 50) -> JobPage:
        return await self.send(calls.dead_letter(queue, page, per_page))

    async def requeue(self, job_id: int) -> Job:
        return await self.send(calls.requeue(job_id))

    async def delete(self, job_id: int) -> None:
        return await self.send(calls.delete(job_id))

    async def history(self, limit: int = 100) -> list[HistoryEntry]:
        return await self.send(calls.history(limit))

    # --- queue control -------------------------------------------------------------------------------

    async def list_queues(self) -> list[QueueInfo]:
        return await self.send(calls.list_queues())

    async def pause_queue(self, queue: str) -> QueueInfo:
        return await self.send(calls.pause_queue(queue))

    async def resume_queue(self, queue: str) -> QueueInfo:
        return await self.send(calls.resume_queue(queue))

    async def set_queue_limits(self, queue: str, **limits: int | None) -> QueueInfo:
        return await self.send(calls.set_queue_limits(queue, **limits))

    async def retention(self) -> list[RetentionPolicy]:
        return await self.send(calls.retention())

    async def set_retention(self, status: str, *, max_age_seconds: int | None = None, max_count: int | None = None) -> RetentionPolicy:
        return await self.send(calls.set_retention(status, max_age_seconds, max_count))

    # --- dead-letter triage --------------------------------------------------------------------------

    async def dlq_groups(self, queue: str | None = None, *, job_type: str | None = None, limit: int = 50) -> list[DeadLetterGroup]:
        return await self.send(calls.dlq_groups(queue, job_type, limit))

    async def bulk_requeue(self, *, dry_run: bool = False, **where: Any) -> BulkResult:
        return await self.send(calls.bulk_requeue(dry_run, **where))

    async def bulk_delete(self, *, dry_run: bool = False, **where: Any) -> BulkResult:
        return await self.send(calls.bulk_delete(dry_run, **where))

    async def bulk_operation(self, op_id: int) -> BulkOperation:
        return await self.send(calls.bulk_operation(op_id))

    # --- recurring jobs ------------------------------------------------------------------------------

    async def list_recurring(self) -> list[Recurring]:
        return await self.send(calls.list_recurring())

    async def add_recurring(self, name: str, cron: str, job: dict[str, Any], *, timezone: str | None = None, enabled: bool | None = None,
                            catch_up: str | None = None, catch_up_limit: int | None = None) -> Recurring:  # fmt: skip
        return await self.send(calls.add_recurring(name, cron, job, timezone, enabled, catch_up, catch_up_limit))

    async def change_recurring(self, recurring_id: int, **changes: Any) -> Recurring:
        return await self.send(calls.change_recurring(recurring_id, **changes))

    async def enable_recurring(self, recurring_id: int) -> Recurring:
        return await self.send(calls.enable_recurring(recurring_id))

    async def disable_recurring(self, recurring_id: int) -> Recurring:
        return await self.send(calls.disable_recurring(recurring_id))

    async def run_recurring_now(self, recurring_id: int) -> Job:
        return await self.send(calls.run_recurring_now(recurring_id))

    async def delete_recurring(self, recurring_id: int) -> None:
        return await self.send(calls.delete_recurring(recurring_id))

    # --- roles and settings --------------------------------------------------------------------------

    async def add_admin(self, identity: str) -> None:
        await self.call("add_admin", identity)

    async def remove_admin(self, identity: str) -> None:
        await self.call("remove_admin", identity)

    async def grant_worker(self, identity: str) -> None:
        await self.call("grant_worker", identity)

    async def revoke_worker(self, identity: str) -> None:
        await self.call("revoke_worker", identity)

    async def set_history_cap(self, cap: int) -> None:
        await self.call("set_history_cap", cap)

    async def set_default_lease(self, seconds: int) -> None:
        await self.call("set_default_lease", seconds)

    # --- SpacetimeDB-style routes --------------------------------------------------------------------

    async def call(self, reducer: str, *args: Any) -> Any:
        return await self.send(calls.call_reducer(self.database, reducer, args))

    async def ping(self) -> None:
        await self.send(calls.ping())

    async def new_identity(self) -> IdentityToken:
        return await self.send(calls.new_identity())

    async def verify(self, identity: str) -> bool:
        return await self.send(calls.verify(identity))

    async def database_info(self) -> DatabaseInfo:
        return await self.send(calls.database_info(self.database))

    async def schema(self) -> dict[str, Any]:
        return await self.send(calls.schema(self.database))

    async def database_identity(self) -> str:
        return await self.send(calls.database_identity(self.database))

    async def sql(self, query: str) -> list[dict[str, Any]]:
        return await self.send(calls.sql(self.database, query))

    async def logs(self, num_lines: int | None = None) -> list[LogLine]:
        return await self.send(calls.logs(self.database, num_lines))

    async def openapi(self) -> dict[str, Any]:
        return await self.send(calls.openapi())

    async def metrics(self) -> str:
        return await self.send(calls.metrics())
