"""How a request awaits the writer: a reducer call's outcome handed from the writer thread to
the event loop with one callback, no `concurrent.futures.Future` between them. The job routes'
hot path (`ServerContext.call_typed`), compiled with them."""

from __future__ import annotations

import asyncio
from _thread import get_ident
from concurrent.futures import CancelledError, Future
from typing import Any

from ..runtime import Database
from ..runtime.calls import pass_on
from ..types import ConnectionId, Identity


def has_connection_hooks(db: Database) -> bool:
    hooks = db.module.lifecycle
    return bool(hooks["client_connected"] or hooks["client_disconnected"])


async def result(done: Future[Any]) -> Any:
    """Await a writer's future from the event loop (the writes other than the job routes'). Leaner
    than `asyncio.wrap_future`, which also chains cancellation back to the writer's future (a
    queued call is never cancelled) and checks both futures' states on every hand-over: here the
    future, once settled, hands its outcome to an `Answer`, which wakes the loop once."""
    if isinstance(done, asyncio.Future):  # an HTTP front's call (front_db.py): settled on this loop
        return await done
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[Any] = loop.create_future()
    outcome = Answer(loop, waiter)
    done.add_done_callback(lambda f: pass_on(f, outcome))
    return await waiter


class Answer:
    """Where the writer puts an HTTP call's outcome (`Database.submit_typed_to`): handed to the
    event loop by one callback. A `concurrent.futures.Future` in its place built a condition
    variable and took its lock at each step from its creation to the waiter's wake-up, on both
    threads (~10% of the event loop's time and the writer's)."""

    __slots__ = ("_loop", "_loop_thread", "_waiter", "_done")

    def __init__(self, loop: asyncio.AbstractEventLoop, waiter: asyncio.Future[Any]) -> None:
        self._loop = loop
        self._loop_thread = get_ident()  # the loop's (an attribute named _thread is a C keyword once compiled)
        self._waiter = waiter
        self._done = False

    def done(self) -> bool:
        return self._done

    def set_result(self, value: Any) -> None:
        self._settle(value, None)

    def set_exception(self, error: BaseException) -> None:
        self._settle(None, error)

    def _settle(self, value: Any, error: BaseException | None) -> None:
        self._done = True
        if get_ident() == self._loop_thread:  # settled on the loop itself (an HTTP front's link)
            answered(self._waiter, value, error)
            return
        try:
            self._loop.call_soon_threadsafe(answered, self._waiter, value, error)
        except RuntimeError:  # the loop closed: a call committed after the server stopped has nobody to answer
            pass


def answered(waiter: asyncio.Future[Any], value: Any, error: BaseException | None) -> None:
    if waiter.cancelled():  # the request went away; the call itself committed or not regardless
        return
    if isinstance(error, CancelledError):  # the writer's future was cancelled (`pass_on`)
        waiter.cancel()
        return
    if error is None:
        waiter.set_result(value)
    else:
        waiter.set_exception(error)


async def answer(db: Database, reducer: str, args: tuple[Any, ...], sender: Identity, conn: ConnectionId | None) -> Any:
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[Any] = loop.create_future()
    db.submit_typed_to(reducer, args, Answer(loop, waiter), sender=sender, connection_id=conn)
    return await waiter
