"""Recurring jobs over HTTP (admin): list, add, change, enable, disable, delete and run now, over
the retry module's recurring reducers (retry/recurring.py, docs/cron.md)."""

from __future__ import annotations

from typing import Any

import msgspec
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from ..retry import NewTask
from ..retry.recurring import CatchUp, Recurring, RecurringSpec, list_recurring
from . import inputs, render, wire
from .context import ServerContext
from .errors import HttpError
from .render import json_response
from .routing import Endpoint

PREFIX = "/api:job-retry/recurring"
MAX_ID = 2**63 - 1


def _id(request: Request) -> int:
    rid: int = request.path_params["recurring_id"]
    if rid > MAX_ID:
        raise HttpError(404, f"no recurring entry with id {rid}")
    return rid


def _job(j: wire.RecurringJob) -> NewTask:
    return NewTask(**msgspec.structs.asdict(j))


def out(r: Recurring) -> wire.RecurringOut:
    job = {k: v for k, v in msgspec.to_builtins(r.job).items() if k not in ("run_after", "idempotency_key")}
    return wire.RecurringOut(
        id=r.id,
        name=r.name,
        cron=r.cron,
        timezone=r.timezone,
        job=job,
        enabled=r.enabled,
        catch_up=r.catch_up.value,
        catch_up_limit=r.catch_up_limit,
        last_fired=r.last_fired.micros // 1000,
        next_fire=render.millis(r.next_fire),
        created_at=r.created_at.micros // 1000,
        updated_at=r.updated_at.micros // 1000,
    )


async def _write(ctx: ServerContext, request: Request, reducer: str, *args: Any) -> Any:
    return await ctx.call(ctx.db, reducer, *args, sender=ctx.caller(request))


async def list_(ctx: ServerContext, request: Request) -> Response:
    caller = ctx.caller(request)
    rows = await run_in_threadpool(list_recurring, ctx.db, caller)
    return json_response(wire.RecurringList(items=[out(r) for r in rows]))


async def add(ctx: ServerContext, request: Request) -> Response:
    b = await inputs.body(request, wire.RecurringBody, ctx.body_limit)
    spec = RecurringSpec(b.name, b.cron, _job(b.job), b.timezone, b.enabled, CatchUp(b.catch_up), b.catch_up_limit)
    return json_response(out(await _write(ctx, request, "add_recurring", spec)))


async def change(ctx: ServerContext, request: Request) -> Response:
    rid = _id(request)
    b = await inputs.body(request, wire.RecurringChangeBody, ctx.body_limit)
    job = None if b.job is None else _job(b.job)
    catch_up = None if b.catch_up is None else CatchUp(b.catch_up)
    row = await _write(ctx, request, "change_recurring", rid, b.name, b.cron, b.timezone, job, catch_up, b.catch_up_limit)
    return json_response(out(row))


async def _no_body(ctx: ServerContext, request: Request) -> None:
    """These routes take no fields: a body, if sent, must be `{}`, as their schema (NoBody) and
    the job routes say. The caller is authenticated first: a bad token is a 401 whatever the body."""
    ctx.caller(request)
    await inputs.body(request, wire.NoBody, ctx.body_limit)


async def enable(ctx: ServerContext, request: Request) -> Response:
    await _no_body(ctx, request)
    return json_response(out(await _write(ctx, request, "enable_recurring", _id(request))))


async def disable(ctx: ServerContext, request: Request) -> Response:
    await _no_body(ctx, request)
    return json_response(out(await _write(ctx, request, "disable_recurring", _id(request))))


async def run_now(ctx: ServerContext, request: Request) -> Response:
    await _no_body(ctx, request)
    return json_response(render.job(await _write(ctx, request, "run_recurring_now", _id(request))))


async def delete(ctx: ServerContext, request: Request) -> Response:
    rid = _id(request)
    await _write(ctx, request, "delete_recurring", rid)
    return json_response(wire.Deleted(deleted=True, id=rid))


_R = PREFIX + "/{recurring_id:id}"
_ERR = (400, 403, 404, 413)

ENDPOINTS = [
    Endpoint("GET", PREFIX, list_, "List the recurring jobs (admin)", "recurring", "admin", response=wire.RecurringList, errors=(403,)),
    Endpoint("POST", PREFIX, add, "Add a recurring job: a cron expression, a time zone, the job to enqueue (admin)", "recurring", "admin",
             response=wire.RecurringOut, body=wire.RecurringBody, body_required=True, errors=(400, 403, 413)),
    Endpoint("PATCH", _R, change, "Change a recurring job's fields (admin)", "recurring", "admin",
             response=wire.RecurringOut, body=wire.RecurringChangeBody, body_required=True, errors=_ERR),
    Endpoint("POST", _R + "/enable", enable, "Enable a recurring job, counting from now (admin)", "recurring", "admin",
             response=wire.RecurringOut, body=wire.NoBody, errors=_ERR),
    Endpoint("POST", _R + "/disable", disable, "Disable a recurring job (admin)", "recurring", "admin",
             response=wire.RecurringOut, body=wire.NoBody, errors=_ERR),
    Endpoint("POST", _R + "/run_now", run_now, "Enqueue a recurring job's job once now, outside its schedule (admin)", "recurring", "admin",
             response=wire.Job, body=wire.NoBody, errors=_ERR),
    Endpoint("DELETE", _R, delete, "Delete a recurring job; the jobs it enqueued stay (admin)", "recurring", "admin",
             response=wire.Deleted, errors=(403, 404)),
]
