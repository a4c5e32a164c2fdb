"""The write path: one writer at a time, with group commit.

Every write goes through here. Callers hand over a job and wait on a future. The writer thread
takes everything queued at that moment (a lone job is a batch of one: nobody waits for company),
and the database runs the batch in one outer storage transaction, each job in a nested one, with
one commit (one fsync) for all of them. Futures are resolved only after that commit returned:
at once if nothing else is queued, else just before the next batch's commit (`Core.run_batch`'s
`more`), whose flush leaves the GIL to the callers the answers wake.

A caller that blocks on its result anyway (`Database.call`) may run its job itself, on its own
thread, when the writer is idle: nothing queued, nothing running. That saves two thread
hand-offs per call at low load and changes nothing else: batches still run one at a time (the
`_running` lock), and under load (the writer's last batch held several jobs) every call goes
through the queue and shares commits.
"""

from __future__ import annotations

import queue
import threading
from _thread import get_ident
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Final, Protocol

from ..errors import DatabaseClosed

MAX_BATCH: Final = 512

_STOP: Final = object()

Batch = list[tuple[Any, Any]]  # (job, its Outcome: a Future, Waiter, Done or the caller's own)
# Runs a batch (`Core.run_batch`); the writer thread passes `more`, callers running their own pass None.
RunBatch = Callable[[Batch, Callable[[], bool] | None], None]


class Outcome(Protocol):
    """What the writer settles a job's outcome through: the three methods of `Future` it uses.
    `Future`, `Waiter` and `Done` are ones; `Writer.submit_to` takes any other."""

    def done(self) -> bool: ...

    def set_result(self, value: Any) -> None: ...

    def set_exception(self, error: BaseException) -> None: ...


class Done:
    """The outcome of a job its caller ran on its own thread: `Future`'s few methods the runtime
    uses, without the condition variable nobody waits on (a `Future` costs ~5 us a call)."""

    __slots__ = ("_value", "_error", "_done")

    def __init__(self) -> None:
        self._value: Any = None
        self._error: BaseException | None = None
        self._done = False

    def done(self) -> bool:
        return self._done

    def set_result(self, value: Any) -> None:
        self._value, self._done = value, True

    def set_exception(self, error: BaseException) -> None:
        self._error, self._done = error, True

    def result(self) -> Any:
        if self._error is not None:
            raise self._error
        return self._value


class Waiter:
    """The outcome of a job queued for the writer thread, for a caller that blocks on it (a
    `Database.call` under load, `call_many`): `Future`'s few methods the runtime uses, over one
    C lock held until the outcome is set. A `Future` builds a Condition and runs ~80 Python
    bytecodes between its creation, `set_result` and `result`; this, ~15."""

    __slots__ = ("_value", "_error", "_lock")

    def __init__(self) -> None:
        self._value: Any = None
        self._error: BaseException | None = None
        self._lock = threading.Lock()
        self._lock.acquire()

    def done(self) -> bool:
        return not self._lock.locked()

    def set_result(self, value: Any) -> None:
        self._value = value
        self._lock.release()

    def set_exception(self, error: BaseException) -> None:
        self._error = error
        self._lock.release()

    def result(self) -> Any:
        with self._lock:  # held until the outcome is set
            pass
        if self._error is not None:
            raise self._error
        return self._value


