"""Every request the clients make, described once: method, path, body, query and how to decode
the answer. `Client` and `AsyncClient` only send these; a new route is one function here and one
line in each client."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import msgspec

from .errors import ClientError, error_for
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
)

T = TypeVar("T")

PREFIX = "/api:job-retry"
JOBS = PREFIX + "/jobs"


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    method: str
    path: str
    decode: Callable[[bytes], T]
    body: Any = None  # JSON-encoded when not None
    params: dict[str, Any] = field(default_factory=dict)
    answers: dict[int, Any] = field(default_factory=dict)  # statuses that mean a value, not an error
    raw: bytes | None = None  # a body sent as it is (the SQL text of /sql)

    def content(self) -> bytes | None:
        if self.raw is not None:
            return self.raw
        return None if self.body is None else _encoder.encode(self.body)

    def query(self) -> dict[str, Any]:
        return {k: v for k, v in self.params.items() if v is not None}

    def answer(self, status_code: int, content: bytes) -> T:
        """The decoded answer, or the error the server's status and message make."""
        if status_code in self.answers:
            return self.answers[status_code]  # type: ignore[no-any-return]
        if status_code >= 400:
            raise error_for(status_code, _message(content, status_code))
        try:
            return self.decode(content)
        except msgspec.DecodeError as e:
            raise ClientError(f"{self.method} {self.path}: the server's answer does not decode: {e}", status_code) from None


class _Error(msgspec.Struct):
    error: str


class _Claim(msgspec.Struct):
    claimed: bool
    job: Job | None = None


class _Jobs(msgspec.Struct):
    jobs: list[Job]


class _History(msgspec.Struct):
    items: list[HistoryEntry]


class _Logs(msgspec.Struct):
    lines: list[LogLine]


_encoder = msgspec.json.Encoder()
_error = msgspec.json.Decoder(_Error)


def _message(content: bytes, status_code: int) -> str:
    try:
        return _error.decode(content).error
    except msgspec.DecodeError:
        return content.decode("utf-8", "replace").strip()[:500] or f"HTTP {status_code}"


def _decoder(t: type[T]) -> Callable[[bytes], T]:
    return msgspec.json.Decoder(t).decode


_job = _decoder(Job)
_page = _decoder(JobPage)
_claim = _decoder(_Claim)
_jobs = _decoder(_Jobs)
_any = msgspec.json.decode


def _none(content: bytes) -> None:
    return None


def _options(**fields: Any) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if v is not None}


# --- seed 000's job routes and their batches --------------------------------------------------------


def enqueue(job: NewJob) -> Call[Job]:
    return Call("POST", JOBS, _job, job.body())


class _Duplicate(msgspec.Struct):
    duplicate: bool | None = None


_duplicate = _decoder(_Duplicate)


def enqueue_unique(job: NewJob) -> Call[tuple[Job, bool]]:
    """POST /jobs with a `unique` spec: the job, and whether it was already there."""
    return Call("POST", JOBS, lambda c: (_job(c), bool(_duplicate(c).duplicate)), job.body())


def enqueue_many(jobs: Iterable[NewJob]) -> Call[list[Job]]:
    return Call("POST", JOBS + "/enqueue_many", lambda c: _jobs(c).jobs, {"jobs": [j.body() for j in jobs]})


def get(job_id: int) -> Call[Job]:
    return Call("GET", f"{JOBS}/{job_id}", _job)


def list_jobs(status: str | None, queue: str | None, job_type: str | None, page: int, per_page: int) -> Call[JobPage]:
    return Call("GET", JOBS, _page, params={"status": status, "queue": queue, "job_type": job_type, "page": page, "per_page": per_page})


def claim(queue: str | None, worker_id: str | None, lease_seconds: int | None) -> Call[Job | None]:
    return Call("POST", JOBS + "/claim", lambda c: _claim(c).job, _options(queue=queue, worker_id=worker_id, lease_seconds=lease_seconds))


def claim_many(limit: int, queue: str | None, worker_id: str | None, lease_seconds: int | None) -> Call[list[Job]]:
    body = {"limit": limit, **_options(queue=queue, worker_id=worker_id, lease_seconds=lease_seconds)}
    return Call("POST", JOBS + "/claim_many", lambda c: _jobs(c).jobs, body)


def complete(job_id: int, result: Any, attempt: int | None) -> Call[Job]:
    return Call("POST", f"{JOBS}/{job_id}/complete", _job, {"result": result, **_options(attempt=attempt)})


