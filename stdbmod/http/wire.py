"""What travels over HTTP: request bodies, query strings and responses, as msgspec Structs.

The same types decode requests, encode responses and describe both in ``/openapi.json``.
Request bodies refuse unknown fields (a misspelt ``max_attempt`` is a 400, not a silently
ignored option); query strings ignore unknown parameters. Times in job JSON are integer
milliseconds since the Unix epoch (the seed's Xano timestamps); ``run_after`` also takes an
RFC 3339 string.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from ..retry import limits

Name = Annotated[str, Meta(min_length=1, max_length=limits.MAX_NAME_CHARS, pattern="^[^\\x00]*$")]
Text = Annotated[str, Meta(max_length=limits.MAX_REPORT_CHARS)]
EpochMillis = Annotated[int, Meta(ge=0, le=253_402_300_799_999, description="milliseconds since the Unix epoch")]
Seconds = Annotated[int, Meta(ge=1, le=limits.MAX_LEASE_SECONDS)]
FreeJson = Annotated[Any, Meta(description="any JSON; its integers must fit 64 bits (-2**63 to 2**64-1), what MessagePack stores: a larger one is a 400")]
Status = Literal["queued", "running", "completed", "dead"]
DeadReason = Literal["exhausted", "gave_up", "cancelled", "discarded"]

# --- job routes: request bodies ------------------------------------------------------------------


class UniqueBody(msgspec.Struct, forbid_unknown_fields=True):
    """The retry module's `UniqueSpec`: the job already enqueued with the same `fields` in one of
    `states` within the last `period_seconds` (null: ever) comes back instead of a new one."""

    fields: Annotated[
        list[Annotated[str, Meta(min_length=1, max_length=limits.MAX_NAME_CHARS + 8, description="job_type, queue, payload, partition_key or payload.NAME")]],
        Meta(min_length=1, max_length=8),
    ] = msgspec.field(default_factory=lambda: ["job_type", "queue", "payload"])
    period_seconds: Annotated[int, Meta(ge=1, le=limits.MAX_UNIQUE_PERIOD_SECONDS)] | None = None
    states: Annotated[list[Status], Meta(min_length=1, max_length=4)] | None = None


class EnqueueBody(msgspec.Struct, forbid_unknown_fields=True):
    """The retry module's `NewTask` as JSON: the same fields in the same order (a test holds
    them in step), with the limits' bounds, and `run_after` as epoch milliseconds or RFC 3339."""

    job_type: Name
    queue: Name | None = None
    payload: FreeJson = None
    max_attempts: Annotated[int, Meta(ge=1, le=limits.MAX_ATTEMPTS_LIMIT)] | None = None
    backoff_seconds: Annotated[int, Meta(ge=0, le=limits.MAX_BACKOFF_SECONDS)] | None = None
    run_after: EpochMillis | Annotated[str, Meta(max_length=64, description="RFC 3339 time", extra_json_schema={"format": "date-time"})] | None = None
    priority: Annotated[int, Meta(ge=-limits.PRIORITY_LIMIT, le=limits.PRIORITY_LIMIT)] = 0
    idempotency_key: Name | None = None
    max_backoff_seconds: Annotated[int, Meta(ge=0, le=limits.MAX_BACKOFF_SECONDS)] | None = None
    backoff_jitter: Annotated[float, Meta(ge=0.0, le=1.0)] = 0.0
    partition_key: Name | None = None
    timeout_seconds: Annotated[int, Meta(ge=1, le=limits.MAX_TIMEOUT_SECONDS, description="an attempt ends (timeout) this long after it starts")] | None = None
    unique: UniqueBody | None = None


class ClaimBody(msgspec.Struct, forbid_unknown_fields=True):
    queue: Name | None = None
    worker_id: Name | None = None
    lease_seconds: Seconds | None = None


