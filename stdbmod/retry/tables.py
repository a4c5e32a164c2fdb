"""The retry module's rows, and the Structs its reducers take (`NewTask`, `Completion`, `Limits`).
`declare_tables` adds the tables to a fresh `Module`. Every Struct of the module is declared here,
never beside the logic that uses it: that logic is compiled (stdbmod/_mypyc.py), and a compiled
module may not declare a msgspec Struct.

One `task` table holds every task, whoever runs it (an in-module handler or an external worker):
one state machine for both seeds. Two schedule tables carry the timers: `attempt_timer` (the next
in-module attempt, at `run_after`) and `lease_sweep` (one row: the reaper, due at the earliest
lease end). `lease_timer` is the per-claim reaper of databases made before the sweep; nothing
writes it any more, and its rows left there still fire.
"""

from __future__ import annotations

import enum
from typing import Annotated, Any

import msgspec

from ..module import Module
from ..schema import Index, PrimaryKey, Unique
from ..types import Identity, ScheduleAt, Timestamp


class TaskStatus(str, enum.Enum):
    QUEUED = "queued"
    RUNNING = "running"
    COMPLETED = "completed"
    DEAD = "dead"


class DeadReason(str, enum.Enum):
    # members are only ever appended (a compatible schema change: runtime/schema_check.py)
    EXHAUSTED = "exhausted"
    GAVE_UP = "gave_up"
    CANCELLED = "cancelled"  # by an admin, whether it was queued or running
    DISCARDED = "discarded"  # a worker's fail with retry false


class Outcome(str, enum.Enum):
    """How one attempt ended (the task's resulting status is on the task)."""

    COMPLETED = "completed"
    FAILED = "failed"
    GAVE_UP = "gave_up"
    LEASE_EXPIRED = "lease_expired"
    DISCARDED = "discarded"  # a worker's fail with retry false
    TIMEOUT = "timeout"  # the attempt ran past its timeout_seconds
    SNOOZED = "snoozed"  # given back, to run later (the attempt does not count)
    CANCELLED = "cancelled"  # an admin cancelled the running task


# Claim walks these indexes: status and in_module first (only queued tasks for external workers),
# then queue, then priority (negated, so the btree's ascending order is highest first), then
# run_after. Inside one priority the first row is the oldest due one; if it is in the future the
# whole priority is, and the walk jumps to the next priority.
# by_claim_queue holds every status (the queue controls count a queue's running tasks in it, the
# metrics every status per queue); by_claim serves the claim alone, which walks queued tasks
# only: it is partial, so a claim deletes its entry and a completion does not touch it.
TASK_INDEXES: dict[str, tuple[str, ...] | Index] = {
    "by_claim_queue": ("status", "in_module", "queue", "neg_priority", "run_after"),
    "by_claim": Index(("status", "in_module", "neg_priority", "run_after"), only=(TaskStatus.QUEUED,)),
    # When a task ended, or its lease ends: retention walks a finished status oldest finished
    # first (finished_at is set only there), the lease sweep walks running tasks by lease end
    # (finished_at is None while live, and only a running task holds a lease). One index for
    # both, so a claim and a completion rewrite one entry for them, not two. Partial: nothing
    # walks it for queued tasks, so an enqueue writes no entry and a claim deletes none.
    "by_end": Index(("status", "finished_at", "lease_expires_at"), only=(TaskStatus.RUNNING, TaskStatus.COMPLETED, TaskStatus.DEAD)),
}
# Indexes are only those some query walks (docs/architecture.md, "Decisions changed"): each costs
# every enqueue an entry, and each led by `status` costs every claim and completion a rewrite.
# Seed 000's "status, queue, run_after, created_at desc": `status` and `queue` alone, run_after
# inside the claim indexes (the only walk that orders by it), created_at (the dashboard's time
# walk) with "desc" as the primary key's order. The dead-letter groups walk `error_fingerprint`
# (set when a task dies), not (status, error_fingerprint), so a claim or completion leaves it;
# the lease sweep walks by_end, not an index of its own.
# idempotency_key, unique_key and error_fingerprint are None on most tasks, and every walk of
# them asks for a value (an enqueue's key, a fingerprint): their indexes are sparse, so a task
# without one writes no entry there (an enqueue three fewer). Databases made before are rebuilt
# on open (runtime/migrate.py).