def complete_many(items: Sequence[Completion]) -> Call[list[Job]]:
    return Call("POST", JOBS + "/complete_many", lambda c: _jobs(c).jobs, {"jobs": [msgspec.to_builtins(i) for i in items]})


def fail(job_id: int, error: str, attempt: int | None, retry: bool = True, retry_in_seconds: int | None = None) -> Call[Job]:
    body = {"error": error, **_options(attempt=attempt, retry_in_seconds=retry_in_seconds)}
    if not retry:
        body["retry"] = False
    return Call("POST", f"{JOBS}/{job_id}/fail", _job, body)


def snooze(job_id: int, seconds: int, attempt: int | None) -> Call[Job]:
    return Call("POST", f"{JOBS}/{job_id}/snooze", _job, {"seconds": seconds, **_options(attempt=attempt)})


def run_now(job_id: int) -> Call[Job]:
    return Call("POST", f"{JOBS}/{job_id}/run_now", _job, {})


def heartbeat(job_id: int, lease_seconds: int | None, attempt: int | None) -> Call[Job]:
    return Call("POST", f"{JOBS}/{job_id}/heartbeat", _job, _options(lease_seconds=lease_seconds, attempt=attempt))


def cancel(job_id: int, reason: str | None) -> Call[Job]:
    return Call("POST", f"{JOBS}/{job_id}/cancel", _job, _options(reason=reason))


def dead_letter(queue: str | None, page: int, per_page: int) -> Call[JobPage]:
    return Call("GET", PREFIX + "/dlq", _page, params={"queue": queue, "page": page, "per_page": per_page})


def requeue(job_id: int) -> Call[Job]:
    return Call("POST", f"{PREFIX}/dlq/{job_id}/requeue", _job, {})


def delete(job_id: int) -> Call[None]:
    return Call("DELETE", f"{PREFIX}/dlq/{job_id}", _none)


def history(limit: int) -> Call[list[HistoryEntry]]:
    return Call("GET", PREFIX + "/history", lambda c: msgspec.json.decode(c, type=_History).items, params={"limit": limit})


# --- queue control (admin) ---------------------------------------------------------------------------


class _Queues(msgspec.Struct):
    items: list[QueueInfo]


def _queue_path(queue: str, action: str) -> str:
    return f"{PREFIX}/queues/{quote(queue, safe='')}/{action}"


def list_queues() -> Call[list[QueueInfo]]:
    return Call("GET", PREFIX + "/queues", lambda c: msgspec.json.decode(c, type=_Queues).items)


def pause_queue(queue: str) -> Call[QueueInfo]:
    return Call("POST", _queue_path(queue, "pause"), _decoder(QueueInfo), {})


def resume_queue(queue: str) -> Call[QueueInfo]:
    return Call("POST", _queue_path(queue, "resume"), _decoder(QueueInfo), {})


def set_queue_limits(queue: str, **limits: int | None) -> Call[QueueInfo]:
    """concurrency, rate_limit, rate_period_seconds, partition_limit: all replaced at once."""
    return Call("POST", _queue_path(queue, "limits"), _decoder(QueueInfo), _options(**limits))


class _Retention(msgspec.Struct):
    items: list[RetentionPolicy]


def retention() -> Call[list[RetentionPolicy]]:
    return Call("GET", PREFIX + "/retention", lambda c: msgspec.json.decode(c, type=_Retention).items)


def set_retention(status: str, max_age_seconds: int | None, max_count: int | None) -> Call[RetentionPolicy]:
    """Both limits replaced at once; None: no such limit."""
    body = {"max_age_seconds": max_age_seconds, "max_count": max_count}
    return Call("POST", f"{PREFIX}/retention/{quote(status, safe='')}", _decoder(RetentionPolicy), body)


# --- dead-letter triage (admin) ----------------------------------------------------------------------


class _Groups(msgspec.Struct):
    groups: list[DeadLetterGroup]


def dlq_groups(queue: str | None, job_type: str | None, limit: int) -> Call[list[DeadLetterGroup]]:
    return Call("GET", PREFIX + "/dlq/groups", lambda c: msgspec.json.decode(c, type=_Groups).groups,
                params={"queue": queue, "job_type": job_type, "limit": limit})  # fmt: skip


