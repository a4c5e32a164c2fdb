"""What the server answers and what the client sends, as msgspec Structs.

The client's own view of the wire (it never imports the server's types): the fields are the
server's, checked against `/openapi.json` by the tests. Decoding ignores fields it does not know
and keeps statuses as plain strings, so a newer server does not break an older client. Times are
integer milliseconds since the Unix epoch, as the job routes send them.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import msgspec

Millis = int
UNSET: Any = msgspec.UNSET


class Job(msgspec.Struct, frozen=True):
    """A job as the server shows it: seed 000's `jr_job` columns, then stdbmod's.

    `status` is "queued", "running", "completed" or "dead"; `dead_reason` is "exhausted",
    "gave_up", "cancelled" or "discarded" for a dead job; `finished_at` is when it became
    completed or dead. `attempts` counts the claims so far: a claimed job's
    `attempts` is the attempt the worker holds (what it sends to fence its reports)."""

    id: int
    created_at: Millis
    updated_at: Millis
    queue: str
    job_type: str
    payload: Any
    status: str
    attempts: int
    max_attempts: int
    backoff_seconds: int
    run_after: Millis
    claimed_at: Millis | None = None
    claimed_by: str | None = None
    last_attempted_at: Millis | None = None
    last_error: str | None = None
    completed_at: Millis | None = None
    result: Any = None
    dead_reason: str | None = None
    priority: int = 0
    lease_expires_at: Millis | None = None
    lease_holder: str | None = None
    idempotency_key: str | None = None
    finished_at: Millis | None = None
    snoozes: int = 0
    max_backoff_seconds: int | None = None
    backoff_jitter: float = 0.0
    error_fingerprint: str | None = None
    triage_hold: bool = False
    recurring_id: int | None = None


class JobPage(msgspec.Struct, frozen=True):
    """One page of a list, newest first; `total` counts every match."""

    items: list[Job]
    page: int
    per_page: int
    total: int


class HistoryEntry(msgspec.Struct, frozen=True):
    """One attempt of the history. `outcome`: "completed", "failed", "gave_up", "lease_expired",
    "discarded", "timeout", "snoozed" or "cancelled"."""

    id: int
    task_id: int
    job_type: str
    attempt: int
    outcome: str
    error: str | None = None
    worker: str | None = None
    started_at: Millis | None = None
    finished_at: Millis | None = None


class IdentityToken(msgspec.Struct, frozen=True):
    """A freshly minted identity (hex) and its bearer token."""

    identity: str
    token: str


class DatabaseInfo(msgspec.Struct, frozen=True):
    name: str
    database_identity: str
    owner_identity: str


class LogLine(msgspec.Struct, frozen=True):
    offset: int
    timestamp: int  # microseconds since the Unix epoch (the /v1 routes' unit)
    level: str
    reducer: str
    message: str


RunAfter = dt.datetime | int | str
"""When a job becomes claimable: an aware datetime, epoch milliseconds, or an RFC 3339 string."""


class Unique(msgspec.Struct, omit_defaults=True, frozen=True):
    """Enqueue only if no job with the same `fields` (job_type, queue, payload, partition_key or
    payload.NAME) is in one of `states` enqueued within the last `period_seconds` (None: ever);
    else the one there comes back, `duplicate` set (docs/retry.md, "Unique jobs")."""

    fields: tuple[str, ...] = ("job_type", "queue", "payload")
    period_seconds: int | None = None
    states: tuple[str, ...] | None = None


class NewJob(msgspec.Struct, omit_defaults=True, frozen=True):
    """One job to enqueue: what `POST /jobs` takes. Unset options take the server's defaults
    (queue "default", 5 attempts, 30 s backoff, due now, priority 0)."""

    job_type: str
    payload: Any = None
    queue: str | None = None
    max_attempts: int | None = None
    backoff_seconds: int | None = None
    run_after: RunAfter | None = None
    priority: int | None = None
    idempotency_key: str | None = None
    max_backoff_seconds: int | None = None  # a cap on the backoff delay
    backoff_jitter: float | None = None  # 0 to 1: the delay drawn from [d * (1 - jitter), d]
    partition_key: str | None = None  # what a queue's per-partition rate limit counts by (a customer id...)
    timeout_seconds: int | None = None  # an attempt ends (outcome timeout) this long after it starts
    unique: Unique | None = None  # only POST /jobs takes it (not enqueue_many)

    def body(self) -> dict[str, Any]:
        out: dict[str, Any] = msgspec.to_builtins(self)
        if isinstance(self.run_after, dt.datetime):
            out["run_after"] = epoch_millis(self.run_after)
        return out


def epoch_millis(when: dt.datetime) -> int:
    if when.tzinfo is None:
        raise ValueError(f"run_after must be an aware datetime (with a time zone), got {when!r}")
    return int(when.timestamp() * 1000)


class Completion(msgspec.Struct, omit_defaults=True, frozen=True):
    """One item of `complete_many`: the job, its result, and the attempt it is for (fencing)."""

    id: int
    result: Any = None
    attempt: int | None = None


class Recurring(msgspec.Struct, frozen=True):
    """A recurring job (docs/cron.md): `cron` in `timezone` enqueues `job` at each instant;
    `catch_up` ("skip", "one", "each") says what a firing does with instants missed while the
    server was down. Times in epoch milliseconds."""

    id: int
    name: str
    cron: str
    timezone: str
    job: dict[str, Any]
    enabled: bool
    catch_up: str
    catch_up_limit: int
    last_fired: Millis
    next_fire: Millis | None = None
    created_at: Millis = 0
    updated_at: Millis = 0


class DeadLetterGroup(msgspec.Struct, frozen=True):
    """Dead jobs sharing an error fingerprint (docs/operations.md, "Dead-letter triage")."""

    fingerprint: str
    count: int
    held: int
    first_seen: Millis
    last_seen: Millis
    job_types: list[str]
    queues: list[str]
    shape: str
    sample_error: str


class BulkOperation(msgspec.Struct, frozen=True):
    """A bulk requeue or delete and its progress; `done` false: later batches follow."""

    id: int
    action: str
    processed: int
    batches: int
    done: bool
    started_at: Millis
    finished_at: Millis | None = None


class BulkResult(msgspec.Struct, frozen=True):
    """A dry run's `count` and `sample`, or the started `operation`."""

    dry_run: bool
    count: int | None = None
    sample: list[Job] | None = None
    operation: BulkOperation | None = None


class QueueInfo(msgspec.Struct, frozen=True):
    """A queue: its jobs per status, its controls (paused, limits), and how long its oldest ready
    job has waited (None: none is ready)."""

    queue: str
    counts: dict[str, int]
    paused: bool
    concurrency: int | None = None
    rate_limit: int | None = None
    rate_period_seconds: int = 60
    partition_limit: int | None = None
    oldest_ready_age_seconds: float | None = None


class RetentionPolicy(msgspec.Struct, frozen=True):
    """How long finished jobs of one status (`completed` or `dead`) are kept: pruned
    `max_age_seconds` after they finished, and past `max_count` the oldest first (None: no such
    limit)."""

    status: str
    max_age_seconds: int | None = None
    max_count: int | None = None

