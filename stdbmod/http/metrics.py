"""`GET /metrics`: the server's metrics in Prometheus' text format, made by prometheus-client.

Three sources, none of which writes to the database:
- the commit stream (`metrics_feed.Feed`): task counters per queue and job type, attempt
  durations, lease expiries; reducer calls per reducer and outcome with their durations; commit
  batch sizes and commit (fsync) durations;
- the task table's indexes at scrape time (`metrics_tasks.Counts`): tasks per queue and status,
  ready tasks, the oldest ready task's age;
- the HTTP layer (`RequestMetrics`, an ASGI middleware): requests per route, method and status
  with their durations.
Every metric is listed in docs/metrics.md. One registry per app, so several apps (tests) never
share a series.
"""

from __future__ import annotations

import collections
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from time import perf_counter
from typing import Any, cast

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import ReducerFailed
from ..runtime import Database
from ..runtime.core import BatchTimes
from .metrics_access import has_tasks
from .metrics_feed import Feed, TaskEvent
from .metrics_histogram import LocalHistogram
from .metrics_tasks import Counts

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# queue and job_type are the users' strings: past this many (queue, job_type) pairs, new ones are
# counted under ("_other", "_other"), so a runaway producer cannot make the scrape unbounded.
MAX_PAIRS = 1000
OTHER = ("_other", "_other")
_CONVERTER = re.compile(r"{(\w+):\w+}")  # /jobs/{job_id:id} -> /jobs/{job_id}
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})

CALL_BUCKETS = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)
COMMIT_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
ATTEMPT_BUCKETS = (0.01, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)
HTTP_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)

TASK_COUNTERS = {
    "enqueued": "Tasks enqueued (enqueue, submit, batches).",
    "started": "Attempts started: a worker's claim or an in-module handler run.",
    "completed": "Attempts that completed their task.",
    "failed": "Attempts that failed (retried later, or the last one), lease expiries included.",
    "lease_expired": "Claims whose lease ended without complete or fail (reaped as failed attempts).",
}


class _TaskGauges(Collector):
    """Collected at scrape time from the indexes (never a row scan)."""

    def __init__(self, db: Callable[[], Database], counts: Counts) -> None:
        self._db = db
        self._counts = counts

    def collect(self) -> Iterator[Metric]:
        db = self._db()
        if not has_tasks(db):
            return
        snap = self._counts.get(db)
        tasks = GaugeMetricFamily("stdbmod_tasks", "Tasks per queue and status (index counts).", labels=["queue", "status"])
        ready = GaugeMetricFamily("stdbmod_tasks_ready", "Queued tasks whose run_after has come.", labels=["queue"])
        age = GaugeMetricFamily(
            "stdbmod_queue_oldest_ready_age_seconds", "How long the oldest ready task of each queue has been ready (0: none).", labels=["queue"]
        )
        for q in snap.queues:
            for status, n in q.counts.items():
                tasks.add_metric([q.queue, status], n)
            ready.add_metric([q.queue], q.ready)
            waited = 0.0 if q.oldest_ready_micros is None else max(snap.taken_micros - q.oldest_ready_micros, 0) / 1e6
            age.add_metric([q.queue], waited)
        yield tasks
        yield ready
        yield age
        yield GaugeMetricFamily("stdbmod_tasks_count_seconds", "What the last index count of the task gauges took.", value=snap.cost_seconds)


HTTP_HISTOGRAM = ("stdbmod_http_request_duration_seconds", "HTTP requests by route template, method and status, with their durations.")
HTTP_LABELS = ("route", "method", "status")


def http_histogram(registry: CollectorRegistry) -> Histogram:
    """The request histogram of an HTTP front of `serve --workers N` (prometheus-client's own, in
    its multiprocess mode); one process has a `LocalHistogram` of the same series."""
    return Histogram(*HTTP_HISTOGRAM, HTTP_LABELS, buckets=HTTP_BUCKETS, registry=registry)


def local_histogram(registry: CollectorRegistry, name: str, documentation: str, labelnames: Sequence[str], buckets: Sequence[float]) -> LocalHistogram:
    h = LocalHistogram(name, documentation, labelnames, buckets)
    registry.register(cast(Collector, h))
    return h


SOCKETS = ("stdbmod_websocket_connections", "Open WebSocket connections per endpoint.")


