"""How a handler's run ends, and what that does to its task: shared by the two handler forms
(in the attempt's transaction, handlers.py; as a procedure, io_handlers.py)."""

from __future__ import annotations

import contextlib
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..runtime import ReducerContext
from . import transitions
from .errors import GiveUp, RetryableError, RetryIn, Snooze
from .limits import MAX_SNOOZE_SECONDS, unstorable
from .tables import Outcome, Task


class AttemptFacts:
    """What both handler contexts (in the transaction, and I/O outside it) say of the attempt."""

    __slots__ = ()
    task: Task

    @property
    def task_id(self) -> int:
        return self.task.id

    @property
    def attempt(self) -> int:
        return self.task.attempts

    @property
    def job_type(self) -> str:
        return self.task.job_type


HANDLER_WORKER = "handler"  # the `worker` an in-module attempt is recorded under


@dataclass
class AttemptResult:
    """A handler's run: its result, or why it failed (at most one of the reasons is set)."""

    result: Any = None
    error: str | None = None
    gave_up: str | None = None
    retry_in: int | None = None
    snooze: int | None = None

    @property
    def keeps_writes(self) -> bool:
        """A return or GiveUp keeps the handler's writes; every other end rolls them back."""
        return self.error is None and self.snooze is None


def run_handler(call: Callable[[], Any], savepoint: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext) -> AttemptResult:
    """Run `call()` (the handler) and classify how it ended. Inside `savepoint()`: a return or
    GiveUp leaves it normally (its writes kept), anything else leaves it by the exception."""
    r = AttemptResult()
    try:
        with savepoint():
            try:
                r.result = call()
                why = unstorable(r.result)
                if why is not None:
                    raise RetryableError(f"the handler returned a result that cannot be stored: {why}")
            except GiveUp as e:
                r.gave_up = str(e) or "gave up"
    except RetryableError as e:
        r.error = str(e) or type(e).__name__
    except RetryIn as e:
        r.error, r.retry_in = str(e), _seconds(e.seconds)
    except Snooze as e:
        r.snooze = _seconds(e.seconds)
    except Exception:
        r.error = traceback.format_exc()
    return r


def settle(ctx: ReducerContext, handlers: Mapping[str, Any], current: Task, r: AttemptResult) -> None:
    """Record the attempt's end on its (running) task, in the caller's transaction."""
    if r.gave_up is not None:
        transitions.fail(ctx, handlers, current, r.gave_up, Outcome.GAVE_UP, HANDLER_WORKER)
    elif r.snooze is not None:
        transitions.snooze(ctx, handlers, current, r.snooze, HANDLER_WORKER)
    elif r.error is not None:
        transitions.fail(ctx, handlers, current, r.error, Outcome.FAILED, HANDLER_WORKER, retry_in=r.retry_in)
    else:
        transitions.succeed(ctx, current, r.result, HANDLER_WORKER)


def _seconds(value: Any) -> int:
    """A handler's RetryIn / Snooze delay as whole seconds within the bound (a bad value is
    the handler's bug: clamped, not a crash of the attempt's bookkeeping)."""
    try:
        seconds = int(value)
    except (TypeError, ValueError, OverflowError):
        return 0
    return min(max(seconds, 0), MAX_SNOOZE_SECONDS)
