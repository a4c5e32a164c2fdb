"""One claimed job, from start to report: the handler (on a thread, or a task of the loop),
heartbeats in the background, then complete or fail with the attempt it holds.

A heartbeat refused (409: the lease ran out and the job went back, or someone else holds it now;
404: deleted) means the attempt is no longer ours: the job is abandoned without a report, an async
handler is cancelled, a sync one is left to finish and its outcome dropped.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

import msgspec

from .errors import BadRequest, ClientError, Conflict, NotFound
from .failures import describe, headline
from .jobcontext import JobContext, _current
from .policy import GiveUp, RetryIn, Snooze
from .types import Job

if TYPE_CHECKING:
    from .runner import Runner

log = logging.getLogger("stdbmod.worker")

Handler = Callable[[Any], Any]


class Outcome(StrEnum):
    COMPLETED = "completed"  # the handler returned; the server took the result
    FAILED = "failed"  # the handler raised (or no handler); the server took the failure
    ABANDONED = "abandoned"  # the lease was lost: nothing reported, the server's reaper decides
    UNFINISHED = "unfinished"  # shutdown cut it: nothing reported, its lease will run out
    SNOOZED = "snoozed"  # the handler raised Snooze: back to the queue, the attempt given back


class LeaseLost(Exception):
    """The server refused a heartbeat or report: this attempt is not ours any more."""


@dataclass
class Finished:
    value: Any = None
    error: BaseException | None = None


def _in_thread(fn: Handler, payload: Any, context: contextvars.Context) -> asyncio.Future[Any]:
    """Run `fn(payload)` on a daemon thread of its own (one that is still running when a shutdown's
    grace is over does not keep the process alive); its result settles the returned future."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()

    def settle(value: Any, error: BaseException | None) -> None:
        if not future.done():
            future.set_exception(error) if error is not None else future.set_result(value)

    def target() -> None:
        try:
            value, error = context.run(fn, payload), None
        except BaseException as e:  # noqa: BLE001 - the handler's failure is the job's outcome
            value, error = None, e
        try:
            loop.call_soon_threadsafe(settle, value, error)
        except RuntimeError:  # the loop is gone: the worker stopped without this job
            pass

    threading.Thread(target=target, daemon=True, name=f"stdbmod-job-{fn.__name__}").start()
    return future


