"""The injected clock. Production uses `SystemClock`; tests and scenarios drive a `ManualClock`
by hand, so nothing in them sleeps for time to pass."""

from __future__ import annotations

import threading
import time
from typing import Protocol

from ..errors import InvalidValue
from ..special import NATIVE, TimeDuration, Timestamp, _new, _set_micros


class Clock(Protocol):
    def now(self) -> Timestamp: ...


class SystemClock:
    def now(self) -> Timestamp:
        micros = time.time_ns() // 1000
        if NATIVE:  # special.py
            return Timestamp(micros)
        value: Timestamp = _new(Timestamp)
        _set_micros(value, micros)  # always in range: skip the checks
        return value


class ManualClock:
    """A clock that moves only when told to."""

    def __init__(self, start: Timestamp | int = 1_700_000_000_000_000) -> None:
        self._now = start if isinstance(start, Timestamp) else Timestamp(start)
        self._lock = threading.Lock()

    def now(self) -> Timestamp:
        return self._now

    def advance(self, by: TimeDuration | float) -> Timestamp:
        """Move forward by a duration or a number of seconds."""
        step = by if isinstance(by, TimeDuration) else TimeDuration.from_seconds(by)
        if step.micros < 0:
            raise InvalidValue("a clock does not go backwards")
        with self._lock:
            self._now = self._now + step
        return self._now

    def set(self, to: Timestamp) -> None:
        with self._lock:
            if to < self._now:
                raise InvalidValue("a clock does not go backwards")
            self._now = to
