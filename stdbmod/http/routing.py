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

    def route(self, ctx: ServerContext) -> Route:
        handler = self.handler

        async def endpoint(request: Request) -> Response:
            return await handler(ctx, request)

        endpoint.__name__ = handler.__name__
        return Route(self.path, endpoint, methods=[self.method], name=f"{self.tag}.{handler.__name__}")
