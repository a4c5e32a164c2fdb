"""Dead-letter triage over HTTP (admin): the groups, bulk requeue and delete by filter with a dry
run, and a bulk operation's progress (retry/triage.py, docs/operations.md)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from ..retry.triage import BulkAction, TriageFilter, TriageOp, dlq_groups, get_op, preview
from ..types import Timestamp
from . import inputs, render, wire
from .context import ServerContext
from .errors import HttpError
from .render import json_response
from .routing import Endpoint

PREFIX = "/api:job-retry/dlq"
MAX_ID = 2**63 - 1


def _ms(value: int | None) -> Timestamp | None:
    return None if value is None else Timestamp(value * 1000)


def op_out(op: TriageOp) -> wire.BulkOp:
    return wire.BulkOp(
        id=op.id,
        action=op.action.value,
        processed=op.processed,
        batches=op.batches,
        done=op.done,
        started_at=op.started_at.micros // 1000,
        finished_at=render.millis(op.finished_at),
    )


async def groups(ctx: ServerContext, request: Request) -> Response:
    caller = ctx.caller(request)
    q = inputs.query(request, wire.GroupsQuery)
    found = await run_in_threadpool(lambda: dlq_groups(ctx.db, caller, queue=q.queue, job_type=q.job_type, limit=q.limit))
    return json_response(
        wire.Groups(
            groups=[
                wire.GroupOut(
                    g.fingerprint, g.count, g.held, g.first_seen.micros // 1000, g.last_seen.micros // 1000, g.job_types, g.queues, g.shape,
                    g.sample_error,
                )
                for g in found
            ]
        )
    )


def _bulk(action: BulkAction) -> Callable[[ServerContext, Request], Awaitable[Response]]:
    async def handle(ctx: ServerContext, request: Request) -> Response:
        caller = ctx.caller(request)
        b = await inputs.body(request, wire.BulkBody, ctx.body_limit)
        where = TriageFilter(b.group, b.job_type, b.queue, _ms(b.finished_after), _ms(b.finished_before), b.include_held)
        if b.dry_run:  # a read: nothing changes
            p = await run_in_threadpool(preview, ctx.db, caller, where)
            return json_response(wire.BulkOut(dry_run=True, count=p.count, sample=[render.job(t) for t in p.sample]))
        op = await ctx.call(ctx.db, "bulk_dlq", action, where, sender=caller)
        return json_response(wire.BulkOut(dry_run=False, operation=op_out(op)))

    handle.__name__ = f"bulk_{action.value}"
    return handle


async def operation(ctx: ServerContext, request: Request) -> Response:
    caller = ctx.caller(request)
    op_id: int = request.path_params["op_id"]
    if op_id > MAX_ID:
        raise HttpError(404, f"no bulk operation with id {op_id}")
    return json_response(op_out(await run_in_threadpool(get_op, ctx.db, caller, op_id)))


_DESC = ("Which dead jobs: all the given conditions (none: every dead job); held jobs (dead again with the fingerprint a bulk requeue sent "
         "them back under) only with include_held. dry_run: the count and the first 10, nothing changed. Otherwise the first batch "
         "runs now and the rest in later transactions of at most 500 jobs each.")  # fmt: skip

ENDPOINTS = [
    Endpoint("GET", PREFIX + "/groups", groups, "The dead-letter tier grouped by error fingerprint, largest first (admin)", "triage", "admin",
             response=wire.Groups, query=wire.GroupsQuery, errors=(400, 403)),
    Endpoint("POST", PREFIX + "/bulk_requeue", _bulk(BulkAction.REQUEUE), "Requeue the dead jobs a filter takes, or dry-run it (admin)",
             "triage", "admin", response=wire.BulkOut, body=wire.BulkBody, errors=(400, 403, 413), description=_DESC),
    Endpoint("POST", PREFIX + "/bulk_delete", _bulk(BulkAction.DELETE), "Delete the dead jobs a filter takes, or dry-run it (admin)",
             "triage", "admin", response=wire.BulkOut, body=wire.BulkBody, errors=(400, 403, 413), description=_DESC),
    Endpoint("GET", PREFIX + "/operations/{op_id:id}", operation, "A bulk operation's progress (admin)", "triage", "admin",
             response=wire.BulkOp, errors=(403, 404)),
]