def bulk_requeue(dry_run: bool, **where: Any) -> Call[BulkResult]:
    """`where`: group, job_type, queue, finished_after, finished_before (epoch ms), include_held."""
    return Call("POST", PREFIX + "/dlq/bulk_requeue", _decoder(BulkResult), {"dry_run": dry_run, **_options(**where)})


def bulk_delete(dry_run: bool, **where: Any) -> Call[BulkResult]:
    return Call("POST", PREFIX + "/dlq/bulk_delete", _decoder(BulkResult), {"dry_run": dry_run, **_options(**where)})


def bulk_operation(op_id: int) -> Call[BulkOperation]:
    return Call("GET", f"{PREFIX}/dlq/operations/{op_id}", _decoder(BulkOperation))


# --- recurring jobs (admin) --------------------------------------------------------------------------

RECURRING = PREFIX + "/recurring"


class _RecurringList(msgspec.Struct):
    items: list[Recurring]


def list_recurring() -> Call[list[Recurring]]:
    return Call("GET", RECURRING, lambda c: msgspec.json.decode(c, type=_RecurringList).items)


def add_recurring(name: str, cron: str, job: dict[str, Any], timezone: str | None, enabled: bool | None, catch_up: str | None,
                  catch_up_limit: int | None) -> Call[Recurring]:  # fmt: skip
    body = {"name": name, "cron": cron, "job": job, **_options(timezone=timezone, enabled=enabled, catch_up=catch_up, catch_up_limit=catch_up_limit)}
    return Call("POST", RECURRING, _decoder(Recurring), body)


def change_recurring(recurring_id: int, **changes: Any) -> Call[Recurring]:
    return Call("PATCH", f"{RECURRING}/{recurring_id}", _decoder(Recurring), _options(**changes))


def enable_recurring(recurring_id: int) -> Call[Recurring]:
    return Call("POST", f"{RECURRING}/{recurring_id}/enable", _decoder(Recurring), {})


def disable_recurring(recurring_id: int) -> Call[Recurring]:
    return Call("POST", f"{RECURRING}/{recurring_id}/disable", _decoder(Recurring), {})


def run_recurring_now(recurring_id: int) -> Call[Job]:
    return Call("POST", f"{RECURRING}/{recurring_id}/run_now", _job, {})


def delete_recurring(recurring_id: int) -> Call[None]:
    return Call("DELETE", f"{RECURRING}/{recurring_id}", _none)


# --- SpacetimeDB-style routes ----------------------------------------------------------------------


def ping() -> Call[None]:
    return Call("GET", "/v1/ping", _none)


def new_identity() -> Call[IdentityToken]:
    return Call("POST", "/v1/identity", _decoder(IdentityToken))


def verify(identity: str) -> Call[bool]:
    """True when the bearer token is `identity`'s (204); False when it is another's (400)."""
    return Call("GET", f"/v1/identity/{quote(identity, safe='')}/verify", lambda c: True, answers={400: False})


def _db(database: str) -> str:
    return "/v1/database/" + quote(database, safe="")


def database_info(database: str) -> Call[DatabaseInfo]:
    return Call("GET", _db(database), _decoder(DatabaseInfo))


def call_reducer(database: str, reducer: str, args: Sequence[Any]) -> Call[Any]:
    return Call("POST", f"{_db(database)}/call/{quote(reducer, safe='')}", _any, list(args))


def schema(database: str) -> Call[dict[str, Any]]:
    return Call("GET", _db(database) + "/schema", _decoder(dict[str, Any]))


def logs(database: str, num_lines: int | None) -> Call[list[LogLine]]:
    return Call("GET", _db(database) + "/logs", lambda c: msgspec.json.decode(c, type=_Logs).lines, params={"num_lines": num_lines})


def database_identity(database: str) -> Call[str]:
    return Call("GET", _db(database) + "/identity", lambda c: c.decode())


def sql(database: str, query: str) -> Call[list[dict[str, Any]]]:
    """SpacetimeDB's answer: one {schema, rows, total_duration_micros, stats} per statement."""
    return Call("POST", _db(database) + "/sql", _decoder(list[dict[str, Any]]), raw=query.encode())


def openapi() -> Call[dict[str, Any]]:
    return Call("GET", "/openapi.json", _decoder(dict[str, Any]))


def metrics() -> Call[str]:
    """Prometheus' text format (an admin's token; docs/metrics.md)."""
    return Call("GET", "/metrics", lambda c: c.decode("utf-8"))