_ATTEMPT = "the claim this report is for (the claimed job's `attempts`): fences a stale process that shares the identity"
Attempt = Annotated[int, Meta(ge=1, le=limits.MAX_ATTEMPTS_LIMIT, description=_ATTEMPT)]


class CompleteBody(msgspec.Struct, forbid_unknown_fields=True):
    result: FreeJson = None
    attempt: Attempt | None = None



class EnqueueManyBody(msgspec.Struct, forbid_unknown_fields=True):
    jobs: Annotated[list[EnqueueBody], Meta(min_length=1, max_length=limits.MAX_BATCH)]


class ClaimManyBody(msgspec.Struct, forbid_unknown_fields=True):
    limit: Annotated[int, Meta(ge=1, le=limits.MAX_BATCH)]
    queue: Name | None = None
    worker_id: Name | None = None
    lease_seconds: Seconds | None = None


class CompleteItem(msgspec.Struct, forbid_unknown_fields=True):
    id: Annotated[int, Meta(ge=0)]
    result: FreeJson = None
    attempt: Attempt | None = None


class CompleteManyBody(msgspec.Struct, forbid_unknown_fields=True):
    jobs: Annotated[list[CompleteItem], Meta(min_length=1, max_length=limits.MAX_BATCH)]


class FailBody(msgspec.Struct, forbid_unknown_fields=True):
    error: Text
    attempt: Attempt | None = None
    retry: bool = True  # false: dead at once (discarded)
    retry_in_seconds: Annotated[int, Meta(ge=0, le=limits.MAX_SNOOZE_SECONDS)] | None = None


class SnoozeBody(msgspec.Struct, forbid_unknown_fields=True):
    seconds: Annotated[int, Meta(ge=0, le=limits.MAX_SNOOZE_SECONDS)]
    attempt: Attempt | None = None


class HeartbeatBody(msgspec.Struct, forbid_unknown_fields=True):
    lease_seconds: Seconds | None = None
    attempt: Attempt | None = None


class CancelBody(msgspec.Struct, forbid_unknown_fields=True):
    reason: Text | None = None


class NoBody(msgspec.Struct, forbid_unknown_fields=True):
    pass


class QueueLimitsBody(msgspec.Struct, forbid_unknown_fields=True):
    """A queue's limits, all replaced at once (a field left out or null: no such limit)."""

    concurrency: Annotated[int, Meta(ge=1, le=limits.MAX_CONCURRENCY, description="at most this many running at once")] | None = None
    rate_limit: Annotated[int, Meta(ge=1, le=limits.MAX_RATE_LIMIT, description="at most this many claims per period")] | None = None
    rate_period_seconds: Annotated[int, Meta(ge=1, le=limits.MAX_RATE_PERIOD_SECONDS, description="the rate window (default 60)")] | None = None
    partition_limit: Annotated[int, Meta(ge=1, le=limits.MAX_RATE_LIMIT, description="at most this many claims per partition_key per period")] | None = None


# --- job routes: query strings -------------------------------------------------------------------

Page = Annotated[int, Meta(ge=1, le=limits.MAX_PAGE)]
PerPage = Annotated[int, Meta(ge=1, le=limits.MAX_PER_PAGE)]


class ListQuery(msgspec.Struct):
    status: Status | None = None
    queue: Name | None = None
    job_type: Name | None = None
    page: Page = 1
    per_page: PerPage = 50


class DlqQuery(msgspec.Struct):
    queue: Name | None = None
    page: Page = 1
    per_page: PerPage = 50


class HistoryQuery(msgspec.Struct):
    limit: Annotated[int, Meta(ge=1, le=limits.MAX_HISTORY_READ)] = 100


# --- job routes: responses -----------------------------------------------------------------------

Millis = int


