"""`Endpoint`: one route, declared once — the handler, and what `/openapi.json` says about it.

Building both the Starlette routes and the OpenAPI document from the same list is what keeps
the document describing every route.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from starlette.convertors import Convertor, register_url_convertor
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from .context import ServerContext


class IdConvertor(Convertor[int]):
    """``{job_id:id}``: a row id in a path, up to 20 digits (any 64-bit unsigned integer).

    Starlette's ``int`` matches any run of digits and converts it while routing, where Python's
    integer-string limit (4,300 digits) raised a ValueError: a 500 and a traceback for any
    caller, with or without a token. A longer run here matches no route: a 404 before any
    handler or authentication runs."""

    regex = "[0-9]{1,20}"

    def convert(self, value: str) -> int:
        return int(value)

    def to_string(self, value: int) -> str:
        return str(int(value))


register_url_convertor("id", IdConvertor())  # Starlette's registry is global; registering twice is harmless
JOB_ID = "{job_id:id}"  # a job's id in a route's path

Handler = Callable[[ServerContext, Request], Awaitable[Response]]
Access = Literal["public", "identity", "worker", "admin", "owner"]


@dataclass(frozen=True)
class Endpoint:
    method: str
    path: str  # Starlette syntax: {job_id:id} (IdConvertor)
    handler: Handler
    summary: str
    tag: str
    access: Access
    ok: int = 200
    response: Any = None  # a wire Struct (or list/Any); None: no body
    body: Any = None  # a wire Struct; None: no body read
    body_required: bool = False
    query: Any = None  # a wire Struct of query parameters
    errors: tuple[int, ...] = ()
    description: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def build_routes(endpoints: list[Endpoint], ctx: ServerContext) -> list[Route]:
    """One Starlette route per path, dispatching on the method, so that a 405 lists every method
    the path has in its `Allow` header."""
    by_path: dict[str, dict[str, Handler]] = {}
    for e in endpoints:
        by_path.setdefault(e.path, {})[e.method] = e.handler
    return [_route(path, handlers, ctx) for path, handlers in by_path.items()]


class _Dispatch:
    """The ASGI app of one path: calls the handler for the method and sends its response.

    Being a plain ASGI app (not a function) spares each request Starlette's `request_response`
    wrapper and its second exception-handling layer; an exception raised here reaches the app's
    `ExceptionMiddleware`, which answers it with the same handlers."""

    def __init__(self, handlers: dict[str, Handler], ctx: ServerContext) -> None:
        self.handlers = handlers
        self.ctx = ctx

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        method: str = scope["method"]
        handler = self.handlers["GET" if method == "HEAD" else method]  # the Route checked the method
        response = await handler(self.ctx, Request(scope, receive, send))
        await response(scope, receive, send)


def _route(path: str, handlers: dict[str, Handler], ctx: ServerContext) -> Route:
    return Route(path, _Dispatch(handlers, ctx), methods=list(handlers), name=path)
