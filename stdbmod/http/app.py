"""`create_app`: the Starlette application serving one database.

    app = create_app(lambda: Database.open(path, module), key=load_or_create_key(path))
    uvicorn.run(app)

Give a factory and the app opens the database in its lifespan (never at import time, and never
before a fork: LMDB environments must not be inherited) and closes it on shutdown, after the
server has finished its requests; `Database.close` lets queued calls commit first. Give an open
`Database` and it stays the caller's to close. The lifespan also runs the production scheduler,
so backoff timers and lease reapers fire.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket

from ..errors import StdbError, StoragePanic
from ..local.tokens import SigningKey
from ..runtime import Database, Scheduler
from . import errors, inputs, openapi, routes_jobs, routes_recurring, routes_triage, routes_v1
from .context import ServerContext
from .lanes import Lanes
from .metrics_extras import Extras
from .render import json_response
from .routing import Endpoint, build_routes
from .subscribe.connection import Limits
from .subscribe.route import SubscribeEndpoint

ENDPOINTS: list[Endpoint] = [*routes_v1.ENDPOINTS, *routes_jobs.ENDPOINTS, *routes_recurring.ENDPOINTS, *routes_triage.ENDPOINTS]
# Starlette tries the routes in order and the workers' job routes are the hot ones, so they go
# first (a claim's path was matched against 5 routes, a completion's against 11, with the triage
# routes first). No two paths overlap (tests/http/test_routing.py), so the order changes no answer.
_ROUTE_ORDER: list[Endpoint] = [*routes_jobs.ENDPOINTS, *routes_triage.ENDPOINTS, *routes_recurring.ENDPOINTS, *routes_v1.ENDPOINTS]


def create_app(
    db: Database | Callable[[], Database],
    *,
    key: SigningKey,
    body_limit: int = inputs.DEFAULT_BODY_LIMIT,
    token_ttl: float | None = None,
    run_scheduler: bool = True,
    on_panic: Callable[[StoragePanic], None] | None = None,
    metrics: bool | None = None,
    dashboard: bool | None = None,
    ws_limits: Limits | None = None,
) -> Starlette:
    """The app. `token_ttl` (seconds) makes minted tokens expire; `on_panic` is told when the
    storage panics (the server must then exit: `serve` does). `metrics` and `dashboard` serve
    /metrics and /dashboard (None: when their extras are installed); `app.state.extras` has the
    metrics port's app. `ws_limits` bound the WebSocket subscribers (http/subscribe/connection.py)."""
    ctx = ServerContext(key, body_limit=body_limit, token_ttl=token_ttl)
    extras = Extras(ctx, metrics=metrics, dashboard=dashboard)
    spec = openapi.document(ENDPOINTS)
    spec["paths"].update(extras.openapi_paths())
    subscribe = SubscribeEndpoint(ctx, ws_limits or Limits(max_message=body_limit))
    extras.sockets["subscribe"] = lambda: subscribe.connections

    async def subscribe_ws(websocket: WebSocket) -> None:
        await subscribe(websocket)

    async def openapi_json(request: Request) -> Response:
        ctx.optional_caller(request)
        return json_response(spec)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        owned = not isinstance(db, Database)
        database = db() if not isinstance(db, Database) else db
        if on_panic is not None:
            database.hooks.on_panic = on_panic  # called on the writer thread
        if not database.storage.shared:
            # connections a crash left open get their client_disconnected (SpacetimeDB does at startup)
            database.disconnect_dangling()
        extras.attach(database)
        scheduler = Scheduler(database).start() if run_scheduler else None
        ctx.attach(database)
        try:
            yield
        finally:
            if scheduler is not None:
                scheduler.stop()
            ctx.detach()
            extras.detach()
            if owned:
                database.close()

    handlers: dict[Any, Any] = {
        errors.HttpError: errors.on_http_error,
        HTTPException: errors.on_starlette_error,
        StdbError: errors.on_stdb_error,
        ClientDisconnect: errors.on_client_gone,
        Exception: errors.on_unexpected,
    }
    routes = [
        *build_routes(_ROUTE_ORDER, ctx),
        Route("/openapi.json", openapi_json, methods=["GET"]),
        WebSocketRoute("/v1/database/{db}/subscribe", subscribe_ws),  # SpacetimeDB's v1.json protocol
        *extras.routes(),
    ]
    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers=handlers, middleware=extras.middleware(routes))
    # Starlette answers a path that differs by a trailing slash with a 307 to a URL built from the
    # client's Host header; a path no route has is a 404 here, never a redirect elsewhere.
    app.router.redirect_slashes = False
    app.state.extras = extras
    app.state.context = ctx  # `serve` ends the log streams when asked to stop (ctx.stop_followers)
    app.state.metrics_app = extras.metrics_app(exception_handlers=handlers)
    requests = None if extras.metrics is None else extras.metrics.requests
    # `serve` gives these to its protocol (lanes.py): the job routes' POSTs beside the ASGI app
    app.state.lanes = Lanes(routes_jobs.ENDPOINTS, ctx, handlers, None if requests is None else requests.observe)
    return app
