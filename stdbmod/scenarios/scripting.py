"""Scripted in-module handlers: each job type gets a queue of outcomes, one per call.

The scripted handler is installed in the task-retry module's handler registry (the runner puts
the registry back as it was afterwards). It runs inside the retry module's attempt, so `write`
rows go through the handler context's tables and share the attempt's fate: kept when the
handler returns or gives up, rolled back when it fails or raises.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

import msgspec

from .. import codec
from ..module import Module
from .format import Outcome
from .values import Resolver


class ScriptError(RuntimeError):
    """A scripted handler ran with no outcome left, or could not do what the script says."""


class HandlerScript:
    def __init__(self, module: Module, handlers: dict[str, Callable[..., Any]], resolve: Resolver) -> None:
        from ..retry import (  # only scenarios that script handlers need it
            GiveUp,
            RetryableError,
            RetryIn,
            Snooze,
        )

        self._give_up = GiveUp
        self._retryable = RetryableError
        self._retry_in = RetryIn
        self._snooze = Snooze
        self._module = module
        self._handlers = handlers
        self._resolve = resolve
        self.queues: dict[str, deque[Outcome]] = {}
        self.problems: list[str] = []
        self.calls: list[tuple[str, str]] = []  # (job type, outcome) in call order

    def add(self, job_type: str, outcomes: list[Outcome], replace: bool) -> None:
        q = self.queues.setdefault(job_type, deque())
        if replace:
            q.clear()
        q.extend(outcomes)
        self._handlers[job_type] = self._handler(job_type)

    def take_problems(self) -> list[str]:
        out, self.problems = self.problems, []
        return out

    def _handler(self, job_type: str) -> Callable[[Any, Any], Any]:
        def scripted(ctx: Any, payload: Any) -> Any:
            q = self.queues.get(job_type)
            if not q:
                self.problems.append(f"the handler for {job_type!r} ran with no scripted outcome left")
                raise ScriptError(f"no scripted outcome left for {job_type!r}")
            o = q.popleft()
            self.calls.append((job_type, o.outcome))
            if o.write is not None:
                self._write(ctx, o)
            if o.outcome == "succeed":
                return self._resolve(o.result)
            if o.outcome == "fail":
                raise self._retryable(o.message or "scripted failure")
            if o.outcome == "give_up":
                raise self._give_up(o.message or "scripted give-up")
            if o.outcome == "retry_in":
                raise self._retry_in(o.seconds, o.message)
            if o.outcome == "snooze":
                raise self._snooze(o.seconds, o.message)
            raise RuntimeError(o.message or "scripted exception")

        scripted.__name__ = f"scripted_{job_type}"
        return scripted

    def _write(self, ctx: Any, o: Outcome) -> None:
        assert o.write is not None
        t = self._module.tables.get(o.write.table)
        if t is None:
            self.problems.append(f"script for write: no table {o.write.table!r}")
            raise ScriptError(f"no table {o.write.table!r}")
        row = dict(self._resolve(o.write.row))
        if t.auto_inc and t.primary_key is not None:
            row.setdefault(t.primary_key, 0)
        try:
            value = codec.convert(row, t.row_type)
        except (msgspec.ValidationError, ValueError, TypeError) as e:
            self.problems.append(f"script write into {t.name}: {e}")
            raise ScriptError(str(e)) from None
        getattr(ctx.db, t.name).insert(value)
