"""Seed 000's backoff table, exactly: 30 s, 1 min, 2 min, 4 min, then dead on the 5th failure
(max_attempts=5, backoff_seconds=30), under the manual clock; for workers and for handlers."""

from __future__ import annotations

from typing import Any

from stdbmod import Database, ManualClock, TimeDuration
from stdbmod.retry import DeadReason, HandlerContext, RetryableError, RetryModule, TaskStatus, backoff_delay, queries
from tests.retry.support import ADMIN, WORKER, next_due

SEED_000_TABLE = [(1, 30), (2, 60), (3, 120), (4, 240)]  # attempt -> delay before retry, seconds


def test_the_formula() -> None:
    for attempt, seconds in SEED_000_TABLE:
        assert backoff_delay(30, attempt) == TimeDuration.from_seconds(seconds)
    assert backoff_delay(0, 7) == TimeDuration(0)
    assert backoff_delay(30, 500).seconds() == 30 * 86_400  # capped, never an overflow


def test_seed_000_backoff_table_with_a_worker(db: Database, clock: ManualClock) -> None:
    t = db.call("enqueue", "send_welcome_email", None, {"user_id": 42}, sender=WORKER)  # the defaults
    delays = []
    for attempt in range(1, 6):
        claimed = db.call("claim", "default", "worker-1", sender=WORKER)
        assert (claimed.id, claimed.attempts) == (t.id, attempt)
        failed = db.call("fail", t.id, "provider 5xx", sender=WORKER)
        if failed.status is TaskStatus.DEAD:
            break
        delay = failed.run_after - clock.now()
        delays.append((attempt, delay.seconds()))
        clock.advance(delay.micros / 1e6 - 1)
        assert db.call("claim", sender=WORKER) is None  # one second early: not yet
        clock.advance(1)
    assert delays == SEED_000_TABLE
    assert (failed.status, failed.dead_reason, failed.attempts) == (TaskStatus.DEAD, DeadReason.EXHAUSTED, 5)


def test_seed_000_backoff_table_with_a_handler(db: Database, rm: RetryModule, clock: ManualClock) -> None:
    runs: list[Any] = []

    @rm.handler("flaky")
    def flaky(ctx: HandlerContext, payload: Any) -> None:
        runs.append((ctx.attempt, ctx.timestamp))
        raise RetryableError("provider 5xx")

    t = db.call("submit", "flaky", sender=ADMIN)
    start = clock.now()
    db.run_due()
    for _ in range(4):
        due = next_due(db)
        assert due is not None
        clock.set(due)
        db.run_due()
    offsets = [(n, (ts - start).seconds()) for n, ts in runs]
    assert offsets == [(1, 0), (2, 30), (3, 90), (4, 210), (5, 450)]  # the cumulative 30/60/120/240
    dead = queries.get_task(db, ADMIN, t.id)
    assert (dead.status, dead.dead_reason, dead.attempts) == (TaskStatus.DEAD, DeadReason.EXHAUSTED, 5)
    assert next_due(db) is None
