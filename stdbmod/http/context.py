"""`ServerContext`: what every handler of one app shares — the open database, the signing key,
the limits — and the helpers that turn a request into a caller identity or a database.

There is one per `create_app` call and no module-level state, so tests can run several apps.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from ..errors import StdbError
from ..local.tokens import InvalidToken, SigningKey
from ..runtime import Database
from ..types import ConnectionId, Identity
from . import inputs
from .answers import answer, has_connection_hooks, result
from .errors import HttpError
from .tokencache import VerifiedTokens


class ServerContext:
    def __init__(self, key: SigningKey, *, body_limit: int = inputs.DEFAULT_BODY_LIMIT, token_ttl: float | None = None) -> None:
        self.key = key
        self.tokens = VerifiedTokens(key)
        self.body_limit = body_limit
        self.token_ttl = token_ttl
        self._db: Database | None = None
        # open `logs?follow=true` streams (their wake-up events) and whether the server is stopping:
        # a stream never ends on its own, so the server's stop must end them (`stop_followers`)
        self.followers: set[asyncio.Event] = set()
        self.stopping = False
        self.loop: asyncio.AbstractEventLoop | None = None  # the followers' loop

    def stop_followers(self) -> None:
        """End every log stream: the server is stopping. From any thread (a signal handler)."""
        loop = self.loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._stop_followers)

    def _stop_followers(self) -> None:
        self.stopping = True
        for wake in list(self.followers):
            wake.set()

    # --- the database ---------------------------------------------------------------------------

    def attach(self, db: Database) -> None:
        self._db = db

    def detach(self) -> None:
        self._db = None

    @property
    def db(self) -> Database:
        if self._db is None:
            raise HttpError(503, "the database is not open")
        return self._db

    def database(self, name_or_identity: str) -> Database:
        """The served database if `name_or_identity` names it (its name, or its identity in hex
        with or without ``0x``); 404 otherwise."""
        db = self.db
        wanted = name_or_identity.lower().removeprefix("0x")
        if wanted in (db.name, db.identity.to_hex()):
            return db
        raise HttpError(404, f"no such database: {name_or_identity}")

    # --- callers --------------------------------------------------------------------------------

    def caller(self, request: Request) -> Identity:
        """The identity of the request's bearer token; 401 without a valid one."""
        token = inputs.bearer(request)
        if token is None:
            raise InvalidToken("missing token: send Authorization: Bearer <token> (POST /v1/identity mints one)")
        return self.tokens.identity(token)

    def optional_caller(self, request: Request) -> Identity | None:
        """None without an Authorization header; a header that is there must be valid."""
        return None if inputs.bearer(request) is None else self.caller(request)

    # --- calls ----------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def connection(self, db: Database, caller: Identity) -> AsyncIterator[ConnectionId | None]:
        """SpacetimeDB runs `client_connected` / `client_disconnected` around each HTTP call. Do
        so only for modules that declare them, so others pay one transaction per call, not three.
        A connection refused by `client_connected` is a 403."""
        if not has_connection_hooks(db):
            yield None
            return
        try:
            conn = await run_in_threadpool(db.connect, caller)
        except StdbError as e:
            raise HttpError(403, f"connection refused: {e}") from None
        try:
            yield conn
        finally:
            await run_in_threadpool(db.disconnect, caller, conn)

    async def call(self, db: Database, reducer: str, *args: Any, sender: Identity) -> Any:
        """Call a reducer without blocking the event loop: the request waits on the writer's
        future, so concurrent requests share one commit (group commit)."""
        if not has_connection_hooks(db):  # the common case, without the context manager's cost
            return await result(db.submit(reducer, *args, sender=sender))
        async with self.connection(db, sender) as conn:
            return await result(db.submit(reducer, *args, sender=sender, connection_id=conn))

    def call_typed(self, db: Database, reducer: str, args: tuple[Any, ...], *, sender: Identity) -> Awaitable[Any]:
        """`call` with arguments a wire body decoded into the reducer's own types
        (`Database.submit_typed_to`): the job routes' way, the hot one. Without connection hooks
        the awaitable is answers.py's compiled coroutine itself, with no interpreted one around it."""
        if not has_connection_hooks(db):
            return answer(db, reducer, args, sender, None)
        return self._call_typed_connected(db, reducer, args, sender)

    async def _call_typed_connected(self, db: Database, reducer: str, args: tuple[Any, ...], sender: Identity) -> Any:
        async with self.connection(db, sender) as conn:
            return await answer(db, reducer, args, sender, conn)

    async def call_json(self, db: Database, reducer: str, raw: bytes, *, sender: Identity) -> Any:
        async with self.connection(db, sender) as conn:
            return await result(db.submit_json(reducer, raw, sender=sender, connection_id=conn))


