"""`Worker`: claims jobs from a stdbmod server and runs your handlers on them.

    worker = Worker("http://127.0.0.1:3000", token=..., queues=["default"], concurrency=8)

    @worker.job("send_welcome_email")
    def send_welcome_email(payload: dict) -> dict: ...

    worker.run()              # until SIGTERM / SIGINT
    worker.run(burst=True)    # until nothing is ready and nothing runs

See docs/worker.md for every option and the delivery semantics (at least once).
"""

from __future__ import annotations

import asyncio
import os
import socket
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import httpx

from .client import DEFAULT_DATABASE, DEFAULT_URL, AsyncClient
from .execution import Handler, Outcome
from .runner import Runner

F = TypeVar("F", bound=Callable[..., Any])


def default_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


class _UnwaitedExecutor(ThreadPoolExecutor):
    """The loop's default executor (`asyncio.to_thread`, `run_in_executor(None, ...)`) for `run`:
    closing the loop does not wait for its threads, so a handler cut at the end of the grace does
    not hold the return (asyncio.run would wait for it)."""

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        super().shutdown(wait=False, cancel_futures=True)


def _loop() -> asyncio.AbstractEventLoop:
    loop = asyncio.new_event_loop()
    loop.set_default_executor(_UnwaitedExecutor(thread_name_prefix="stdbmod-worker"))
    return loop


@dataclass(frozen=True)
class WorkerSettings:
    url: str = DEFAULT_URL
    token: str | None = None
    queues: Sequence[str] | None = ("default",)  # None: claim from every queue
    concurrency: int = 8
    lease_seconds: int = 60
    heartbeat_fraction: float = 1 / 3
    grace_seconds: float = 30.0
    poll_max_seconds: float = 5.0
    retry_max_wait: float = 10.0
    worker_id: str = field(default_factory=default_worker_id)
    database: str = DEFAULT_DATABASE
    timeout: float = 30.0

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {self.concurrency}")
        if not 1 <= self.lease_seconds <= 30 * 86_400:
            raise ValueError(f"lease_seconds must be 1 to 2592000, got {self.lease_seconds}")
        if not 0 < self.heartbeat_fraction < 1:
            raise ValueError(f"heartbeat_fraction must be between 0 and 1, got {self.heartbeat_fraction}")
        if self.queues is not None and (isinstance(self.queues, str) or not self.queues):
            raise ValueError(f"queues must be a non-empty list of names, or None for every queue; got {self.queues!r}")
        for name in ("grace_seconds", "poll_max_seconds", "retry_max_wait", "timeout"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative")


@dataclass
class WorkerStats:
    """What one run did: jobs claimed, and each outcome's count."""

    claimed: int = 0
    completed: int = 0
    failed: int = 0
    abandoned: int = 0
    unfinished: int = 0
    snoozed: int = 0

    def count(self, outcome: Outcome) -> None:
        setattr(self, outcome.value, getattr(self, outcome.value) + 1)


class Worker:
    """Handlers by job type, and how to run them. Every option is a keyword of `WorkerSettings`:

    - `token`: a bearer token with the worker role (or admin);
    - `queues`: the queues to claim from, in turn (default `["default"]`; None: every queue);
    - `concurrency`: jobs at once (sync handlers each on a thread, async ones on the loop);
    - `lease_seconds`: the lease each claim takes, renewed every `heartbeat_fraction` of it;
    - `grace_seconds`: how long a stop waits for running jobs before leaving them to their leases;
    - `poll_max_seconds`: the longest pause between claims while nothing is ready;
    - `retry_max_wait`: the longest pause between retries while the server is away;
    - `worker_id`: the `claimed_by` the server records (default host-pid).
    """

    def __init__(self, url: str = DEFAULT_URL, **options: Any) -> None:
        self.settings = WorkerSettings(url=url, **options)
        self.handlers: dict[str, Handler] = {}
        self.transport: httpx.AsyncBaseTransport | None = None  # tests may route requests elsewhere
        self._runner: Runner | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pending_stop = threading.Event()

    def configure(self, **options: Any) -> None:
        """Change options before a run (the CLI's flags override what the module set)."""
        self.settings = replace(self.settings, **options)

    def job(self, job_type: str) -> Callable[[F], F]:
        """Register the decorated function as the handler of `job_type`: it takes the job's payload
        and returns its result (any JSON). A plain function runs on a thread, an `async def` on the
        worker's event loop. Raising fails the attempt (the server retries it with backoff)."""

        def register(fn: F) -> F:
            self.register(job_type, fn)
            return fn

        return register

    def register(self, job_type: str, handler: Handler) -> None:
        if job_type in self.handlers:
            raise ValueError(f"job type {job_type!r} already has a handler ({self.handlers[job_type].__name__})")
        self.handlers[job_type] = handler

    # --- running ---------------------------------------------------------------------------------

    def run(self, *, burst: bool = False, handle_signals: bool | None = None) -> WorkerStats:
        """Run until stopped (SIGTERM, SIGINT, `stop()`), or with `burst` until nothing is ready and
        nothing runs. Signals are handled when this runs in the main thread (unless told)."""
        if handle_signals is None:
            handle_signals = threading.current_thread() is threading.main_thread()
        with asyncio.Runner(loop_factory=_loop) as runner:
            return runner.run(self.run_async(burst=burst, handle_signals=handle_signals))

    async def run_async(self, *, burst: bool = False, handle_signals: bool = False) -> WorkerStats:
        if not self.handlers:
            raise ValueError("the worker has no handlers: register some with @worker.job(job_type)")
        s = self.settings
        stats = WorkerStats()
        async with AsyncClient(s.url, s.token, database=s.database, timeout=s.timeout, transport=self.transport,
                               max_connections=s.concurrency + 4) as client:
            runner = Runner(s, dict(self.handlers), stats, client)
            self._runner, self._loop = runner, asyncio.get_running_loop()
            if self._pending_stop.is_set():
                runner.stop()
            remove = runner.install_signals() if handle_signals else None
            try:
                await runner.run(burst)
            finally:
                if remove is not None:
                    remove()
                self._runner = self._loop = None
                self._pending_stop.clear()
        return stats

    @property
    def woken_by_server(self) -> bool:
        """Whether the running worker is subscribed to the server's new work (waker.py): idle,
        it claims the moment a job is enqueued rather than at its next poll."""
        runner = self._runner
        return runner is not None and runner.waker.listening.is_set()

    def stop(self) -> None:
        """From any thread: claim nothing more, give running jobs the grace period (a second call:
        stop them now)."""
        runner, loop = self._runner, self._loop
        if runner is None or loop is None:
            self._pending_stop.set()
            return
        loop.call_soon_threadsafe(runner.stop)