class Job(msgspec.Struct):
    """A job as seed 000 shows it (its `jr_job` columns), then stdbmod's extra columns."""

    id: int
    created_at: Millis
    updated_at: Millis
    queue: str
    job_type: str
    payload: Any
    status: Status
    attempts: int
    max_attempts: int
    backoff_seconds: int
    run_after: Millis
    claimed_at: Millis | None
    claimed_by: str | None
    last_attempted_at: Millis | None
    last_error: str | None
    completed_at: Millis | None
    result: Any
    dead_reason: DeadReason | None
    priority: int
    lease_expires_at: Millis | None
    lease_holder: str | None
    idempotency_key: str | None
    finished_at: Millis | None
    snoozes: int
    max_backoff_seconds: int | None
    backoff_jitter: float
    error_fingerprint: str | None
    triage_hold: bool
    recurring_id: int | None


class EnqueuedJob(Job, omit_defaults=True):
    """The job an enqueue added, or, with `unique` in the body, the one that already existed:
    then `duplicate` says which."""

    duplicate: bool | None = None


class Claim(msgspec.Struct, omit_defaults=True):
    """``{"claimed": false}`` or ``{"claimed": true, "job": {...}}``."""

    claimed: bool
    job: Job | None = None


class Jobs(msgspec.Struct):
    """The jobs a batch route made, claimed or completed, in order."""

    jobs: list[Job]


class JobPage(msgspec.Struct):
    items: list[Job]
    page: int
    per_page: int
    total: int


class AttemptOut(msgspec.Struct):
    id: int
    task_id: int
    job_type: str
    attempt: int
    outcome: str
    error: str | None
    worker: str | None
    started_at: Millis | None
    finished_at: Millis | None


class History(msgspec.Struct):
    items: list[AttemptOut]


class RetentionBody(msgspec.Struct, forbid_unknown_fields=True):
    """How long finished jobs of one status are kept; a field left out or null: no such limit."""

    max_age_seconds: Annotated[int, Meta(ge=0, le=limits.MAX_RETENTION_SECONDS, description="pruned this long after they finished")] | None = None
    max_count: Annotated[int, Meta(ge=0, le=limits.MAX_RETENTION_COUNT, description="at most this many kept, the oldest pruned first")] | None = None


class RetentionOut(msgspec.Struct):
    status: Literal["completed", "dead"]
    max_age_seconds: int | None
    max_count: int | None


class Retention(msgspec.Struct):
    items: list[RetentionOut]


class QueueOut(msgspec.Struct):
    """A queue: its jobs per status (counted in the index), its controls, and how long its
    oldest ready job has waited (null: none is ready)."""

    queue: str
    counts: dict[str, int]
    paused: bool
    concurrency: int | None
    rate_limit: int | None
    rate_period_seconds: int
    partition_limit: int | None
    oldest_ready_age_seconds: float | None


class Queues(msgspec.Struct):
    items: list[QueueOut]


class Deleted(msgspec.Struct):
    deleted: bool
    id: int


# --- /v1 routes ----------------------------------------------------------------------------------


class IdentityToken(msgspec.Struct):
    identity: str
    token: str


class DatabaseInfo(msgspec.Struct):
    name: str
    database_identity: str
    owner_identity: str


class LogsQuery(msgspec.Struct):
    num_lines: Annotated[int, Meta(ge=1, le=10_000)] | None = None
    follow: Annotated[bool, Meta(description="keep the response open and stream new lines as they are written")] = False


class LogLineOut(msgspec.Struct):
    offset: int
    timestamp: Annotated[int, Meta(description="microseconds since the Unix epoch")]
    level: str
    reducer: str
    message: str


class Logs(msgspec.Struct):
    lines: list[LogLineOut]


class Error(msgspec.Struct, omit_defaults=True):
    error: str
    code: str | None = None  # which 409 a worker got: stale_lease, cancelled (the task), timeout (the attempt)


# --- recurring jobs (cron) -----------------------------------------------------------------------

