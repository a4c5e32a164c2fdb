"""`GET /metrics` under `serve --workers N`: the writer process holds the commit feed, the fronts
the HTTP series; a scrape at any front gets all of them, as one process would give them.

- Each front counts its requests (the same `RequestMetrics` as one process) and its open
  WebSocket connections in prometheus-client's multiprocess mode: the writer starts every front
  with `PROMETHEUS_MULTIPROC_DIR` naming a directory made fresh for this run, where each front's
  values live in memory-mapped files.
- The writer renders a scrape (`WriterMetrics.render`): its own registry (the feed's task, call
  and commit series, the index counts, the writer's process) followed by the fronts' series
  summed by prometheus-client's `MultiProcessCollector` over every front that ran in this run, so
  a front killed and started again takes none of its requests' counts with it. The WebSocket
  gauge sums the live fronts only (`mark_process_dead` when a front ends).
- A front checks the admin token as one process does (`admin_only`), then asks the writer over its
  link (`frames.Scrape`) and answers with the writer's render.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Awaitable, Callable, Sequence

from prometheus_client import CollectorRegistry, Gauge, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead
from starlette.routing import BaseRoute
from starlette.types import ASGIApp
from starlette.websockets import WebSocket

from ..runtime import Database
from .metrics import SOCKETS, Metrics, RequestHistogram, RequestMetrics, http_histogram
from .metrics_feed import Feed
from .metrics_tasks import Counts

ENV = "PROMETHEUS_MULTIPROC_DIR"  # prometheus-client reads it when it is imported: set at a front's start


class WriterMetrics:
    """The writer's side: what its hooks see, and the directory the fronts write to."""

    def __init__(self, db: Database) -> None:
        self.dir = tempfile.mkdtemp(prefix="stdbmod-fronts-metrics-")
        self.feed = Feed()
        self.metrics = Metrics(self.feed, Counts(), lambda: db, None)  # no HTTP here: the fronts'
        self._fronts = CollectorRegistry()
        MultiProcessCollector(self._fronts, path=self.dir)  # type: ignore[no-untyped-call]
        self.feed.attach(db)

    def front_env(self) -> dict[str, str]:
        return {**os.environ, ENV: self.dir}

    def render(self) -> bytes:
        """A scrape (blocking: index counts, the fronts' files)."""
        return self.metrics.render() + generate_latest(self._fronts)

    def front_ended(self, pid: int) -> None:
        mark_process_dead(pid, self.dir)  # type: ignore[no-untyped-call]

    def close(self) -> None:
        self.feed.detach()
        shutil.rmtree(self.dir, ignore_errors=True)


class FrontMetrics:
    """A front's side: its HTTP series, written to the writer's directory."""

    def __init__(self, directory: str) -> None:
        if os.environ.get(ENV) != directory:  # prometheus-client read it at import: too late to set it here
            raise RuntimeError(f"an HTTP front's metrics need {ENV}={directory}, set by the writer that starts it")
        registry = CollectorRegistry()  # never collected here: the writer reads the files
        self.requests = RequestHistogram(http_histogram(registry))
        self.sockets = Gauge(*SOCKETS, ["endpoint"], registry=registry, multiprocess_mode="livesum")

    def middleware(self, routes: Sequence[BaseRoute]) -> Callable[[ASGIApp], ASGIApp]:
        return lambda app: RequestMetrics(app, self.requests, routes)

    def counted(self, endpoint: str, serve: Callable[[WebSocket], Awaitable[None]]) -> Callable[[WebSocket], Awaitable[None]]:
        """`serve`, its connections counted in the gauge while they last."""
        gauge = self.sockets.labels(endpoint)
        gauge.set(0)  # the series shows from the start, as one process's does

        async def counting(websocket: WebSocket) -> None:
            gauge.inc()
            try:
                await serve(websocket)
            finally:
                gauge.dec()

        return counting
