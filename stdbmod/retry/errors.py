"""The retry module's errors, and the two signals a handler may raise.

The errors are `SenderError`s: a reducer that raises one rolls back and its caller sees the
message. Each carries the HTTP status the front ends map it to.
"""

from __future__ import annotations

from ..errors import SenderError, StdbError


class NotAuthorized(SenderError, PermissionError):
    """The caller lacks the role (admin, or worker) the reducer or read requires."""

    status_code = 403


class TaskNotFound(SenderError, LookupError):
    status_code = 404

    def __init__(self, task_id: int) -> None:
        super().__init__(f"no task with id {task_id}")
        self.task_id = task_id


class InvalidTransition(SenderError):
    """The task (or the admin set) is not in a state that allows this: complete a queued task,
    requeue one that is not dead, remove the last admin..."""

    status_code = 409


class StaleLease(SenderError):
    """complete / fail / heartbeat of a running task by anyone but its current lease holder:
    typically a worker whose lease expired and whose task was claimed again."""

    status_code = 409
    code = "stale_lease"  # over HTTP, beside the message: a worker tells the 409s apart by it


class TaskCancelled(InvalidTransition):
    """heartbeat / complete / fail (or snooze) by the holder of an attempt an admin cancelled
    while it ran: the task is dead (`cancelled`), and the worker should stop its work."""

    code = "cancelled"


class AttemptTimedOut(StaleLease):
    """A report by the holder of an attempt that ran past its task's `timeout_seconds`: the
    attempt has ended (the sweep records it as `timeout`), whatever the lease said."""

    code = "timeout"


class InvalidArgument(SenderError, ValueError):
    status_code = 400


# --- signals a handler raises --------------------------------------------------------------------


class RetryableError(StdbError):
    """Raised by a handler: this attempt failed for a passing reason. The handler's writes are
    rolled back, the message (no traceback) is recorded, and the next attempt is scheduled with
    backoff (or the task is dead/exhausted if that was the last attempt)."""


class GiveUp(StdbError):
    """Raised by a handler: the task can never succeed (its arguments are invalid). The task goes
    to dead/gave_up at once; the writes the handler made before raising are kept."""


class RetryIn(StdbError):
    """Raised by a handler: this attempt failed, and the next one is due in `seconds` (instead of
    the backoff). It is a failed attempt like `RetryableError`: the writes are rolled back, and a
    task out of attempts is dead/exhausted all the same."""

    def __init__(self, seconds: int, message: str = "") -> None:
        super().__init__(message or f"retry in {seconds} s")
        self.seconds = seconds


class Snooze(StdbError):
    """Raised by a handler: not now, run again in `seconds`. The attempt is given back (it does
    not count against max_attempts) and the handler's writes are rolled back. A task may snooze
    `MAX_SNOOZES` times (limits.py); past that a snooze spends the attempt like a failure."""

    def __init__(self, seconds: int, message: str = "") -> None:
        super().__init__(message or f"snoozed for {seconds} s")
        self.seconds = seconds
