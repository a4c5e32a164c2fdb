"""The lease sweep's and the retention sweep's rows and the retention policies are cached tables
(tables.py, retention.py): every claim and every finish reads them by key, so the writer keeps
them between calls. Each arming decision must still follow the stored rows: within one batch,
and after a call that changed one and then failed (its change, and what it read back, gone)."""

from __future__ import annotations

from pathlib import Path

from stdbmod import At, Database, ManualClock, Module, ReducerContext, SenderError, TimeDuration, Timestamp
from stdbmod.retry import RetryModule, TaskStatus, create_retry_module
from stdbmod.retry import retention as retention_mod
from stdbmod.retry.queues import next_allowed
from stdbmod.retry.transitions import start_claim
from stdbmod.retry.workers import lease_length
from tests.retry.support import ADMIN, WORKER


def test_the_timer_and_policy_tables_are_cached(rm: RetryModule) -> None:
    tables = rm.module.tables
    assert tables["lease_sweep"].cached and tables["retention_sweep"].cached and tables["retry_retention"].cached


def _app(rm: RetryModule) -> Module:
    app = Module("app")
    app.include(rm.module)

    @app.reducer
    def claim_then_fail(ctx: ReducerContext, lease_seconds: int) -> None:
        task = next_allowed(ctx.db, None, ctx.timestamp)
        assert task is not None
        start_claim(ctx, task, "w", lease_length(ctx, lease_seconds))  # arms the sweep earlier
        assert ctx.db.lease_sweep.scheduled_id.find(0) is not None  # read back: now in the cache
        raise SenderError("changed my mind")

    @app.reducer
    def retain_then_fail(ctx: ReducerContext) -> None:
        retention_mod.set_policy(ctx, "completed", 60, None)
        assert retention_mod.policy_of(ctx.db, TaskStatus.COMPLETED).max_age_seconds == 60
        raise SenderError("changed my mind")

    return app


def _sweep_at(db: Database, table: str) -> Timestamp | None:
    with db.read() as v:
        row = getattr(v.db, table).scheduled_id.find(0)
    if row is None:
        return None
    assert isinstance(row.scheduled_at, At)
    return row.scheduled_at.time


def test_the_lease_sweep_follows_every_claim_in_a_batch_and_forgets_a_failed_one(tmp_path: Path, clock: ManualClock) -> None:
    rm = create_retry_module()
    db = Database.create(tmp_path / "app", _app(rm), owner=ADMIN, clock=clock, durable=False)
    try:
        db.call("grant_worker", WORKER, sender=ADMIN)
        for _ in range(6):
            db.call("enqueue", "j", None, None, sender=WORKER)
        now = clock.now()
        out = db.call_many([("claim", (None, "w", lease), WORKER) for lease in (60, 30, 10, 20)])
        assert [t.id for t in out] == [1, 2, 3, 4]
        assert _sweep_at(db, "lease_sweep") == now + TimeDuration.from_seconds(10)
        out = db.call_many([("claim_then_fail", (5,), ADMIN), ("claim", (None, "w", 8), WORKER)])
        assert isinstance(out[0], SenderError) and out[1].id == 5
        # the failed call's sweep at +5 is gone: the claim at +8 moved the stored +10
        assert _sweep_at(db, "lease_sweep") == now + TimeDuration.from_seconds(8)
    finally:
        db.close()


def test_a_finish_arms_retention_by_the_stored_policy(tmp_path: Path, clock: ManualClock) -> None:
    rm = create_retry_module()
    db = Database.create(tmp_path / "app", _app(rm), owner=ADMIN, clock=clock, durable=False)
    try:
        db.call("grant_worker", WORKER, sender=ADMIN)
        for _ in range(2):
            db.call("enqueue", "j", None, None, sender=WORKER)
            db.call("claim", None, "w", sender=WORKER)
        now = clock.now()
        out = db.call_many([("retain_then_fail", (), ADMIN), ("complete", (1, None), WORKER)])
        assert isinstance(out[0], SenderError)
        week = TimeDuration.from_seconds(retention_mod.DEFAULT_AGE[TaskStatus.COMPLETED])
        assert _sweep_at(db, "retention_sweep") == now + week  # the default policy, not the failed 60 s
        out = db.call_many([("set_retention", ("completed", 120), ADMIN), ("complete", (2, None), WORKER)])
        assert _sweep_at(db, "retention_sweep") == now  # set_retention runs the sweep now
    finally:
        db.close()