class _Sockets(Collector):
    """Open WebSocket connections per endpoint, read at scrape time."""

    def __init__(self, sockets: Mapping[str, Callable[[], int]]) -> None:
        self.sockets = sockets

    def collect(self) -> Iterator[Metric]:
        g = GaugeMetricFamily(*SOCKETS, labels=["endpoint"])
        for endpoint, count in sorted(self.sockets.items()):
            g.add_metric([endpoint], count())
        yield g


class Metrics:
    """The registry, fed by the commit stream; `render` is a scrape."""

    def __init__(
        self, feed: Feed, counts: Counts, db: Callable[[], Database], sockets: Mapping[str, Callable[[], int]] | None
    ) -> None:
        """`sockets`: the WebSocket counts per endpoint; None where this process serves no HTTP
        (the writer of `serve --workers N`, whose fronts' HTTP series come from metrics_fronts.py):
        then no HTTP histogram and no WebSocket gauge either."""
        self.feed = feed
        disable_created_metrics()  # type: ignore[no-untyped-call]  # no `_created` twin of every series (process-wide)
        self.registry = r = CollectorRegistry()
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        GCCollector(registry=r)
        pair = ["queue", "job_type"]
        self.tasks = {k: Counter(f"stdbmod_tasks_{k}", doc, pair, registry=r) for k, doc in TASK_COUNTERS.items()}
        self.dead = Counter("stdbmod_tasks_dead", "Tasks that went to the dead-letter tier, by why.", [*pair, "reason"], registry=r)
        # the feed's drain observes these: LocalHistogram, not prometheus-client's (metrics_histogram.py)
        self.attempts = local_histogram(
            r, "stdbmod_task_attempt_duration_seconds", "How long attempts ran, from start to complete or fail.", pair, ATTEMPT_BUCKETS
        )
        self.calls = local_histogram(
            r, "stdbmod_reducer_call_duration_seconds", "Reducer calls by reducer and outcome (ok, error, panic), with their durations.",
            ["reducer", "outcome"], CALL_BUCKETS,
        )
        self.batch_size = local_histogram(r, "stdbmod_commit_batch_size", "Calls per commit (group commit).", [], BATCH_BUCKETS)
        self.fsync = local_histogram(
            r, "stdbmod_commit_fsync_duration_seconds", "How long each commit took to be durable (LMDB's commit, its fsync included).", [], COMMIT_BUCKETS
        )
        self.offset = Gauge("stdbmod_commit_log_offset", "The offset of the newest transaction in the commit log (any node's).", registry=r)
        self.offset.set_function(lambda: db().commit_log_end() - 1)
        r.register(_TaskGauges(db, counts))
        self.requests: RequestHistogram | None = None
        if sockets is not None:
            self.requests = RequestHistogram(local_histogram(r, *HTTP_HISTOGRAM, HTTP_LABELS, HTTP_BUCKETS))
            feed.deferred.append(self.requests.defer())
            r.register(_Sockets(sockets))
        self._pairs: set[tuple[str, str]] = set()
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        feed.task_listeners.append(self.on_tasks)
        feed.batch_listeners.append(self.on_batch)

    # --- the feed's listeners (the feed's thread, or a scrape draining it) ------------------------

    def _pair(self, queue: str, job_type: str) -> tuple[str, str]:
        key = (queue, job_type)
        if key in self._pairs:
            return key
        if len(self._pairs) >= MAX_PAIRS:
            key = OTHER
        # A new pair's counters all start at 0, so the first increment of each shows in rate().
        for c in self.tasks.values():
            c.labels(*key)
        self._pairs.add(key)
        return key

    def on_tasks(self, events: list[TaskEvent]) -> None:
        # Counted per series first, then one inc each: a drain holds the GIL the writer and the
        # event loop need, and a labels() lookup per event was most of its time.
        counts: dict[tuple[Any, tuple[str, ...]], int] = {}
        for e in events:
            key = self._pair(e.queue, e.job_type)
            series: tuple[Any, tuple[str, ...]]
            if e.kind == "dead":
                series = (self.dead, (*key, e.reason or "unknown"))
            else:
                series = (self.tasks[e.kind], key)
                if e.seconds is not None:
                    self._child(self.attempts, key).observe(e.seconds)
            counts[series] = counts.get(series, 0) + 1
        for (metric, labels), n in counts.items():
            self._child(metric, labels).inc(n)

    def on_batch(self, times: BatchTimes) -> None:
        batch, outcomes, spent, commit_ns = times
        for (job, _), (ok, value), ns in zip(batch, outcomes, spent):
            if not job.reducer:  # a schedule row that was gone when its turn came
                continue
            outcome = "ok" if ok else "panic" if isinstance(value, ReducerFailed) else "error"
            self._child(self.calls, (job.reducer, outcome)).observe(ns / 1e9)
        self.batch_size.observe(len(batch))
        self.fsync.observe(commit_ns / 1e9)

    def _child(self, metric: Any, labels: tuple[str, ...]) -> Any:
        """`metric.labels(*labels)`, remembered: the series are bounded (MAX_PAIRS, the
        module's reducers), and prometheus-client's own lookup validates and joins the labels
        on every call."""
        key = (id(metric), labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    # --- scrapes --------------------------------------------------------------------------------

    def render(self) -> bytes:
        """The scrape: every commit so far counted first. Blocking (index counts): call it off
        the event loop."""
        self.feed.drain()
        return generate_latest(self.registry)

    def middleware(self, routes: Sequence[BaseRoute]) -> Callable[[ASGIApp], ASGIApp]:
        requests = self.requests
        if requests is None:
            raise ValueError("these metrics serve no HTTP (sockets=None): no request histogram")

        def build(app: ASGIApp) -> ASGIApp:
            return RequestMetrics(app, requests, routes)

        return build


PENDING_MAX = 10_000  # request observations queued for the feed's drain, at most (RequestHistogram)


class RequestHistogram:
    """The request histogram's observations, labelled with the route's path template (bounded,
    unlike raw paths), the method and the status: the ASGI middleware's (`RequestMetrics`) and
    the job routes' lanes' (lanes.py).

    Where a commit feed drains (one process: `Metrics`), an observation is only queued on the
    event loop, and the feed's drain hands it to prometheus-client (`defer`): a drain runs
    while the writer flushes a commit, without the GIL the event loop needs, and every scrape
    drains first, so a scrape still counts every request answered before it. An HTTP front
    of `serve --workers N` has no feed: it observes at once."""

    def __init__(self, histogram: Histogram | LocalHistogram) -> None:
        self.histogram = histogram
        self._children: dict[tuple[str, str, int], Any] = {}
        self._pending: collections.deque[tuple[str, str, int, float]] | None = None

    def defer(self) -> Callable[[], None]:
        """Queue observations from now on; returns what observes the queued ones (`flush`),
        for the feed's drain to call."""
        self._pending = collections.deque()
        return self.flush

    def observe(self, route: str, method: str, status: int, seconds: float) -> None:
        pending = self._pending
        if pending is None:
            self._observe(route, method, status, seconds)
            return
        pending.append((route, method, status, seconds))
        if len(pending) > PENDING_MAX:  # nothing drains (a server without a database open): stay bounded
            self.flush()

    def flush(self) -> None:
        """Observe what was queued; safe from any thread (the event loop's bound, the feed's drain)."""
        pending = self._pending
        if pending is None:
            return
        while True:
            try:
                route, method, status, seconds = pending.popleft()
            except IndexError:
                return
            self._observe(route, method, status, seconds)

    def _observe(self, route: str, method: str, status: int, seconds: float) -> None:
        key = (route, method, status)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = self.histogram.labels(route, method, str(status))
        child.observe(seconds)


class RequestMetrics:
    """ASGI middleware: one `RequestHistogram` observation per request."""

    def __init__(self, app: ASGIApp, requests: RequestHistogram, routes: Sequence[BaseRoute]) -> None:
        self.app = app
        self.requests = requests
        self.paths: dict[Any, str] = {r.endpoint: _CONVERTER.sub(r"{\1}", r.path) for r in routes if isinstance(r, Route)}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = perf_counter()
        status = 500  # what the client gets if the app raises before answering

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            self._observe(scope, status, perf_counter() - started)

    def _observe(self, scope: Scope, status: int, seconds: float) -> None:
        route = self.paths.get(scope.get("endpoint"), "other")
        method = scope["method"] if scope["method"] in METHODS else "other"
        self.requests.observe(route, method, status, seconds)
