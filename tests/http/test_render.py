"""The job routes' answers: render.job (a task row as seed 000's job object: its fields go to
`wire.Job` by position, so each column is held to its name, with every column given a value of
its own), and a call between the module's connection hooks."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import httpx
import msgspec

from stdbmod import Database, Identity, PrimaryKey, ReducerContext, Timestamp
from stdbmod.http import render, wire
from stdbmod.http.app import create_app
from stdbmod.http.routes_jobs import PREFIX
from stdbmod.local.tokens import SigningKey
from stdbmod.retry import create_retry_module
from stdbmod.retry.tables import DeadReason, Task, TaskStatus

from .servers import ThreadServer, bearer


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


def test_the_job_routes_run_connection_hooks_around_each_call(tmp_path: Path) -> None:
    """A module with `client_connected` / `client_disconnected`: a job route's call runs between
    them (`ServerContext.call_typed`'s other way), and its answer is the call's."""
    rm = create_retry_module()

    @rm.module.table
    class Visit(msgspec.Struct):
        id: Annotated[int, PrimaryKey(auto_inc=True)]
        kind: str

    @rm.module.client_connected
    def connected(ctx: ReducerContext) -> None:
        ctx.db.visit.insert(Visit(0, "connected"))

    @rm.module.client_disconnected
    def disconnected(ctx: ReducerContext) -> None:
        ctx.db.visit.insert(Visit(0, "disconnected"))

    key = SigningKey.generate()
    owner = key.claims("owner")
    db = Database.create(tmp_path / "db", rm.module, owner=owner.identity, durable=False)
    try:
        with ThreadServer(create_app(db, key=key, run_scheduler=False)) as server:
            body = {"queue": "q", "job_type": "t", "payload": {}}
            r = httpx.post(server.base + PREFIX + "/jobs", json=body, headers=bearer(key.issue_token(owner)), timeout=30)
        assert r.status_code == 200, r.text
        assert r.json()["queue"] == "q"
        with db.read() as view:
            kinds = [v.kind for v in view.db.visit.iter()]
        assert kinds == ["connected", "disconnected"]
    finally:
        db.close()