CatchUp = Literal["skip", "one", "each"]
CronText = Annotated[str, Meta(min_length=1, max_length=200, description="five cron fields, or @hourly, @daily, @weekly, @monthly, @yearly")]
ZoneName = Annotated[str, Meta(min_length=1, max_length=200, description="an IANA time zone, e.g. UTC or Europe/Paris")]
CatchUpLimit = Annotated[int, Meta(ge=1, le=limits.MAX_BATCH)]


class RecurringJob(msgspec.Struct, forbid_unknown_fields=True):
    """The job a recurring entry enqueues: an enqueue body without run_after and idempotency_key
    (each firing sets them)."""

    job_type: Name
    queue: Name | None = None
    payload: FreeJson = None
    max_attempts: Annotated[int, Meta(ge=1, le=limits.MAX_ATTEMPTS_LIMIT)] | None = None
    backoff_seconds: Annotated[int, Meta(ge=0, le=limits.MAX_BACKOFF_SECONDS)] | None = None
    priority: Annotated[int, Meta(ge=-limits.PRIORITY_LIMIT, le=limits.PRIORITY_LIMIT)] = 0
    max_backoff_seconds: Annotated[int, Meta(ge=0, le=limits.MAX_BACKOFF_SECONDS)] | None = None
    backoff_jitter: Annotated[float, Meta(ge=0.0, le=1.0)] = 0.0


class RecurringBody(msgspec.Struct, forbid_unknown_fields=True):
    name: Name
    cron: CronText
    job: RecurringJob
    timezone: ZoneName = "UTC"
    enabled: bool = True
    catch_up: CatchUp = "skip"
    catch_up_limit: CatchUpLimit = 10


class RecurringChangeBody(msgspec.Struct, forbid_unknown_fields=True):
    """The fields to change; absent ones stay."""

    name: Name | None = None
    cron: CronText | None = None
    timezone: ZoneName | None = None
    job: RecurringJob | None = None
    catch_up: CatchUp | None = None
    catch_up_limit: CatchUpLimit | None = None


class RecurringOut(msgspec.Struct):
    id: int
    name: str
    cron: str
    timezone: str
    job: dict[str, Any]
    enabled: bool
    catch_up: CatchUp
    catch_up_limit: int
    last_fired: Millis
    next_fire: Millis | None
    created_at: Millis
    updated_at: Millis


class RecurringList(msgspec.Struct):
    items: list[RecurringOut]


# --- dead-letter triage --------------------------------------------------------------------------


class GroupsQuery(msgspec.Struct):
    queue: Name | None = None
    job_type: Name | None = None
    limit: Annotated[int, Meta(ge=1, le=200)] = 50


class GroupOut(msgspec.Struct):
    fingerprint: str
    count: int
    held: int
    first_seen: Millis
    last_seen: Millis
    job_types: list[str]
    queues: list[str]
    shape: str
    sample_error: str


class Groups(msgspec.Struct):
    groups: list[GroupOut]


class BulkBody(msgspec.Struct, forbid_unknown_fields=True):
    """Which dead jobs: all the given conditions (none: every dead job)."""

    group: Annotated[str, Meta(min_length=1, max_length=limits.MAX_NAME_CHARS, description="a group's fingerprint")] | None = None
    job_type: Name | None = None
    queue: Name | None = None
    finished_after: EpochMillis | None = None
    finished_before: EpochMillis | None = None
    include_held: bool = False
    dry_run: bool = False


class BulkOp(msgspec.Struct):
    id: int
    action: Literal["requeue", "delete"]
    processed: int
    batches: int
    done: bool
    started_at: Millis
    finished_at: Millis | None


class BulkOut(msgspec.Struct, omit_defaults=True):
    """A dry run answers `count` and `sample`; a real one the operation (`done` false: later
    batches follow, GET /dlq/operations/{id})."""

    dry_run: bool
    count: int | None = None
    sample: list[Job] | None = None
    operation: BulkOp | None = None
