"""render.job: a task row as seed 000's job object. Its fields go to `wire.Job` by position, so
this holds each column to its name, with every column given a value of its own."""

from __future__ import annotations

import msgspec

from stdbmod import Identity, Timestamp
from stdbmod.http import render, wire
from stdbmod.retry.tables import DeadReason, Task, TaskStatus


def _ms(n: int) -> Timestamp:
    return Timestamp(n * 1000)


def test_every_column_lands_in_its_own_field() -> None:
    holder = Identity.from_claims("test", "holder")
    task = Task(
        id=7, created_at=_ms(1), updated_at=_ms(2), queue="q", job_type="jt", payload={"p": 1}, status=TaskStatus.DEAD,
        dead_reason=DeadReason.GAVE_UP, attempts=3, max_attempts=9, backoff_seconds=11, priority=4, neg_priority=-4, in_module=False,
        run_after=_ms(5), claimed_at=_ms(6), claimed_by="w1", lease_holder=holder, lease_expires_at=_ms(8), last_attempted_at=_ms(9),
        last_error="boom", completed_at=_ms(10), result={"r": 2}, idempotency_key="idem", finished_at=_ms(12), snoozes=13,
        max_backoff_seconds=14, backoff_jitter=0.25, error_fingerprint="fp", triage_hold=True, recurring_id=15,
    )
    got = msgspec.to_builtins(render.job(task))
    assert got == {
        "id": 7, "created_at": 1, "updated_at": 2, "queue": "q", "job_type": "jt", "payload": {"p": 1}, "status": "dead",
        "attempts": 3, "max_attempts": 9, "backoff_seconds": 11, "run_after": 5, "claimed_at": 6, "claimed_by": "w1",
        "last_attempted_at": 9, "last_error": "boom", "completed_at": 10, "result": {"r": 2}, "dead_reason": "gave_up",
        "priority": 4, "lease_expires_at": 8, "lease_holder": holder.to_hex(), "idempotency_key": "idem", "finished_at": 12,
        "snoozes": 13, "max_backoff_seconds": 14, "backoff_jitter": 0.25, "error_fingerprint": "fp", "triage_hold": True,
        "recurring_id": 15,
    }
    assert list(got) == [f.name for f in msgspec.structs.fields(wire.Job)]


def test_missing_columns_are_null() -> None:
    task = Task(
        id=1, created_at=_ms(1), updated_at=_ms(1), queue="q", job_type="jt", payload=None, status=TaskStatus.QUEUED,
        dead_reason=None, attempts=0, max_attempts=1, backoff_seconds=1, priority=0, neg_priority=0, in_module=False, run_after=_ms(1),
    )
    got = msgspec.to_builtins(render.job(task))
    assert got["status"] == "queued" and got["dead_reason"] is None and got["lease_holder"] is None and got["claimed_at"] is None