class Task(msgspec.Struct):
    id: Annotated[int, PrimaryKey(auto_inc=True)]
    created_at: Annotated[Timestamp, Index()]
    updated_at: Timestamp
    queue: Annotated[str, Index()]
    job_type: Annotated[str, Index()]
    payload: Any
    status: Annotated[TaskStatus, Index()]
    dead_reason: DeadReason | None
    attempts: int  # attempts started: the N-th claim or handler run makes it N
    max_attempts: int
    backoff_seconds: int
    priority: int  # higher runs first
    neg_priority: int  # -priority, for the claim indexes
    in_module: bool  # queued for an in-module handler (claim skips it), not for workers
    run_after: Timestamp  # walked inside the claim indexes, never alone
    claimed_at: Timestamp | None = None
    claimed_by: str | None = None  # the last claim's worker_id (kept after it ends, for audit)
    lease_holder: Identity | None = None  # the identity whose lease is current (running only)
    lease_expires_at: Timestamp | None = None  # the sweep walks it, in by_end (None: no lease)
    last_attempted_at: Timestamp | None = None
    last_error: str | None = None
    completed_at: Timestamp | None = None
    result: Any = None
    idempotency_key: Annotated[str | None, Index(sparse=True)] = None
    # appended columns (old rows decode with the defaults); docs/retry.md, "The state machine"
    finished_at: Timestamp | None = None  # when it became completed or dead (None while live)
    timeout_seconds: int | None = None  # an attempt may not run past last_attempted_at + this
    partition_key: str | None = None  # rate limits per partition (a customer id...)
    unique_key: Annotated[str | None, Index(sparse=True)] = None  # unique jobs over a window
    snoozes: int = 0  # snoozes so far (bounded)
    max_backoff_seconds: int | None = None  # a cap on the computed delay
    backoff_jitter: float = 0.0  # a fraction of the delay, drawn from ctx.rng
    error_fingerprint: Annotated[str | None, Index(sparse=True)] = None  # set when the task dies: the dead-letter groups
    triage_hold: bool = False  # died again with the fingerprint it was bulk-requeued under
    recurring_id: int | None = None  # the recurring entry that enqueued it


class Attempt(msgspec.Struct):
    """One row per finished attempt, across all job types; the newest have the highest ids."""

    id: Annotated[int, PrimaryKey(auto_inc=True)]
    task_id: Annotated[int, Index()]
    job_type: str
    attempt: int
    outcome: Outcome
    error: str | None
    worker: str  # the claim's worker_id, or "handler"
    started_at: Timestamp
    finished_at: Timestamp


class RetryAdmin(msgspec.Struct, frozen=True):
    identity: Annotated[Identity, PrimaryKey()]
    added_at: Timestamp
    added_by: Identity


class RetryWorker(msgspec.Struct, frozen=True):
    identity: Annotated[Identity, PrimaryKey()]
    granted_at: Timestamp
    granted_by: Identity


class RetrySettings(msgspec.Struct, frozen=True):
    id: Annotated[int, PrimaryKey()]  # always 0: one row
    history_cap: int
    default_lease_seconds: int


class AttemptTimer(msgspec.Struct):
    """Fires the next in-module attempt of `task_id`."""

    scheduled_id: Annotated[int, PrimaryKey(auto_inc=True)]
    scheduled_at: ScheduleAt
    task_id: Annotated[int, Unique()]


class LeaseSweep(msgspec.Struct, frozen=True):
    """The reaper's one timer, due no later than the earliest lease end. A claim (or a heartbeat
    shortening a lease) moves it earlier; a heartbeat moving that lease later, or a complete,
    leaves it, so it may fire to find nothing expired and re-arm at the next lease end."""

    scheduled_id: Annotated[int, PrimaryKey()]  # always 0: one row
    scheduled_at: ScheduleAt


class LeaseTimer(msgspec.Struct):
    """Legacy: the per-claim reaper of databases made before `LeaseSweep`. Never written now; a
    row left there fires at its time and reaps the claim only if its lease has really ended."""

    scheduled_id: Annotated[int, PrimaryKey(auto_inc=True)]
    scheduled_at: ScheduleAt
    task_id: Annotated[int, Unique()]
    attempt: int


# --- what the reducers take ------------------------------------------------------------------------


class UniqueSpec(msgspec.Struct, forbid_unknown_fields=True):
    """Unique jobs over a window (issue 16): an enqueue returns the task that already has the
    same key (`fields`' values) in one of `states`, created within the last `period_seconds`
    (None: any age), instead of adding one. unique.py checks and applies it."""

    fields: list[str] = msgspec.field(default_factory=lambda: ["job_type", "queue", "payload"])
    period_seconds: int | None = None
    states: list[TaskStatus] | None = None  # None: queued, running, completed


