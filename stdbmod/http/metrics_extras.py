"""What `/metrics` (the `metrics` extra: prometheus-client) and `/dashboard` (the `dashboard`
extra: jinja2) add to the app, and the commit feed and index counts they share.

Each part is there when its library imports; without it its paths answer 501 saying what to
install, so a base install stays small and still tells the operator where the feature went.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import BaseRoute, Route

from ..runtime import Database
from .context import ServerContext
from .errors import HttpError
from .metrics_access import is_admin_now
from .metrics_feed import Feed
from .metrics_tasks import Counts

if TYPE_CHECKING:
    from .dashboard import Dashboard
    from .metrics import Metrics

METRICS_MISSING = "the metrics need prometheus-client: pip install 'stdbmod[metrics]'"
DASHBOARD_MISSING = "The dashboard needs jinja2: pip install 'stdbmod[dashboard]'\n"


def installed(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


class Extras:
    def __init__(self, ctx: ServerContext, *, metrics: bool | None = None, dashboard: bool | None = None) -> None:
        """`metrics` / `dashboard`: None serves each when its library is installed."""
        self.ctx = ctx
        self.feed = Feed()
        self.counts = Counts()
        self.metrics: Metrics | None = None
        self.dashboard: Dashboard | None = None
        # Open WebSocket connections per endpoint, counted by their endpoints (a gauge of /metrics).
        self.sockets: dict[str, Callable[[], int]] = {}
        if installed("prometheus_client") if metrics is None else metrics:
            from .metrics import Metrics

            self.metrics = Metrics(self.feed, self.counts, lambda: ctx.db, self.sockets)
        if installed("jinja2") if dashboard is None else dashboard:
            from .dashboard import Dashboard

            self.dashboard = dash = Dashboard(ctx, self.feed, self.counts)
            self.sockets["dashboard"] = lambda: dash.live_feed.sockets

    # --- the app's parts ------------------------------------------------------------------------

    def routes(self) -> list[BaseRoute]:
        out: list[BaseRoute] = [Route("/metrics", self.scrape, methods=["GET"])]
        if self.dashboard is not None:
            out += self.dashboard.routes()
        else:
            out.append(Route("/dashboard{rest:path}", _no_dashboard, methods=["GET", "POST"], include_in_schema=False))
        return out

    def openapi_paths(self) -> dict[str, Any]:
        """/metrics in the API's document (the dashboard's pages are not API: not in it)."""
        error = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
        return {
            "/metrics": {
                "get": {
                    "operationId": "metrics",
                    "summary": "The server's metrics in Prometheus' text format (admin; docs/metrics.md)",
                    "description": "A token whose identity is an admin. `stdbmod serve --metrics-port` serves it without a token on loopback.",
                    "tags": ["meta"],
                    "parameters": [],
                    "security": [{"bearer": []}],
                    "responses": {
                        "200": {"description": "OK", "content": {"text/plain": {"schema": {"type": "string"}}}},
                        "401": {"description": "Missing, malformed, expired or forged token", **error},
                        "403": {"description": "The identity is not an admin", **error},
                        "501": {"description": "prometheus-client is not installed", **error},
                    },
                }
            }
        }

    def middleware(self, routes: Sequence[BaseRoute]) -> list[Middleware]:
        if self.metrics is None:
            return []
        return [Middleware(self.metrics.middleware(routes))]

    def attach(self, db: Database) -> None:
        self.feed.attach(db)

    def detach(self) -> None:
        self.feed.detach()

    # --- /metrics -------------------------------------------------------------------------------

    async def scrape(self, request: Request) -> Response:
        await admin_only(self.ctx, request)
        return await self.open_scrape(request)

    async def open_scrape(self, request: Request) -> Response:
        """No check: the loopback-only metrics port (`--metrics-port`) serves this."""
        if self.metrics is None:
            raise HttpError(501, METRICS_MISSING)
        from .metrics import CONTENT_TYPE

        body = await run_in_threadpool(self.metrics.render)  # 503 until the database is open (ctx.db)
        return Response(body, media_type=CONTENT_TYPE)

    def metrics_app(self, **starlette: Any) -> Starlette:
        """The app of the metrics port: GET /metrics, open (bind it to loopback only)."""
        return Starlette(routes=[Route("/metrics", self.open_scrape, methods=["GET"])], **starlette)


async def admin_only(ctx: ServerContext, request: Request) -> None:
    """/metrics' check: an admin's token (Authorization: Bearer), checked in a read snapshot."""
    caller = ctx.caller(request)
    if not await run_in_threadpool(is_admin_now, ctx.db, caller):
        raise HttpError(403, f"/metrics: only an admin may read the metrics ({caller} is not one)")


async def _no_dashboard(request: Request) -> Response:
    return PlainTextResponse(DASHBOARD_MISSING, status_code=501)
