"""One HTTP front of `serve --workers N` (workers.py starts it): the app of one-process `serve`
over a `FrontDatabase` (front_db.py), on the listening socket it inherited.

    python -m stdbmod.http.front CONFIG_JSON   # workers.FrontConfig; never run by hand

It serves every route `serve` does: subscriptions, `logs?follow=true` and the dashboard's live
socket read the log here, woken by the writer's notices; /metrics comes from the writer, with
every front's HTTP series (metrics_fronts.py); the dashboard's sessions, used sign-in tickets and
throughput are the writer's, asked over the link (dashboard/desk.py).
When its writer goes away it answers each call 503 at once, keeps answering for
`writer_grace` seconds, then exits (nobody would restart it).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import sys
import threading
from pathlib import Path

import msgspec
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route, WebSocketRoute

from ..errors import StdbError
from ..local.modspec import load_module
from ..local.tokens import load_or_create_key
from . import frames
from . import limits as limits_
from . import metrics_port as metrics_port_
from .app import create_app
from .front_db import FrontDatabase, FrontStorage, WriterClient
from .limits import ConnectionLimits
from .metrics_extras import admin_only
from .serve import _end_streams_on_exit, _quiet_signals, _tune_gc, uvicorn_config
from .workers import FrontConfig

log = logging.getLogger("stdbmod.http")

CANNOT_START = 3  # the writer does not start a front again that ended so


def _serve_metrics(app: Starlette, link: WriterClient, directory: str) -> None:
    """/metrics from the writer (metrics_fronts.py), and this front's HTTP series counted in
    `directory`."""
    from .metrics import CONTENT_TYPE
    from .metrics_fronts import FrontMetrics

    ctx = app.state.context
    metrics = FrontMetrics(directory)

    async def open_scrape(request: Request) -> Response:
        return Response(await link.request(frames.Scrape), media_type=CONTENT_TYPE)

    async def scrape(request: Request) -> Response:
        await admin_only(ctx, request)
        return await open_scrape(request)

    routes = app.router.routes
    for i, route in enumerate(routes):
        if isinstance(route, WebSocketRoute):
            # the two sockets, named as one process's gauge names them (metrics_extras.py)
            endpoint = "subscribe" if route.path.endswith("/subscribe") else "dashboard"
            routes[i] = WebSocketRoute(route.path, metrics.counted(endpoint, route.endpoint), name=route.name)
    routes.insert(0, Route("/metrics", scrape, methods=["GET"]))
    app.state.metrics_app = Starlette(routes=[Route("/metrics", open_scrape, methods=["GET"])], exception_handlers=app.exception_handlers)
    app.add_middleware(metrics.middleware(routes))
    app.state.lanes.observe = metrics.requests.observe  # the job routes' lanes count into the same histogram


def serve_front(config: FrontConfig) -> int:
    data = Path(config.data)
    loaded = load_module(config.module)
    key = load_or_create_key(data)  # the writer's `serve` made it before any front started
    limits, _ = limits_.fit_descriptors(ConnectionLimits(
        max_connections=config.max_connections, header_timeout=config.header_timeout, keep_alive_timeout=config.keep_alive_timeout,
    ))
    sock = socket.socket(fileno=config.listen_fd)
    server: uvicorn.Server | None = None

    def writer_gone() -> None:
        def leave() -> None:
            if server is not None:
                server.should_exit = True

        timer = threading.Timer(config.writer_grace, leave)
        timer.daemon = True
        timer.start()

    link = WriterClient(socket.socket(fileno=config.link_fd), on_gone=writer_gone)

    def open_database() -> FrontDatabase:
        db = FrontDatabase.open(FrontStorage(str(data)), loaded.module)
        assert isinstance(db, FrontDatabase)  # `open` makes its class's instance
        link.start(asyncio.get_running_loop())  # the lifespan runs on the server's loop
        db.attach(link)
        return db

    app = create_app(open_database, key=key, body_limit=config.body_limit, token_ttl=config.token_ttl, run_scheduler=False, metrics=False)
    dashboard = app.state.extras.dashboard  # None without jinja2: its paths answer 501 saying so, as in one process
    if dashboard is not None:
        from .dashboard.desk import LinkDesk

        dashboard.desk = LinkDesk(link.request, dashboard.desk.ttl)
    if config.metrics_dir is not None:  # else no prometheus-client: the app's own /metrics answers 501 saying so
        _serve_metrics(app, link, config.metrics_dir)
    metrics_sock = None if config.metrics_fd < 0 else socket.socket(fileno=config.metrics_fd)
    host, port = sock.getsockname()[:2]
    uconfig = uvicorn_config(
        app, host=host, port=port, log_level=config.log_level, access_log=config.access_log, limits=limits, body_limit=config.body_limit,
        lanes=app.state.lanes,
    )
    server = uvicorn.Server(uconfig)
    _end_streams_on_exit(server, app)
    _tune_gc()
    try:
        with _quiet_signals():
            if metrics_sock is None:
                server.run(sockets=[sock])
            else:
                metrics_port_.run_both(server, sock, metrics_port_.side_server(app.state.metrics_app, uconfig), metrics_sock)
    finally:
        link.close()
    return 0


def main(argv: list[str]) -> int:
    try:
        config = msgspec.json.decode(argv[1], type=FrontConfig)
    except (IndexError, msgspec.DecodeError) as e:
        print(f"error: python -m stdbmod.http.front is started by `stdbmod serve --workers N` ({e})", file=sys.stderr)
        return CANNOT_START
    try:
        return serve_front(config)
    except (StdbError, OSError) as e:
        print(f"error: HTTP front: {e}", file=sys.stderr)
        return CANNOT_START


if __name__ == "__main__":
    sys.exit(main(sys.argv))
