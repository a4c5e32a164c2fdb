"""Dead-letter triage: the dead tasks grouped by error fingerprint, and bulk requeue or delete by
filter, run in bounded batches (docs/operations.md, "Dead-letter triage").

A task entering the dead-letter tier gets the fingerprint of its error (transitions.died,
fingerprint.py). `dlq_groups` reads the groups in one walk of the `status` index over the dead
tasks, in one snapshot. A bulk action is an operation row (`triage_op`): the reducer that starts it does the
first batch, and a `triage_batch` schedule row does each next one, each its own transaction of at
most TRIAGE_BATCH tasks (and TRIAGE_SCAN index entries read), so a hundred thousand dead tasks
never make one long writer transaction. The walk goes by task id from a cursor, and only takes
tasks that died before the operation started: a task requeued by it that dies again is never
taken twice by it.

No loop across operations either: a task a bulk requeue sent back keeps its fingerprint while it
is live; if it dies again with the same one it is held (`triage_hold`) and bulk actions pass it by
unless they say `include_held`, or an admin requeues it alone (which clears the mark).
`preview` (the dry run) is a read: it changes nothing.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

import msgspec

from ..errors import SenderError
from ..module import Module
from ..runtime import Database, Range, ReducerContext
from ..schema import PrimaryKey, Unique
from ..types import At, Identity, ScheduleAt, Timestamp
from . import transitions
from .errors import InvalidArgument, NotAuthorized
from .fingerprint import error_shape
from .limits import check_int, check_name
from .roles import is_admin, require_admin
from .tables import Task, TaskStatus
from .transitions import Handlers

TRIAGE_BATCH = 500  # tasks one transaction of a bulk action changes at most
TRIAGE_SCAN = 5_000  # index entries one transaction reads at most (the tasks that do not match count too)
PREVIEW_SAMPLE = 10
MAX_GROUPS = 200
SAMPLE_CHARS = 500


class BulkAction(str, enum.Enum):
    REQUEUE = "requeue"
    DELETE = "delete"


class TriageFilter(msgspec.Struct, forbid_unknown_fields=True):
    """Which dead tasks a bulk action takes: all of the given conditions (none given: every dead
    task). `finished_after` / `finished_before` bound when they died (inclusive). Held tasks
    (died again after a bulk requeue, same fingerprint) are left out unless `include_held`."""

    fingerprint: str | None = None
    job_type: str | None = None
    queue: str | None = None
    finished_after: Timestamp | None = None
    finished_before: Timestamp | None = None
    include_held: bool = False


class TriageOp(msgspec.Struct):
    """One bulk action and its progress."""

    id: Annotated[int, PrimaryKey(auto_inc=True)]
    action: BulkAction
    filter: TriageFilter
    started_at: Timestamp  # tasks that died after this are never taken
    started_by: Identity
    cursor: int  # the highest task id examined
    processed: int  # tasks requeued or deleted so far
    batches: int  # transactions so far
    done: bool
    finished_at: Timestamp | None = None


class TriageBatch(msgspec.Struct):
    """Fires the next batch of operation `op_id`."""

    scheduled_id: Annotated[int, PrimaryKey(auto_inc=True)]
    scheduled_at: ScheduleAt
    op_id: Annotated[int, Unique()]


class Group(msgspec.Struct):
    """One dead-letter group: the dead tasks sharing an error fingerprint."""

    fingerprint: str
    count: int
    held: int  # of them, held (died again after a bulk requeue)
    first_seen: Timestamp  # the earliest death in the group
    last_seen: Timestamp
    job_types: list[str]
    queues: list[str]
    shape: str  # the normalized error the fingerprint hashes
    sample_error: str  # the newest death's error, cut at SAMPLE_CHARS


class Preview(msgspec.Struct):
    """A dry run: how many dead tasks the filter takes now, and the first of them."""

    count: int
    sample: list[Task]


def declare_triage_tables(mod: Module) -> None:
    mod.table(TriageOp)
    mod.table(TriageBatch, scheduled="triage_batch")


def checked(f: TriageFilter) -> TriageFilter:
    for what in ("fingerprint", "job_type", "queue"):
        value = getattr(f, what)
        if value is not None:
            check_name(what, value)
    for what in ("finished_after", "finished_before"):
        if getattr(f, what) is not None and not isinstance(getattr(f, what), Timestamp):
            raise InvalidArgument(f"{what} must be a Timestamp")
    if f.finished_after is not None and f.finished_before is not None and f.finished_after > f.finished_before:
        raise InvalidArgument("finished_after is later than finished_before")
    return f


def matches(t: Task, f: TriageFilter, died_by: Timestamp | None) -> bool:
    if t.status is not TaskStatus.DEAD or (t.triage_hold and not f.include_held):
        return False
    if f.fingerprint is not None and t.error_fingerprint != f.fingerprint:
        return False
    if (f.job_type is not None and t.job_type != f.job_type) or (f.queue is not None and t.queue != f.queue):
        return False
    died = t.finished_at or t.updated_at
    if f.finished_after is not None and died < f.finished_after:
        return False
    if f.finished_before is not None and died > f.finished_before:
        return False
    return died_by is None or died <= died_by


def _walk(tables: Any, f: TriageFilter, after_id: int) -> Iterator[Task]:
    """Tasks with id > after_id, by id: one fingerprint's from its index (live tasks a bulk requeue
    sent back keep theirs: `matches` passes them by), else every dead one."""
    ids = Range(after_id, lo_inclusive=False)
    if f.fingerprint is not None:
        return iter(tables.task.error_fingerprint.filter((f.fingerprint, ids)))
    return iter(tables.task.status.filter((TaskStatus.DEAD, ids)))


# --- reads ---------------------------------------------------------------------------------------


@contextmanager
def _admin_tables(db: Database, caller: Identity, what: str) -> Iterator[Any]:
    """The tables of one read snapshot, once the caller is found an admin in it."""
    with db.read() as view:
        if not is_admin(view.db, caller):
            raise NotAuthorized(f"{what}: only an admin may read this ({caller} is not one)")
        yield view.db


def dlq_groups(db: Database, caller: Identity, *, queue: str | None = None, job_type: str | None = None, limit: int = 50) -> list[Group]:
    """The dead-letter groups, largest first (then the latest death first), from one snapshot:
    one walk of the `status` index over the dead tasks, by id (admin)."""
    check_int("limit", limit, 1, MAX_GROUPS)
    groups: dict[str, Group] = {}
    with _admin_tables(db, caller, "dlq_groups") as tables:
        for t in tables.task.status.filter(TaskStatus.DEAD):
            if (queue is not None and t.queue != queue) or (job_type is not None and t.job_type != job_type):
                continue
            fp = t.error_fingerprint or ""
            died = t.finished_at or t.updated_at
            g = groups.get(fp)
            if g is None:
                groups[fp] = Group(fp, 0, 0, died, died, [], [], error_shape(t.last_error), "")
                g = groups[fp]
            g.count += 1
            g.held += t.triage_hold
            if t.job_type not in g.job_types:
                g.job_types.append(t.job_type)
            if t.queue not in g.queues:
                g.queues.append(t.queue)
            g.first_seen = min(g.first_seen, died)
            if died >= g.last_seen or not g.sample_error:
                g.last_seen = max(g.last_seen, died)
                g.sample_error = (t.last_error or "")[:SAMPLE_CHARS]
    for g in groups.values():
        g.job_types.sort()
        g.queues.sort()
    return sorted(groups.values(), key=lambda g: (-g.count, -g.last_seen.micros, g.fingerprint))[:limit]


def preview(db: Database, caller: Identity, f: TriageFilter) -> Preview:
    """The dry run of a bulk action: the count of the dead tasks `f` takes now and the first
    PREVIEW_SAMPLE of them, by id. A read: nothing changes (admin)."""
    checked(f)
    count, sample = 0, list[Task]()
    with _admin_tables(db, caller, "preview") as tables:
        for t in _walk(tables, f, 0):
            if matches(t, f, None):
                count += 1
                if len(sample) < PREVIEW_SAMPLE:
                    sample.append(t)
    return Preview(count, sample)


class TriageOpNotFound(SenderError, LookupError):
    status_code = 404

    def __init__(self, op_id: int) -> None:
        super().__init__(f"no bulk operation with id {op_id}")


def get_op(db: Database, caller: Identity, op_id: int) -> TriageOp:
    with _admin_tables(db, caller, "triage operation") as tables:
        op: TriageOp | None = tables.triage_op.id.find(op_id)
    if op is None:
        raise TriageOpNotFound(op_id)
    return op


# --- the bulk action, a batch at a time ---------------------------------------------------------


def run_batch(ctx: ReducerContext, handlers: Handlers, op: TriageOp) -> TriageOp:
    """One transaction's share: from the cursor, at most TRIAGE_SCAN entries read and
    TRIAGE_BATCH tasks acted on; then the next batch is armed, or the operation is done."""
    f = op.filter
    scanned = acted = 0
    cursor = op.cursor
    exhausted = True
    for t in _walk(ctx.db, f, op.cursor):
        if scanned >= TRIAGE_SCAN or acted >= TRIAGE_BATCH:
            exhausted = False
            break
        scanned += 1
        cursor = t.id
        if not matches(t, f, op.started_at):
            continue
        if op.action is BulkAction.REQUEUE:
            transitions.requeue(ctx, handlers, t, bulk=True)
        else:
            transitions.delete(ctx, t)
        acted += 1
    now = ctx.timestamp
    after = msgspec.structs.replace(op, cursor=cursor, processed=op.processed + acted, batches=op.batches + 1, done=exhausted)
    if exhausted:
        after = msgspec.structs.replace(after, finished_at=now)
        ctx.db.triage_batch.op_id.delete(op.id)
    else:
        ctx.db.triage_batch.op_id.delete(op.id)
        ctx.db.triage_batch.insert(TriageBatch(0, At(now), op.id))
    ctx.db.triage_op.id.update(after)
    return after


def start(ctx: ReducerContext, handlers: Handlers, action: BulkAction, f: TriageFilter) -> TriageOp:
    op: TriageOp = ctx.db.triage_op.insert(TriageOp(0, action, checked(f), ctx.timestamp, ctx.sender, 0, 0, 0, False))
    return run_batch(ctx, handlers, op)


def declare_triage_reducers(mod: Module, handlers: Handlers) -> None:
    @mod.reducer
    def bulk_dlq(ctx: ReducerContext, action: BulkAction, where: TriageFilter) -> TriageOp:
        """Requeue or delete the dead tasks `where` takes (admin), TRIAGE_BATCH a transaction:
        this call does the first batch, a schedule row each next one. The dry run is
        `triage.preview`, a read."""
        require_admin(ctx, "bulk_dlq")
        return start(ctx, handlers, action, where)

    @mod.reducer
    def triage_batch(ctx: ReducerContext, timer: TriageBatch) -> None:
        """Scheduled: the next batch of a bulk operation."""
        ctx.require_scheduler()
        ctx.db.triage_batch.scheduled_id.delete(timer.scheduled_id)
        op: TriageOp | None = ctx.db.triage_op.id.find(timer.op_id)
        if op is not None and not op.done:
            run_batch(ctx, handlers, op)
