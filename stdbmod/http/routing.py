"""`Endpoint`: one route, declared once — the handler, and what `/openapi.json` says about it.

Building both the Starlette routes and the OpenAPI document from the same list is what keeps
the document describing every route.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .context import ServerContext

Handler = Callable[[ServerContext, Request], Awaitable[Response]]
Access = Literal["public", "identity", "worker", "admin", "owner"]


@dataclass(frozen=True)
class Endpoint:
    method: str
    path: str  # Starlette syntax: {job_id:int}
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


def _route(path: str, handlers: dict[str, Handler], ctx: ServerContext) -> Route:
    async def endpoint(request: Request) -> Response:
        method = "GET" if request.method == "HEAD" else request.method
        return await handlers[method](ctx, request)

    return Route(path, endpoint, methods=list(handlers), name=path)