class Execution:
    def __init__(self, runner: Runner, job: Job) -> None:
        self.runner, self.job = runner, job
        self.context = JobContext(job, runner.settings.worker_id)
        self.lost = asyncio.Event()
        self.started = time.monotonic()

    # --- the job's life --------------------------------------------------------------------------

    async def run(self) -> Outcome:
        heartbeats = asyncio.create_task(self._heartbeats())
        try:
            finished = await self._handle()
            heartbeats.cancel()
            if finished is None:
                return self._outcome(Outcome.ABANDONED, "lease lost while running")
            return await self._report(finished)
        except asyncio.CancelledError:
            return self._outcome(Outcome.UNFINISHED, "shutdown before it finished: left to its lease")
        except LeaseLost as e:
            return self._outcome(Outcome.ABANDONED, str(e))
        finally:
            heartbeats.cancel()

    async def _handle(self) -> Finished | None:
        """The handler's result or exception; None when the lease was lost first."""
        handler = self.runner.handlers.get(self.job.job_type)
        if handler is None:
            return Finished(error=LookupError(f"no handler for job type {self.job.job_type!r} on worker {self.context.worker_id}"))
        context = contextvars.copy_context()
        context.run(_current.set, self.context)
        if inspect.iscoroutinefunction(handler):
            work: asyncio.Future[Any] = asyncio.create_task(handler(self.job.payload), context=context)
        else:
            work = _in_thread(handler, self.job.payload, context)
        lost = asyncio.create_task(self.lost.wait())
        try:
            await asyncio.wait({work, lost}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            work.cancel()  # a task stops at its next await; a thread runs on, unheard
            raise
        finally:
            lost.cancel()
        if not work.done():  # the lease went first: stop an async handler, let a thread run out
            if isinstance(work, asyncio.Task):
                work.cancel()
            # A sync handler keeps its slot until it returns, so no more threads run than
            # `concurrency`; its outcome is dropped.
            await asyncio.wait({work})
            return None
        if work.cancelled():
            return Finished(error=asyncio.CancelledError("the handler was cancelled"))
        error = work.exception()
        return Finished(error=error) if error is not None else Finished(value=work.result())

    async def _heartbeats(self) -> None:
        s = self.runner.settings
        interval = max(0.2, s.lease_seconds * s.heartbeat_fraction)
        while True:
            await asyncio.sleep(interval)
            try:
                beat = lambda: self.runner.client.heartbeat(self.job.id, lease_seconds=s.lease_seconds, attempt=self.job.attempts)  # noqa: E731
                await self.runner.persist(beat, budget=interval)
            except (Conflict, NotFound) as e:
                self.context.lease_lost.set()
                self.lost.set()
                log.warning("job %d: heartbeat refused, abandoning it (%s)", self.job.id, e)
                return
            except ClientError as e:  # the server is away for now: the next beat tries again
                log.warning("job %d: heartbeat failed (%s)", self.job.id, e)

    # --- reporting -------------------------------------------------------------------------------

    async def _report(self, finished: Finished) -> Outcome:
        if finished.error is None:
            try:
                msgspec.json.encode(finished.value)
            except (TypeError, ValueError, OverflowError) as e:
                finished = Finished(error=TypeError(f"the handler's result is not JSON: {e}"))
        if finished.error is None:
            try:
                await self._send(lambda: self.runner.client.complete(self.job.id, finished.value, attempt=self.job.attempts),
                                 lambda now: now.status == "completed" and now.attempts == self.job.attempts)
                return self._outcome(Outcome.COMPLETED)
            except BadRequest as e:  # the server refused the result (an integer past 64 bits...)
                finished = Finished(error=e)
        exc = finished.error
        assert exc is not None
        job, client = self.job, self.runner.client
        if isinstance(exc, Snooze):
            # a snooze gives the attempt back: landed, the job is queued with one attempt fewer
            await self._send(lambda: client.snooze(job.id, exc.seconds, attempt=job.attempts),
                             lambda now: now.status != "running" and (now.snoozes > job.snoozes or now.attempts == job.attempts))
            return self._outcome(Outcome.SNOOZED, str(exc))
        error = f"the server refused the result: {exc}" if isinstance(exc, ClientError) else describe(exc)
        retry_in = exc.seconds if isinstance(exc, RetryIn) else None
        await self._send(lambda: client.fail(job.id, error, attempt=job.attempts, retry=not isinstance(exc, GiveUp), retry_in_seconds=retry_in),
                         lambda now: now.status != "running" and now.attempts == job.attempts)
        return self._outcome(Outcome.FAILED, headline(exc))

    async def _send(self, send: Callable[[], Awaitable[Job]], landed: Callable[[Job], bool]) -> None:
        """Report, retrying through outages. A refusal after a retry may mean the first try landed
        (its answer was lost): the job says whether this attempt ended the way we reported."""
        retried = False

        def note(e: BaseException) -> None:
            nonlocal retried
            retried = True

        try:
            await self.runner.persist(send, on_failure=note)
        except (Conflict, NotFound) as e:
            if retried:
                try:
                    now = await self.runner.persist(lambda: self.runner.client.get(self.job.id))
                except NotFound:
                    raise LeaseLost(f"refused ({e}); the job is gone") from None
                if landed(now):
                    return
            raise LeaseLost(f"refused: {e}") from None

    def _outcome(self, outcome: Outcome, detail: str | None = None) -> Outcome:
        ms = (time.monotonic() - self.started) * 1000
        job = self.job
        extra = {"event": "job", "outcome": outcome.value, "job_id": job.id, "job_type": job.job_type, "attempt": job.attempts,
                 "queue": job.queue, "duration_ms": round(ms, 1), "detail": detail}
        text = f"job {job.id} ({job.job_type}, attempt {job.attempts}/{job.max_attempts}) {outcome.value} in {ms:.0f} ms"
        level = logging.INFO if outcome is Outcome.COMPLETED else logging.WARNING
        log.log(level, text + (f": {detail}" if detail else ""), extra=extra)
        self.runner.stats.count(outcome)
        return outcome
