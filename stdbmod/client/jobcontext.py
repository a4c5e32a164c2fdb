"""What a running handler may learn about its job: `current_job()`."""

from __future__ import annotations

import threading
from contextvars import ContextVar
from dataclasses import dataclass, field

from .types import Job


@dataclass(frozen=True)
class JobContext:
    """The claimed job, and whether its lease was lost.

    `lease_lost` is set when the server refused a heartbeat (the lease ran out and the job may be
    someone else's now): the worker will not report this attempt, so a long sync handler may check
    it and stop early. An async handler is cancelled instead."""

    job: Job
    worker_id: str
    lease_lost: threading.Event = field(default_factory=threading.Event)

    @property
    def attempt(self) -> int:
        return self.job.attempts


_current: ContextVar[JobContext] = ContextVar("stdbmod_current_job")


def current_job() -> JobContext:
    """The job the calling handler runs (in its thread or its task). LookupError outside a handler."""
    return _current.get()