class Enqueued(msgspec.Struct):
    """What `enqueue_unique` answers: the task, and whether it already existed."""

    task: Task
    duplicate: bool


class NewTask(msgspec.Struct, forbid_unknown_fields=True):
    """A task to add: the enqueue options, spelled here once. `enqueue` and `submit` take these
    fields as their arguments (in this order, with these defaults), `enqueue_many` a list of
    them, `enqueue_in` them as keywords; the HTTP routes build one from the request body. None
    means the default (limits.py): queue "default", 5 attempts, 30 s backoff, due now."""

    job_type: str
    queue: str | None = None
    payload: Any = None
    max_attempts: int | None = None
    backoff_seconds: int | None = None
    run_after: Timestamp | None = None
    priority: int = 0
    idempotency_key: str | None = None
    # appended (issue 17): backoff options; None / 0.0 keep seed 000's formula exactly
    max_backoff_seconds: int | None = None
    backoff_jitter: float = 0.0
    # issue 16 (docs/retry.md, "The shape"): rate limits per partition, a bound on each attempt
    partition_key: str | None = None
    timeout_seconds: int | None = None
    unique: UniqueSpec | None = None


class Completion(msgspec.Struct, forbid_unknown_fields=True):
    """One task of `complete_many`: `complete`'s arguments."""

    task_id: int
    result: Any = None
    attempt: int | None = None


# --- queue control (queues.py) ---------------------------------------------------------------------


class RetryQueue(msgspec.Struct, frozen=True):
    """A queue's controls. None: no such limit."""

    queue: Annotated[str, PrimaryKey()]
    paused: bool = False
    concurrency: int | None = None  # at most this many running at once
    rate_limit: int | None = None  # at most this many claims per rate_period_seconds
    rate_period_seconds: int = 60
    partition_limit: int | None = None  # at most this many claims per partition_key per period
    updated_at: Timestamp | None = None


class ClaimMark(msgspec.Struct):
    """One claim of a rate-limited queue, kept while it is inside the rate window."""

    id: Annotated[int, PrimaryKey(auto_inc=True)]
    queue: str
    partition_key: str | None
    at: Timestamp


MARK_INDEXES: dict[str, tuple[str, ...] | Index] = {"by_queue": ("queue", "at"), "by_partition": ("queue", "partition_key", "at")}


class Limits(msgspec.Struct, forbid_unknown_fields=True):
    """What `set_queue_limits` takes (every field None: no limit)."""

    concurrency: int | None = None
    rate_limit: int | None = None
    rate_period_seconds: int | None = None
    partition_limit: int | None = None


# --- retention (retention.py) -----------------------------------------------------------------------


class RetryRetention(msgspec.Struct, frozen=True):
    """How long finished tasks of one status are kept (None: no such limit)."""

    status: Annotated[TaskStatus, PrimaryKey()]
    max_age_seconds: int | None
    max_count: int | None
    updated_at: Timestamp | None = None


class RetentionSweep(msgspec.Struct, frozen=True):
    """The pruner's one timer (always id 0)."""

    scheduled_id: Annotated[int, PrimaryKey()]
    scheduled_at: ScheduleAt


def declare_tables(mod: Module) -> None:
    mod.table(Task, indexes=TASK_INDEXES)
    mod.table(Attempt)
    # roles and settings: read by nearly every call (roles.py, settings_of), rarely written;
    # their rows are frozen, so a find between their writes decodes nothing (TableDef.shares_rows)
    mod.table(RetryAdmin, cached=True)
    mod.table(RetryWorker, cached=True)
    mod.table(RetrySettings, cached=True)
    mod.table(AttemptTimer, scheduled="run_attempt")
    # every claim reads the sweep's time (arm_sweep); it is written only when a lease ends
    # earlier than it, or when it fires: cached, like the roles
    mod.table(LeaseSweep, scheduled="sweep_leases", cached=True)
    mod.table(LeaseTimer, scheduled="reap_lease")
    # every claim reads its queue's controls by key, admins write them rarely (queues.py)
    mod.table(RetryQueue, cached=True)
    mod.table(ClaimMark, indexes=MARK_INDEXES)
    # Every finish reads both by key (its status's policy, the sweep's time) and rarely writes
    # either (an admin's set_retention; the sweep moved earlier, or firing): cached, so a finish
    # under an unchanged policy reads neither from the storage (docs/modules.md).
    mod.table(RetryRetention, cached=True)
    mod.table(RetentionSweep, scheduled="prune_finished", cached=True)


DEFAULT_HISTORY_CAP = 1000
DEFAULT_LEASE_SECONDS = 300
