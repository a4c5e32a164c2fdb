"""SpacetimeDB-style routes: identities, reducer calls, schema, logs, ping."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import msgspec
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from ..errors import ReducerFailed, SenderError
from ..runtime import Database, LogLine
from ..types import Identity
from . import inputs, wire
from .context import ServerContext
from .errors import HttpError
from .render import json_response
from .routing import Endpoint
from .subscribe import sql_answer


async def ping(ctx: ServerContext, request: Request) -> Response:
    ctx.optional_caller(request)
    return Response(status_code=200)


async def new_identity(ctx: ServerContext, request: Request) -> Response:
    ctx.optional_caller(request)
    identity, token = ctx.key.mint(expires_in=ctx.token_ttl)
    return json_response(wire.IdentityToken(identity=identity.to_hex(), token=token))


async def verify_identity(ctx: ServerContext, request: Request) -> Response:
    caller = ctx.caller(request)
    try:
        wanted = Identity.from_hex(request.path_params["identity"])
    except ValueError as e:
        raise HttpError(400, f"not an identity: {e}") from None
    if caller != wanted:
        raise HttpError(400, "the token belongs to another identity")
    return Response(status_code=204)


async def database_info(ctx: ServerContext, request: Request) -> Response:
    ctx.caller(request)
    db = ctx.database(request.path_params["db"])
    return json_response(wire.DatabaseInfo(name=db.name, database_identity=db.identity.to_hex(), owner_identity=db.owner.to_hex()))


async def call_reducer(ctx: ServerContext, request: Request) -> Response:
    caller = ctx.caller(request)
    db = ctx.database(request.path_params["db"])
    name = request.path_params["reducer"]
    db.reducer(name, caller)  # before reading the body: 404 unknown (or private to the owner), 400 lifecycle
    raw = await inputs.read_body(request, ctx.body_limit)
    try:
        result = await ctx.call_json(db, name, raw or b"[]", sender=caller)
    except (SenderError, ReducerFailed) as e:  # SpacetimeDB's 530, whatever status they carry elsewhere
        raise HttpError(530, str(e)) from None
    return json_response(result)


async def schema(ctx: ServerContext, request: Request) -> Response:
    ctx.caller(request)
    db = ctx.database(request.path_params["db"])
    described: dict[str, Any] = {
        "name": db.name,
        "database_identity": db.identity.to_hex(),
        "owner_identity": db.owner.to_hex(),
        **db.describe(),
    }
    return json_response(described)


async def logs(ctx: ServerContext, request: Request) -> Response:
    caller = ctx.caller(request)
    db = ctx.database(request.path_params["db"])
    if caller != db.owner:
        raise HttpError(403, "only the database's owner may read its logs")
    q = inputs.query(request, wire.LogsQuery)
    if q.follow:
        return StreamingResponse(follow_logs(ctx, db, q.num_lines), media_type="application/x-ndjson")
    lines = await run_in_threadpool(db.logs, q.num_lines)
    return json_response(wire.Logs(lines=[_line_out(line) for line in lines]))


def _line_out(line: LogLine) -> wire.LogLineOut:
    return wire.LogLineOut(line.offset, line.timestamp, line.level, line.reducer, line.message)


async def follow_logs(ctx: ServerContext, db: Database, num_lines: int | None) -> AsyncIterator[bytes]:
    """The lines there (the last `num_lines`, or all), then each new one as it is written, one
    JSON object a line (SpacetimeDB's `logs?follow=true`). Woken by the commits that write log
    lines, never by a timer; it ends when the client goes or the server stops."""
    loop = asyncio.get_running_loop()
    wake = asyncio.Event()

    def tap() -> None:  # on the writer's thread
        if not loop.is_closed():
            loop.call_soon_threadsafe(wake.set)

    stop_tap = db.on_log(tap)
    ctx.loop = loop
    ctx.followers.add(wake)
    try:
        lines = await run_in_threadpool(db.logs, num_lines)
        nxt = lines[-1].offset + 1 if lines else await run_in_threadpool(db.log_end)
        while True:
            if lines:
                yield b"".join(msgspec.json.encode(_line_out(line)) + b"\n" for line in lines)
                nxt = lines[-1].offset + 1
            if ctx.stopping:
                return
            await wake.wait()
            wake.clear()
            if ctx.stopping:
                return
            lines = await run_in_threadpool(db.logs, None, nxt)
    finally:
        ctx.followers.discard(wake)
        stop_tap()


async def database_identity(ctx: ServerContext, request: Request) -> Response:
    ctx.optional_caller(request)
    db = ctx.database(request.path_params["db"])
    return Response(db.identity.to_hex(), media_type="text/plain")


async def sql(ctx: ServerContext, request: Request) -> Response:
    caller = ctx.optional_caller(request)  # anonymous: public tables only
    db = ctx.database(request.path_params["db"])
    raw = await inputs.read_body(request, ctx.body_limit)
    try:
        text = raw.decode()
    except UnicodeDecodeError:
        raise HttpError(400, "the SQL is not valid UTF-8") from None
    if caller is None:
        return json_response(await run_in_threadpool(sql_answer.run, db, text, None))
    async with ctx.connection(db, caller):
        return json_response(await run_in_threadpool(sql_answer.run, db, text, caller))


_DB = "/v1/database/{db}"

ENDPOINTS = [
    Endpoint("GET", "/v1/ping", ping, "Liveness: 200 with an empty body", "v1", "public"),
    Endpoint(
        "POST", "/v1/identity", new_identity, "Mint a new identity and its token", "v1", "public",
        response=wire.IdentityToken,
        description="The token does not expire unless the server was started with a token lifetime.",
    ),
    Endpoint(
        "GET", "/v1/identity/{identity}/verify", verify_identity, "Check that the bearer token is this identity's", "v1", "identity",
        ok=204, errors=(400,), description="204 when the token belongs to the identity, 400 when not (or not an identity).",
    ),
    Endpoint("GET", _DB, database_info, "The database's name, identity and owner", "v1", "identity", response=wire.DatabaseInfo, errors=(404,)),
    Endpoint(
        "POST", _DB + "/call/{reducer}", call_reducer, "Call a reducer with its arguments as a JSON array or object", "v1", "identity",
        response=Any, body=list[Any] | dict[str, Any], errors=(400, 404, 413, 530),
        description="The arguments are a JSON array in parameter order, or an object keyed by parameter name. 200 "
        "with the reducer's return value as JSON once the call has committed; 530 with the reducer's message when it "
        "refused; 404 for an unknown reducer, or a scheduled one called by anyone but the owner; 400 for a lifecycle "
        "reducer (\"can't directly call special Init lifecycle reducer\") or bad arguments.",
    ),
    Endpoint(
        "GET", _DB + "/identity", database_identity, "The database's identity, as hex (text/plain)", "v1", "public",
        errors=(404,), extra={"responses": {"200": {"description": "OK", "content": {"text/plain": {"schema": {"type": "string"}}}}}},
    ),
    Endpoint(
        "POST", _DB + "/sql", sql, "Run SQL statements (the body, separated by ';')", "v1", "public",
        response=list[sql_answer.SqlStatement], errors=(400, 403, 404, 409, 413),
        description="One result per statement, as SpacetimeDB: {schema, rows, total_duration_micros, stats}. Public tables "
        "answer anyone (also without a token), private ones the owner and the identities the module admits (the retry "
        "module: its admins); INSERT, UPDATE and DELETE only the owner, each one transaction in the commit log.",
        extra={"requestBody": {"required": True, "content": {"text/plain": {"schema": {"type": "string"}}}}},
    ),
    Endpoint("GET", _DB + "/schema", schema, "The module's tables and reducers", "v1", "identity", response=dict[str, Any], errors=(404,)),
    Endpoint(
        "GET", _DB + "/logs", logs, "The database log (owner only)", "v1", "owner",
        response=wire.Logs, query=wire.LogsQuery, errors=(400, 404),
        description="`{lines: [...]}`; with `follow=true`, a stream of `application/x-ndjson` instead: one line object "
        "per line of text, the existing ones (the last `num_lines`) first, then each new one as it is written.",
    ),
]
