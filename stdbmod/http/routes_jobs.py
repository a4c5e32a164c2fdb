"""Seed 000's job API (prefix ``/api:job-retry``) over the task-retry module, and its extensions
(heartbeat, cancel, delete from the dead-letter tier, history).

Writes are reducer calls (`ServerContext.call`: the writer, group commit); reads use
`stdbmod.retry.queries`, short read transactions that never wait for the writer. The roles are
checked by the module itself, inside the transaction; this layer only authenticates. A task to
add travels as the module's `NewTask` from the body to the reducer. An error a reducer or a read
raises answers with its own status (the app's one mapping, errors.py).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from ..retry import Completion, NewTask, TaskStatus, UniqueSpec, limits, queries
from ..types import Identity, Timestamp
from . import inputs, render, wire
from .context import ServerContext
from .errors import HttpError
from .render import json_response
from .routing import JOB_ID, Endpoint

PREFIX = "/api:job-retry"
MAX_ID = 2**63 - 1


def _job_id(request: Request) -> int:
    job_id: int = request.path_params["job_id"]
    if job_id > MAX_ID:
        raise HttpError(404, f"no such job: {job_id}")
    return job_id


# Milliseconds below this are a time in 1970, which nobody schedules; read as seconds they are
# a time in 1970-2969: the client sent seconds (Unix time) where the seed takes milliseconds.
SECONDS_LIKE_BELOW = 365 * 86_400 * 1000


def _run_after(value: int | str | None) -> Timestamp | None:
    """Epoch milliseconds (Xano's timestamps) or an RFC 3339 string (Timestamp.parse: RFC 3339
    only, in years 1 to 9999). 0 is the epoch in either unit (ready at once); any other time in
    1970 is refused as plausibly seconds."""
    if value is None:
        return None
    if isinstance(value, int):
        if 0 < value < SECONDS_LIKE_BELOW:
            raise HttpError(
                400,
                f"invalid run_after: {value} milliseconds since the epoch is {Timestamp(value * 1000).isoformat()}, in 1970; "
                f"it looks like seconds ({Timestamp(value * 1_000_000).isoformat()}): send milliseconds ({value * 1000})",
            )
        return Timestamp(value * 1000)  # EpochMillis bounds it to years 1970 to 9999
    try:
        return Timestamp.parse(value)
    except ValueError as e:
        raise HttpError(400, f"invalid run_after: {e}") from None


def _new_task(b: wire.EnqueueBody) -> NewTask:
    fields = msgspec.structs.asdict(b)
    fields["run_after"] = _run_after(b.run_after)
    if b.unique is not None:
        u = b.unique
        fields["unique"] = UniqueSpec(u.fields, u.period_seconds, None if u.states is None else [TaskStatus(s) for s in u.states])
    return NewTask(**fields)


async def _write(ctx: ServerContext, reducer: str, *args: Any, sender: Identity) -> Any:
    """Call `reducer` with `args` as they are: a route's wire body holds the reducer's parameters,
    field for field, with its types (tests/http/test_arguments.py holds every route's body in step
    with its reducer); the body's decoding was their one check of type and bounds, and the runtime
    takes them typed (`ServerContext.call_typed`) instead of checking them again."""
    return await ctx.call_typed(ctx.db, reducer, args, sender=sender)


# --- seed 000 -------------------------------------------------------------------------------------


async def enqueue(ctx: ServerContext, request: Request) -> Response:
    caller = ctx.caller(request)
    b = await inputs.body(request, wire.EnqueueBody, ctx.body_limit)
    if b.unique is None:  # seed 000's enqueue, the reducer its commit-log readers expect
        return json_response(render.job(await _write(ctx, "enqueue", _new_task(b), sender=caller)))
    added = await _write(ctx, "enqueue_unique", _new_task(b), sender=caller)
    job = render.job(added.task)
    return json_response(wire.EnqueuedJob(**msgspec.structs.asdict(job), duplicate=added.duplicate))


async def list_jobs(ctx: ServerContext, request: Request) -> Response:
    caller = ctx.caller(request)
    q = inputs.query(request, wire.ListQuery)
    page = await run_in_threadpool(
        queries.list_tasks, ctx.db, caller, status=q.status, queue=q.queue, job_type=q.job_type, page=q.page, per_page=q.per_page
    )
    return json_response(render.page(page))


async def get_job(ctx: ServerContext, request: Request) -> Response:
    caller = ctx.caller(request)
    task = await run_in_threadpool(queries.get_task, ctx.db, caller, _job_id(request))
    return json_response(render.job(task))


async def claim(ctx: ServerContext, request: Request) -> Response:
    caller = ctx.caller(request)
    b = await inputs.body(request, wire.ClaimBody, ctx.body_limit)
    task = await _write(ctx, "claim", b.queue, b.worker_id, b.lease_seconds, sender=caller)
    return json_response(wire.Claim(claimed=False) if task is None else wire.Claim(claimed=True, job=render.job(task)))


# --- batches (the retry module's batch reducers; one transaction each) ------------------------------


async def enqueue_many(ctx: ServerContext, request: Request) -> Response:
    caller = ctx.caller(request)
    b = await inputs.body(request, wire.EnqueueManyBody, ctx.body_limit)
    tasks = await _write(ctx, "enqueue_many", [_new_task(j) for j in b.jobs], sender=caller)
    return await render.jobs_response(tasks)


async def claim_many(ctx: ServerContext, request: Request) -> Response:
    caller = ctx.caller(request)
    b = await inputs.body(request, wire.ClaimManyBody, ctx.body_limit)
    tasks = await _write(ctx, "claim_many", b.limit, b.queue, b.worker_id, b.lease_seconds, sender=caller)
    return await render.jobs_response(tasks)


async def complete_many(ctx: ServerContext, request: Request) -> Response:
    caller = ctx.caller(request)
    b = await inputs.body(request, wire.CompleteManyBody, ctx.body_limit)
    if any(j.id > MAX_ID for j in b.jobs):
        raise HttpError(404, f"no such job: {max(j.id for j in b.jobs)}")
    tasks = await _write(ctx, "complete_many", [Completion(j.id, j.result, j.attempt) for j in b.jobs], sender=caller)
    return await render.jobs_response(tasks)


def _job_action(reducer: str, body_type: Any, *fields: str) -> Callable[[ServerContext, Request], Awaitable[Response]]:
    """A route that calls `reducer(job_id, *body fields)` as the caller and answers the job."""

    async def handle(ctx: ServerContext, request: Request) -> Response:
        caller = ctx.caller(request)
        job_id = _job_id(request)
        b = await inputs.body(request, body_type, ctx.body_limit)
        args = [getattr(b, f) for f in fields]
        return json_response(render.job(await _write(ctx, reducer, job_id, *args, sender=caller)))

    handle.__name__ = reducer
    return handle


complete = _job_action("complete", wire.CompleteBody, "result", "attempt")
fail = _job_action("fail", wire.FailBody, "error", "attempt", "retry", "retry_in_seconds")


async def dead_letter(ctx: ServerContext, request: Request) -> Response:
    caller = ctx.caller(request)
    q = inputs.query(request, wire.DlqQuery)
    page = await run_in_threadpool(queries.dead_letter, ctx.db, caller, queue=q.queue, page=q.page, per_page=q.per_page)
    return json_response(render.page(page))


requeue = _job_action("requeue", wire.NoBody)


# --- beyond the seed ------------------------------------------------------------------------------


heartbeat = _job_action("heartbeat", wire.HeartbeatBody, "lease_seconds", "attempt")
cancel = _job_action("cancel", wire.CancelBody, "reason")
snooze = _job_action("snooze", wire.SnoozeBody, "seconds", "attempt")
run_now = _job_action("run_now", wire.NoBody)


async def delete_dead(ctx: ServerContext, request: Request) -> Response:
    caller = ctx.caller(request)
    job_id = _job_id(request)
    await _write(ctx, "delete_task", job_id, sender=caller)
    return json_response(wire.Deleted(deleted=True, id=job_id))


async def history(ctx: ServerContext, request: Request) -> Response:
    caller = ctx.caller(request)
    q = inputs.query(request, wire.HistoryQuery)
    rows = await run_in_threadpool(queries.history, ctx.db, caller, limit=q.limit)
    return json_response(wire.History(items=[render.attempt(r) for r in rows]))


# --- queue control (issue 16) ---------------------------------------------------------------------


def _queue(request: Request) -> str:
    queue: str = request.path_params["queue"]
    if not queue or len(queue) > limits.MAX_NAME_CHARS or "\x00" in queue:
        raise HttpError(400, f"queue must be 1 to {limits.MAX_NAME_CHARS} characters, without NUL")
    return queue


def _queue_out(info: queries.QueueInfo) -> wire.QueueOut:
    return wire.QueueOut(**msgspec.structs.asdict(info))


async def list_queues(ctx: ServerContext, request: Request) -> Response:
    caller = ctx.caller(request)
    infos = await run_in_threadpool(queries.queue_list, ctx.db, caller)
    return json_response(wire.Queues([_queue_out(i) for i in infos]))


def _queue_action(reducer: str, body_type: Any, *fields: str) -> Callable[[ServerContext, Request], Awaitable[Response]]:
    """A route that calls `reducer(queue, *body fields)` as the caller and answers the queue."""

    async def handle(ctx: ServerContext, request: Request) -> Response:
        caller = ctx.caller(request)
        queue = _queue(request)
        b = await inputs.body(request, body_type, ctx.body_limit)
        await _write(ctx, reducer, queue, *[getattr(b, f) for f in fields], sender=caller)
        return json_response(_queue_out(await run_in_threadpool(queries.queue_info, ctx.db, caller, queue)))

    handle.__name__ = reducer
    return handle


pause_queue = _queue_action("pause_queue", wire.NoBody)
resume_queue = _queue_action("resume_queue", wire.NoBody)
set_queue_limits = _queue_action("set_queue_limits", wire.QueueLimitsBody, "concurrency", "rate_limit", "rate_period_seconds", "partition_limit")


# --- retention (issue 16) --------------------------------------------------------------------------


def _retention_out(p: Any) -> wire.RetentionOut:
    return wire.RetentionOut(p.status.value, p.max_age_seconds, p.max_count)


async def get_retention(ctx: ServerContext, request: Request) -> Response:
    caller = ctx.caller(request)
    policies = await run_in_threadpool(queries.retention, ctx.db, caller)
    return json_response(wire.Retention([_retention_out(p) for p in policies]))


async def set_retention(ctx: ServerContext, request: Request) -> Response:
    caller = ctx.caller(request)
    status = request.path_params["status"]
    if status not in ("completed", "dead"):
        raise HttpError(404, f"no retention for status {status!r}: completed or dead")
    b = await inputs.body(request, wire.RetentionBody, ctx.body_limit)
    return json_response(_retention_out(await _write(ctx, "set_retention", status, b.max_age_seconds, b.max_count, sender=caller)))


_J = PREFIX + "/jobs"
_ID = _J + "/" + JOB_ID
_Q = PREFIX + "/queues/{queue}"
_WORKER = (400, 403, 404, 409, 413)

ENDPOINTS = [
    Endpoint("POST", _J, enqueue, "Enqueue a job (with `unique`: or get the one already there, and `duplicate` says so)", "jobs", "worker",
             response=wire.EnqueuedJob, body=wire.EnqueueBody, body_required=True, errors=(400, 403, 409, 413)),
    Endpoint("GET", _J, list_jobs, "List jobs, filtered and paginated (admin)", "jobs", "admin",
             response=wire.JobPage, query=wire.ListQuery, errors=(400, 403)),
    Endpoint("POST", _J + "/claim", claim, "Claim the next ready job (atomic queued -> running, with a lease)", "jobs", "worker",
             response=wire.Claim, body=wire.ClaimBody, errors=(400, 403, 413)),
    Endpoint("POST", _J + "/enqueue_many", enqueue_many, "Enqueue several jobs in one transaction, all or none", "jobs", "worker",
             response=wire.Jobs, body=wire.EnqueueManyBody, body_required=True, errors=(400, 403, 409, 413)),
    Endpoint("POST", _J + "/claim_many", claim_many, "Claim up to `limit` ready jobs, each with its own lease", "jobs", "worker",
             response=wire.Jobs, body=wire.ClaimManyBody, body_required=True, errors=(400, 403, 413)),
    Endpoint("POST", _J + "/complete_many", complete_many, "Report success for several jobs the caller holds, all or none", "jobs", "worker",
             response=wire.Jobs, body=wire.CompleteManyBody, body_required=True, errors=_WORKER),
    Endpoint("GET", _ID, get_job, "One job (admin or worker)", "jobs", "worker", response=wire.Job, errors=(403, 404)),
    Endpoint("POST", _ID + "/complete", complete, "Report success (lease holder only)", "jobs", "worker",
             response=wire.Job, body=wire.CompleteBody, errors=_WORKER),
    Endpoint("POST", _ID + "/fail", fail, "Report a failure: retried after backoff or retry_in_seconds; dead if exhausted or retry is false", "jobs", "worker",
             response=wire.Job, body=wire.FailBody, body_required=True, errors=_WORKER),
    Endpoint("POST", _ID + "/snooze", snooze, "Give the job back to run in `seconds`, without spending the attempt (lease holder only)", "jobs", "worker",
             response=wire.Job, body=wire.SnoozeBody, body_required=True, errors=_WORKER),
    Endpoint("POST", _ID + "/run_now", run_now, "Make a queued (scheduled or backing-off) job due now (admin)", "jobs", "admin",
             response=wire.Job, body=wire.NoBody, errors=_WORKER),
    Endpoint("POST", _ID + "/heartbeat", heartbeat, "Extend the lease (lease holder only)", "jobs", "worker",
             response=wire.Job, body=wire.HeartbeatBody, errors=_WORKER),
    Endpoint("POST", _ID + "/cancel", cancel, "Cancel a queued or running job (a running one's worker is refused from then on) (admin)", "jobs", "admin",
             response=wire.Job, body=wire.CancelBody, errors=_WORKER),
    Endpoint("GET", PREFIX + "/dlq", dead_letter, "List the dead-letter tier (admin)", "jobs", "admin",
             response=wire.JobPage, query=wire.DlqQuery, errors=(400, 403)),
    Endpoint("POST", PREFIX + "/dlq/" + JOB_ID + "/requeue", requeue, "Requeue a dead job, attempts reset (admin)", "jobs", "admin",
             response=wire.Job, body=wire.NoBody, errors=_WORKER),
    Endpoint("DELETE", PREFIX + "/dlq/" + JOB_ID, delete_dead, "Delete a dead job (admin)", "jobs", "admin", response=wire.Deleted, errors=(403, 404, 409)),
    Endpoint("GET", PREFIX + "/queues", list_queues, "Every queue: jobs per status, paused, limits, the oldest ready job's age (admin)", "queues",
             "admin", response=wire.Queues, errors=(403,)),
    Endpoint("POST", _Q + "/pause", pause_queue, "Pause a queue: claims get nothing, in-module attempts wait, enqueues land (admin)", "queues",
             "admin", response=wire.QueueOut, body=wire.NoBody, errors=(400, 403, 413)),
    Endpoint("POST", _Q + "/resume", resume_queue, "Resume a paused queue (admin)", "queues", "admin",
             response=wire.QueueOut, body=wire.NoBody, errors=(400, 403, 413)),
    Endpoint("POST", _Q + "/limits", set_queue_limits, "Set a queue's concurrency and rate limits, checked inside every claim (admin)", "queues",
             "admin", response=wire.QueueOut, body=wire.QueueLimitsBody, errors=(400, 403, 413)),
    Endpoint("GET", PREFIX + "/retention", get_retention, "How long completed and dead jobs are kept (admin)", "queues", "admin",
             response=wire.Retention, errors=(403,)),
    Endpoint("POST", PREFIX + "/retention/{status}", set_retention, "Set how long completed or dead jobs are kept; pruning follows (admin)",
             "queues", "admin", response=wire.RetentionOut, body=wire.RetentionBody, errors=(400, 403, 404, 413)),
    Endpoint("GET", PREFIX + "/history", history, "The attempt history, newest first (admin)", "jobs", "admin",
             response=wire.History, query=wire.HistoryQuery, errors=(400, 403)),
]
