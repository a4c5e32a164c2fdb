"""One run of a `Worker`: the claim loop, the jobs in flight, shutdown.

The loop claims as many jobs as there are free slots (`claim_many` when more than one is free),
queue after queue, starts each as a task, and sleeps with backoff while nothing is ready. Every
request is retried through outages (`retrying.persist`). On stop it claims nothing more, gives the
running jobs `grace_seconds` to finish and report, then cuts the rest without reporting: their
leases run out and the server hands them out again.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

from .client import AsyncClient
from .errors import ClientError
from .execution import Execution, Handler, Outcome
from .retrying import IdleBackoff, persist
from .types import Job
from .waker import Waker

if TYPE_CHECKING:
    from .worker import WorkerSettings, WorkerStats

T = TypeVar("T")
log = logging.getLogger("stdbmod.worker")


class Runner:
    def __init__(self, settings: WorkerSettings, handlers: dict[str, Handler], stats: WorkerStats, client: AsyncClient) -> None:
        self.settings, self.handlers, self.stats, self.client = settings, handlers, stats, client
        self.active: set[asyncio.Task[Outcome]] = set()
        self.stopping = asyncio.Event()
        self.forced = asyncio.Event()
        self._wake = asyncio.Event()
        self._work = asyncio.Event()  # the server announced new work (waker.py)
        self.waker = Waker(settings.url, settings.database, settings.token, settings.queues, self._work.set)
        self._turn = 0  # which queue the next claim round starts with
        self._backing_off = False  # the claim in flight is waiting out an outage, not a request
        self._down = False

    # --- requests --------------------------------------------------------------------------------

    async def persist(self, send: Callable[[], Awaitable[T]], *, budget: float | None = None,
                      on_failure: Callable[[BaseException], None] | None = None) -> T:
        def failed(e: BaseException) -> None:
            if not self._down:
                self._down = True
                log.warning("the server did not answer (%s); retrying with backoff", e)
            if on_failure is not None:
                on_failure(e)

        result = await persist(send, max_wait=self.settings.retry_max_wait, budget=budget, on_failure=failed)
        if self._down:
            self._down = False
            log.warning("the server answers again")
        return result

    # --- stopping --------------------------------------------------------------------------------

    def stop(self) -> None:
        """Claim nothing more; running jobs get the grace period. A second call cuts them now."""
        if self.stopping.is_set():
            self.forced.set()
        self.stopping.set()
        self._wake.set()

    def install_signals(self) -> Callable[[], None]:
        loop = asyncio.get_running_loop()
        sigs = (signal.SIGTERM, signal.SIGINT)

        def on_signal(sig: signal.Signals) -> None:
            log.warning("%s: %s", sig.name, "stopping now" if self.stopping.is_set() else
                        f"stopping: no more claims, {len(self.active)} running job(s) get {self.settings.grace_seconds:g} s")
            self.stop()

        for sig in sigs:
            loop.add_signal_handler(sig, on_signal, sig)

        def remove() -> None:
            for sig in sigs:
                loop.remove_signal_handler(sig)

        return remove

    # --- the loop --------------------------------------------------------------------------------

    async def run(self, burst: bool) -> None:
        # A burst ends when nothing is ready: it has no idle waits to cut short.
        waker = None if burst else asyncio.create_task(self.waker.run(), name="stdbmod-waker")
        try:
            await self._claim_loop(burst)
        finally:
            if waker is not None:
                waker.cancel()
                await asyncio.wait({waker})
            await self._drain()

    async def _claim_loop(self, burst: bool) -> None:
        idle = IdleBackoff(self.settings.poll_max_seconds)
        while not self.stopping.is_set():
            self._wake.clear()  # before looking, so a job ending from here on wakes the wait below
            self._work.clear()  # likewise for the server's announcements
            free = self.settings.concurrency - len(self.active)
            delay: float | None = None
            if free > 0:
                jobs = await self._claim_round(free)
                if jobs is None:  # stopped while the server was away
                    return
                for job in jobs:
                    self._start(job)
                if jobs:
                    idle.reset()
                    if len(jobs) == free:
                        continue  # there may be more: claim again at once
                elif burst and not self.active:
                    return
                delay = idle.next()  # fewer than asked for: the queue is drained for now
            # Every slot busy: wait for one to free up. Drained: wait out the idle delay whatever
            # ends meanwhile (a claim per finished job would mostly come back empty).
            if delay is None:
                await self._wake.wait()
            else:  # drained: until the idle delay ends, a stop, or the server announces work
                await _first(self.stopping, self._work, timeout=delay)

    async def _claim_round(self, free: int) -> list[Job] | None:
        """Up to `free` jobs, from each queue in turn; None when a stop came during an outage."""
        got: list[Job] = []
        queues: list[str | None] = list(self.settings.queues) if self.settings.queues else [None]
        start, self._turn = self._turn, (self._turn + 1) % len(queues)
        for queue in queues[start:] + queues[:start]:
            want = free - len(got)
            if want <= 0:
                break
            claimed = await self._interruptible(lambda: self._claim(queue, want))  # noqa: B023 (awaited in this iteration)
            if claimed is None:
                return None
            got += claimed
        return got

    async def _claim(self, queue: str | None, n: int) -> list[Job]:
        s, c = self.settings, self.client

        def backing_off(e: BaseException) -> None:
            self._backing_off = True

        async def send() -> list[Job]:
            self._backing_off = False
            if n == 1:
                job = await c.claim(queue, worker_id=s.worker_id, lease_seconds=s.lease_seconds)
                return [] if job is None else [job]
            return await c.claim_many(n, queue, worker_id=s.worker_id, lease_seconds=s.lease_seconds)

        try:
            return await self.persist(send, on_failure=backing_off)
        finally:
            self._backing_off = False

    async def _interruptible(self, claim: Callable[[], Awaitable[list[Job]]]) -> list[Job] | None:
        """A claim a stop interrupts only while it waits out an outage: a request in flight may
        already hold leases, so its answer is awaited and its jobs run (they get the grace too)."""
        task = asyncio.ensure_future(claim())
        stop = asyncio.ensure_future(self.stopping.wait())
        try:
            while not task.done():
                await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
                if not task.done() and (self._backing_off or self.forced.is_set()):
                    task.cancel()
                    await asyncio.wait({task})
                    return None
                if not task.done():  # the claim's request is in flight: wait for its answer
                    stop = asyncio.ensure_future(self.forced.wait())
            return task.result()
        except ClientError as e:  # not retryable (a 401, a 403...): say it, then stop
            log.error("claim refused: %s; stopping", e)
            self.stop()
            return None
        finally:
            stop.cancel()

    def _start(self, job: Job) -> None:
        self.stats.claimed += 1
        task = asyncio.create_task(Execution(self, job).run(), name=f"job-{job.id}")
        self.active.add(task)

        def ended(t: asyncio.Task[Outcome]) -> None:
            self.active.discard(t)
            self._wake.set()

        task.add_done_callback(ended)

    async def _drain(self) -> None:
        """Wait up to the grace period for the running jobs (and their reports); cut the rest."""
        if not self.active:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.grace_seconds
        forced = asyncio.ensure_future(self.forced.wait())
        try:
            while self.active and not self.forced.is_set() and (left := deadline - loop.time()) > 0:
                await asyncio.wait({*self.active, forced}, timeout=left, return_when=asyncio.FIRST_COMPLETED)
        finally:
            forced.cancel()
        rest = list(self.active)
        for t in rest:
            t.cancel()
        if rest:
            await asyncio.wait(rest)


async def _first(*events: asyncio.Event, timeout: float) -> None:
    """Wait until one of `events` is set, or `timeout` seconds."""
    waits = {asyncio.ensure_future(e.wait()) for e in events}
    try:
        await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()
