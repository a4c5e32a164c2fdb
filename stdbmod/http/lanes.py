"""`Lanes`: the job routes' POST requests served by the connection's protocol itself, beside the
ASGI app rather than through it.

Under the bench's load (16 connections, seed 000's lifecycle) the event loop spent more of a
request in uvicorn's response cycle and Starlette's router and middleware than in the job route's
own work: an ASGI scope walked by the router, an `asyncio.Event` and two ASGI messages a request,
three middleware layers, each with its own `send` wrapper. Here a POST to a job route is matched
once against the routes' own compiled paths, its body collected by the protocol's parser
callbacks, and its handler awaited directly; the answer goes out in one write.

What stays the one copy: the handler (the `Endpoint`'s), the error mapping (the app's exception
handlers, found by the exception's classes as Starlette finds them), the request histogram
(`metrics.RequestHistogram`, the route's template as its label), the guard's limits (a head is
parsed and bounded before a lane is chosen; a body still arriving has the guard's deadline), and
the connection's keep-alive, pipelining and shutdown (uvicorn's, through a `_Pending` cycle).

A request takes the ASGI way instead, with the same answer, whenever a lane would have to do more
than the common case: another method or route, a query string, a percent-encoded or non-ASCII
path, HTTP/1.0, `Expect: 100-continue`, a body without `Content-Length` (chunked) or over the body
limit, and a request pipelined behind one still being answered. `serve --access-log` serves every
request the ASGI way (its log line is written there).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable
from typing import Any

from starlette.convertors import Convertor
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import compile_path

from .context import ServerContext
from .routing import Endpoint, Handler

log = logging.getLogger("uvicorn.error")  # where uvicorn logs an app's unhandled exception

# (route template, method, status, seconds): metrics.RequestHistogram.observe
Observe = Callable[[str, str, int, float], None]
ErrorHandler = Callable[[Request, Exception], Any]


class Lane:
    """One POST route: its path as Starlette compiles it, its handler, its metrics label."""

    __slots__ = ("regex", "convertors", "handler", "template")

    def __init__(self, endpoint: Endpoint) -> None:
        regex, template, convertors = compile_path(endpoint.path)
        self.regex: re.Pattern[str] = regex
        self.convertors: dict[str, Convertor[Any]] = convertors
        self.handler: Handler = endpoint.handler
        self.template: str = template  # /jobs/{job_id}: the request histogram's route label


class Lanes:
    """The job routes' POSTs, and what answering one needs from the app."""

    def __init__(
        self,
        endpoints: Iterable[Endpoint],
        ctx: ServerContext,
        error_handlers: dict[Any, ErrorHandler],
        observe: Observe | None,
    ) -> None:
        lanes = [Lane(e) for e in endpoints if e.method == "POST"]
        # a path without parameters is found by a lookup, not by trying each lane's regex in turn
        self.exact = {lane.template: lane for lane in lanes if not lane.convertors}
        self.with_params = [lane for lane in lanes if lane.convertors]
        self.ctx = ctx
        self.error_handlers = error_handlers
        self.observe = observe

    def match(self, path: str) -> tuple[Lane, dict[str, Any]] | None:
        """The lane of `path` with its converted parameters, as Starlette's router would match it
        (no two job paths overlap: tests/http/test_routing.py)."""
        exact = self.exact.get(path)
        if exact is not None:
            return exact, {}
        for lane in self.with_params:
            m = lane.regex.match(path)
            if m is not None:
                return lane, {k: lane.convertors[k].convert(v) for k, v in m.groupdict().items()}
        return None

    async def answer(self, lane: Lane, request: Request) -> Response:
        try:
            return await lane.handler(self.ctx, request)
        except Exception as exc:
            handler = self._error_handler(exc)
            if handler is None:
                raise
            if _unexpected(handler, self.error_handlers):
                log.error("Exception in ASGI application\n", exc_info=exc)  # what uvicorn logs for the ASGI way
            response: Response = await handler(request, exc)
            return response

    def _error_handler(self, exc: Exception) -> ErrorHandler | None:
        for cls in type(exc).__mro__:  # Starlette's lookup: the nearest class with a handler
            handler = self.error_handlers.get(cls)
            if handler is not None:
                return handler
        return None


def _unexpected(handler: ErrorHandler, handlers: dict[Any, ErrorHandler]) -> bool:
    """Whether `handler` is the app's catch-all (Exception's, a 500): its traceback is logged."""
    return handlers.get(Exception) is handler
