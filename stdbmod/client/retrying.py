"""Waiting politely: requests retried through outages (stamina: exponential backoff with jitter,
never a hot loop), and the idle poll that backs off while the queue is empty."""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

import stamina

from .errors import is_retryable

T = TypeVar("T")

FIRST_WAIT = 0.1


async def persist(send: Callable[[], Awaitable[T]], *, max_wait: float, budget: float | None = None,
                  on_failure: Callable[[BaseException], None] | None = None) -> T:
    """`send()` until it answers: a `TransportError` or a 5xx is retried after 0.1 s, 0.2 s, 0.4 s...
    up to `max_wait` plus up to a second of jitter, for at most `budget` seconds (forever when None;
    the caller cancels). Any other error, and the last one when the budget runs out, is raised.
    `on_failure` sees each retryable error as it happens."""

    async for attempt in stamina.retry_context(on=is_retryable, attempts=None, timeout=budget, wait_initial=FIRST_WAIT,
                                               wait_max=max_wait, wait_jitter=min(1.0, max_wait)):
        with attempt:
            try:
                return await send()
            except BaseException as e:
                if on_failure is not None and is_retryable(e):
                    on_failure(e)
                raise
    raise AssertionError("unreachable: stamina raises when it stops retrying")


class IdleBackoff:
    """Delays between empty claims: 0.1 s doubling up to `max_wait`, each drawn from its upper
    half (jitter, so idle workers do not poll in step); `reset` after a claim that found work."""

    def __init__(self, max_wait: float, first: float = FIRST_WAIT) -> None:
        self.first, self.max_wait = min(first, max_wait), max_wait
        self._next = self.first

    def reset(self) -> None:
        self._next = self.first

    def next(self) -> float:
        delay = self._next
        self._next = min(self.max_wait, self._next * 2)
        return random.uniform(delay / 2, delay)
