"""`GET /v1/database/{db}/subscribe`: the WebSocket endpoint. Before the upgrade it settles who
the client is (a bearer token in `Authorization` or `?token=`; none: a fresh identity and token,
as SpacetimeDB mints), that it speaks `v1.json.spacetimedb`, that the server has room for it, and
runs the module's `client_connected` (a refusal answers 403 and no connection opens); then the
connection (connection.py) runs until either side closes, and `client_disconnected` follows."""

from __future__ import annotations

import logging
import threading

from starlette.concurrency import run_in_threadpool
from starlette.websockets import WebSocket

from ...errors import StdbError
from ...local.tokens import InvalidToken
from ...runtime import Database
from ...types import ConnectionId
from ..context import ServerContext
from ..errors import HttpError
from ..upgrade import deny_upgrade
from . import messages
from .connection import Connection, Limits
from .encode import Encoder

log = logging.getLogger("stdbmod.http.subscribe")


class SubscribeEndpoint:
    """The ASGI WebSocket handler of one app (its connection count and limits)."""

    def __init__(self, ctx: ServerContext, limits: Limits) -> None:
        self.ctx = ctx
        self.limits = limits
        self._lock = threading.Lock()
        self.connections = 0
        self._encoders: dict[int, Encoder] = {}

    def _encoder(self, db: Database) -> Encoder:
        enc = self._encoders.get(id(db))
        if enc is None:
            enc = self._encoders[id(db)] = Encoder(db)
        return enc

    async def __call__(self, ws: WebSocket) -> None:
        try:
            db = self.ctx.database(ws.path_params["db"])
        except HttpError as e:
            return await deny_upgrade(ws, e.status_code, e.message)
        offered = [p.strip() for p in ws.scope.get("subprotocols", [])]
        if messages.PROTOCOL not in offered:
            got = ", ".join(offered) or "none"
            return await deny_upgrade(ws, 400, f"this server speaks the {messages.PROTOCOL} subprotocol only (offered: {got})")
        token = _token(ws)
        try:
            if token is None:
                identity, token = self.ctx.key.mint(expires_in=self.ctx.token_ttl)
            else:
                identity = self.ctx.tokens.identity(token)
        except InvalidToken as e:
            return await deny_upgrade(ws, 401, str(e))
        with self._lock:
            full = self.connections >= self.limits.max_connections
            if not full:
                self.connections += 1
        if full:
            return await deny_upgrade(ws, 503, f"the server has {self.limits.max_connections} subscription connections, its limit: try again later")
        try:
            hooks = db.module.lifecycle
            connected = bool(hooks["client_connected"] or hooks["client_disconnected"])
            if connected:
                try:
                    conn = await run_in_threadpool(db.connect, identity)
                except StdbError as e:
                    return await deny_upgrade(ws, 403, f"connection refused: {e}")
            else:
                conn = ConnectionId.random()
            try:
                await ws.accept(subprotocol=messages.PROTOCOL)
                await Connection(ws, db, self._encoder(db), identity, token, conn, self.limits).serve()
            finally:
                if connected:
                    await run_in_threadpool(db.disconnect, identity, conn)
        finally:
            with self._lock:
                self.connections -= 1


def _token(ws: WebSocket) -> str | None:
    """`Authorization: Bearer <token>`, else `?token=`; a malformed header is an empty token."""
    header = ws.headers.get("authorization")
    if header is not None:
        scheme, _, value = header.strip().partition(" ")
        return value.strip() if scheme.lower() == "bearer" else ""
    return ws.query_params.get("token")
