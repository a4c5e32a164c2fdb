"""`--metrics-port`: `GET /metrics` without a token on a second port, bound to 127.0.0.1 only, so
a Prometheus on the same host (or a sidecar) scrapes it without holding an admin token.

The second server runs in the main server's event loop, with the same bounds (keep-alive
timeout, header limits of the same HTTP stack) and a small connection limit; it has no lifespan
of its own (the main app's opens the database) and stops when the main server stops. `serve`
binds its socket before anything starts (as the main one), so a port in use is one clear error.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator
from typing import Any

import uvicorn

LOOPBACK = "127.0.0.1"
MAX_CONNECTIONS = 16


class _Quiet(uvicorn.Server):
    """The second server leaves signals to the main one."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def side_server(app: Any, main: uvicorn.Config) -> uvicorn.Server:
    http = main.http
    if not isinstance(http, str):  # the guarded protocol (guard.py), maybe with the job routes' lanes
        from .laned_protocol import without_lanes

        http = without_lanes(http)
    config = uvicorn.Config(
        app, lifespan="off", log_level=main.log_level, access_log=False, proxy_headers=False, http=http, loop=main.loop,
        limit_concurrency=MAX_CONNECTIONS, timeout_keep_alive=main.timeout_keep_alive, timeout_graceful_shutdown=5,
    )
    return _Quiet(config)


def run_both(main: uvicorn.Server, main_sock: socket.socket, side: uvicorn.Server, side_sock: socket.socket) -> None:
    """Serve both, each on its socket, until the main server stops (SIGTERM/SIGINT), then stop
    the second."""

    async def both() -> None:
        task = asyncio.create_task(side.serve(sockets=[side_sock]))
        try:
            await main.serve(sockets=[main_sock])
        finally:
            side.should_exit = True
            await task

    factory = getattr(main.config, "get_loop_factory", lambda: None)()
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(both())
