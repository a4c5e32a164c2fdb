"""Unique jobs over a window (issue 16, docs/retry.md "Unique jobs").

An enqueue with a `UniqueSpec` computes a key from the fields it names (job type, queue, payload,
partition key, or one payload entry `payload.NAME`), stored in the task's indexed `unique_key`.
Before adding a task, the enqueue walks the tasks holding that key, newest first, and returns the
first one in one of the spec's states that was created inside the window. The writer runs one
transaction at a time, so concurrent identical enqueues make exactly one task.
"""

from __future__ import annotations

import hashlib
from typing import Any

import msgspec

from ..runtime import ReducerContext
from ..types import TimeDuration
from .errors import InvalidArgument
from .limits import MAX_NAME_CHARS, MAX_UNIQUE_PERIOD_SECONDS, check_int
from .tables import NewTask, Task, TaskStatus, UniqueSpec

FIELDS = ("job_type", "queue", "payload", "partition_key")
PAYLOAD_ENTRY = "payload."
DEFAULT_STATES = [TaskStatus.QUEUED, TaskStatus.RUNNING, TaskStatus.COMPLETED]


def checked_unique(spec: UniqueSpec) -> UniqueSpec:
    """`spec` with its fields sorted and deduplicated, its states filled in; InvalidArgument
    names what is wrong."""
    if not isinstance(spec, UniqueSpec):
        raise InvalidArgument("unique must be a UniqueSpec")
    if not spec.fields:
        raise InvalidArgument("unique.fields: give at least one field")
    for name in spec.fields:
        entry = isinstance(name, str) and name.startswith(PAYLOAD_ENTRY) and 0 < len(name) - len(PAYLOAD_ENTRY) <= MAX_NAME_CHARS
        if name not in FIELDS and not entry:
            raise InvalidArgument(f"unique.fields: {name!r} is not one of {', '.join(FIELDS)} or payload.NAME")
    period = None if spec.period_seconds is None else check_int("unique.period_seconds", spec.period_seconds, 1, MAX_UNIQUE_PERIOD_SECONDS)
    states = DEFAULT_STATES if spec.states is None else spec.states
    if not states:
        raise InvalidArgument("unique.states: give at least one status")
    try:
        states = sorted({TaskStatus(s) for s in states}, key=list(TaskStatus).index)
    except ValueError:
        raise InvalidArgument(f"unique.states must be among {', '.join(s.value for s in TaskStatus)}") from None
    return UniqueSpec(sorted(set(spec.fields)), period, states)


def _value(task: NewTask, name: str) -> Any:
    if name.startswith(PAYLOAD_ENTRY):
        payload = task.payload
        return payload.get(name[len(PAYLOAD_ENTRY) :]) if isinstance(payload, dict) else None
    return getattr(task, name)


def unique_key(task: NewTask, spec: UniqueSpec) -> str:
    """The key of a checked task under its checked spec: a hash of the field names and values
    (maps encoded with sorted keys, so {"a": 1, "b": 2} and {"b": 2, "a": 1} are one job)."""
    named = [[name, _value(task, name)] for name in spec.fields]
    digest = hashlib.sha256(msgspec.msgpack.encode(named, order="sorted")).hexdigest()
    return "u1:" + digest


def existing(ctx: ReducerContext, key: str, spec: UniqueSpec) -> Task | None:
    """The newest task holding `key` that is in one of the spec's states and was created inside
    its window; the walk stops at the first task older than the window."""
    states = set(spec.states or DEFAULT_STATES)
    cutoff = None if spec.period_seconds is None else ctx.timestamp - TimeDuration.from_seconds(spec.period_seconds)
    for task in ctx.db.task.unique_key.filter(key, reverse=True):
        if cutoff is not None and task.created_at <= cutoff:
            return None
        if task.status in states:
            return task  # type: ignore[no-any-return]
    return None
