"""Rendering: JSON responses, and the task-retry module's rows in seed 000's shape."""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from .. import codec
from ..types import Identity, Timestamp
from . import wire


class _JsonResponse(Response):
    """A 200..299 JSON answer without extra headers: its two headers written directly, as
    Starlette's `init_headers` would write them (content-length, then content-type)."""

    media_type = "application/json"

    def __init__(self, body: bytes, status_code: int) -> None:
        self.status_code = status_code
        self.background = None
        self.body = body
        self.raw_headers = [(b"content-length", str(len(body)).encode()), (b"content-type", b"application/json")]


def json_response(content: Any, status_code: int = 200, headers: Mapping[str, str] | None = None) -> Response:
    """`content` (Structs, special types, plain data) as JSON, encoded by msgspec."""
    body = codec.json_encoder.encode(content)
    if headers is None and 200 <= status_code < 300 and status_code != 204:
        return _JsonResponse(body, status_code)
    return Response(body, status_code, headers=headers, media_type="application/json")


def millis(t: Timestamp | None) -> int | None:
    return None if t is None else t.micros // 1000


# An enum member's value, remembered: `.value` is a Python-level property on every read.
_ENUM_TEXT: dict[enum.Enum, Any] = {}


def _text(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, enum.Enum):
        text = _ENUM_TEXT.get(value)
        if text is None:
            text = _ENUM_TEXT[value] = value.value
        return text
    if isinstance(value, Identity):
        return value.to_hex()
    return value


def job(task: Any) -> wire.Job:
    """A `Task` row as seed 000's job object (times in epoch milliseconds). Its fields are given
    in `wire.Job`'s order, positionally: msgspec matches keywords one by one
    (tests/http/test_render.py holds the order to the field names)."""
    return wire.Job(
        task.id,
        task.created_at.micros // 1000,
        task.updated_at.micros // 1000,
        task.queue,
        task.job_type,
        task.payload,
        _text(task.status),
        task.attempts,
        task.max_attempts,
        task.backoff_seconds,
        task.run_after.micros // 1000,
        millis(task.claimed_at),
        task.claimed_by,
        millis(task.last_attempted_at),
        task.last_error,
        millis(task.completed_at),
        task.result,
        _text(task.dead_reason),
        task.priority,
        millis(task.lease_expires_at),
        _text(task.lease_holder),
        task.idempotency_key,
        millis(task.finished_at),
        task.snoozes,
        task.max_backoff_seconds,
        task.backoff_jitter,
        task.error_fingerprint,
        task.triage_hold,
        task.recurring_id,
    )


LOOP_ENCODE_MAX = 32  # jobs a batch answer may hold and still be encoded on the event loop


async def jobs_response(tasks: Sequence[Any]) -> Response:
    """A batch route's answer: `tasks` as `wire.Jobs`. Up to 1,000 jobs of up to a body's size
    each (~100 MiB) took seconds to render and encode, and on the event loop every other client
    waited that long. Past a few jobs, they are rendered and encoded in a worker thread one at a
    time, so the loop's thread takes the GIL back between two jobs."""
    if len(tasks) <= LOOP_ENCODE_MAX:
        return json_response(wire.Jobs([job(t) for t in tasks]))
    return _JsonResponse(await run_in_threadpool(_encode_jobs, tasks), 200)


def _encode_jobs(tasks: Sequence[Any]) -> bytes:
    """`wire.Jobs` of `tasks` as JSON, byte for byte as `codec.json_encoder` writes it whole."""
    encode = codec.json_encoder.encode
    return b'{"jobs":[' + b",".join([encode(job(t)) for t in tasks]) + b"]}"


def attempt(row: Any) -> wire.AttemptOut:
    return wire.AttemptOut(
        id=row.id,
        task_id=row.task_id,
        job_type=row.job_type,
        attempt=row.attempt,
        outcome=str(_text(row.outcome)),
        error=row.error,
        worker=None if row.worker is None else str(_text(row.worker)),
        started_at=millis(row.started_at),
        finished_at=millis(row.finished_at),
    )


def page(p: Any) -> wire.JobPage:
    return wire.JobPage(items=[job(t) for t in p.items], page=p.page, per_page=p.per_page, total=p.total)