class Writer:
    def __init__(self, run_batch: RunBatch, release: Callable[[], None], name: str) -> None:
        self._run_batch = run_batch
        self._release = release  # settles what run_batch held back for a next batch (Core.release)
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._closed = False
        self._lock = threading.Lock()  # guards _closed and _queued
        self._queued = 0  # jobs handed to the thread and not yet run
        self._running = threading.Lock()  # held by whichever thread runs a batch
        self._runner: int | None = None  # that thread's ident
        # How many jobs the writer thread's last batch held. Callers run their own jobs only after
        # a lone one (1): after a shared batch its callers are all about to call again; had the
        # first of them run alone, the rest would queue behind it and every other commit (fsync)
        # would carry a single call.
        self._last = 1
        self._worker = threading.Thread(target=self._loop, name=f"stdbmod-writer-{name}", daemon=True)
        self._worker.start()

    @property
    def thread(self) -> threading.Thread:
        return self._worker

    def running_here(self) -> bool:
        """Whether the calling thread is running a batch (a reducer calling back in)."""
        return self._runner == get_ident()

    def submit(self, job: Any) -> Future[Any]:
        """Queue a job for the writer thread."""
        fut: Future[Any] = Future()
        self._enqueue(job, fut)
        return fut

    def submit_to(self, job: Any, outcome: Outcome) -> None:
        """`submit`, settling the caller's own `outcome` (on the writer thread, after the commit)."""
        self._enqueue(job, outcome)

    def queue(self, job: Any) -> Waiter:
        """`submit` for a caller about to block on `.result()` (no callbacks, no asyncio)."""
        waiter = Waiter()
        self._enqueue(job, waiter)
        return waiter

    def _enqueue(self, job: Any, outcome: Any) -> None:
        with self._lock:
            if self._closed:
                raise DatabaseClosed("the database is closed")
            self._queued += 1
            self._queue.put((job, outcome))

    def run(self, job: Any) -> Waiter | Done:
        """Run the job on this thread if the writer is idle, else queue it (as `submit`). For
        callers about to block on `.result()`: it is done when this returns, if run here.
        (`run_many` of one job, spelled out: this is every blocking call's path.)"""
        with self._lock:
            if self._closed:
                raise DatabaseClosed("the database is closed")
            if self._queued or self._last > 1 or not self._running.acquire(False):
                waiter = Waiter()
                self._queue.put((job, waiter))
                self._queued += 1
                return waiter
        done = Done()
        try:
            self._runner = get_ident()
            self._run([(job, done)], None, reraise=True)
        finally:
            self._runner = None
            self._running.release()
        return done

    def run_many(self, jobs: list[Any]) -> list[Waiter | Done]:
        """As `run` for several jobs meant to share one batch (one commit): run them here as one
        batch if the writer is idle, else queue them together (the writer takes them together)."""
        with self._lock:
            if self._closed:
                raise DatabaseClosed("the database is closed")
            # Only when nothing is queued: a job queued earlier by this thread must run first.
            if self._queued or self._last > 1 or not self._running.acquire(False):
                waiters: list[Waiter | Done] = []
                for job in jobs:
                    waiter = Waiter()
                    waiters.append(waiter)
                    self._queue.put((job, waiter))
                self._queued += len(jobs)
                return waiters
        batch: Batch = [(job, Done()) for job in jobs]
        try:
            self._runner = get_ident()
            self._run(batch, None, reraise=True)
        finally:
            self._runner = None
            self._running.release()
        return [done for _, done in batch]

    def _run(self, batch: Batch, more: Callable[[], bool] | None, reraise: bool = False) -> None:
        try:
            self._run_batch(batch, more)
        except BaseException as e:  # never leave a caller waiting forever
            for _, fut in batch:
                if not fut.done():
                    fut.set_exception(e)
            if reraise and not isinstance(e, Exception):
                raise  # KeyboardInterrupt and the like, on the caller's own thread

    def _loop(self) -> None:
        try:
            while True:
                if self._queue.empty():  # no next batch to answer the last one's callers during its flush
                    with self._running:  # a caller running its own batch settles them too (Core.run_batch)
                        self._release()
                item = self._queue.get()
                if item is _STOP:
                    break
                with self._running:  # what queues up while a caller runs its own job joins this batch
                    batch = [item]
                    stop = False
                    while len(batch) < MAX_BATCH and not self._queue.empty():
                        nxt = self._queue.get_nowait()  # only this thread takes from the queue
                        if nxt is _STOP:
                            stop = True
                            break
                        batch.append(nxt)
                    self._runner = get_ident()
                    try:
                        self._run(batch, self._more)
                    finally:
                        self._runner = None
                with self._lock:
                    self._queued -= len(batch)
                    self._last = len(batch)
                if stop:
                    break
        finally:
            with self._running:  # a batch some caller runs itself finishes before close returns
                self._release()

    def _more(self) -> bool:
        """Whether calls are queued behind the batch just committed (or the close)."""
        return not self._queue.empty()

    def close(self) -> None:
        """Finish what is queued or running, then stop the thread."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._queue.put(_STOP)
        if threading.current_thread() is not self._worker:
            self._worker.join()
