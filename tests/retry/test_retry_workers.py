"""External workers: enqueue, claim order, complete, fail, leases, the reaper, idempotency."""

from __future__ import annotations

import pytest

from stdbmod import Database, ManualClock, TimeDuration, Timestamp
from stdbmod.retry import Completion, DeadReason, InvalidTransition, Outcome, StaleLease, TaskNotFound, TaskStatus, queries
from tests.retry.support import ADMIN, WORKER, WORKER2, next_due


def _later(clock: ManualClock, seconds: float) -> Timestamp:
    return clock.now() + TimeDuration.from_seconds(seconds)


def test_enqueue_defaults(db: Database, clock: ManualClock) -> None:
    t = db.call("enqueue", "send_welcome_email", None, {"user_id": 42}, sender=WORKER)
    assert (t.queue, t.status, t.attempts, t.max_attempts, t.backoff_seconds, t.priority) == ("default", TaskStatus.QUEUED, 0, 5, 30, 0)
    assert t.run_after == t.created_at == clock.now() and t.payload == {"user_id": 42}


def test_claim_takes_highest_priority_then_oldest_ready(db: Database, clock: ManualClock) -> None:
    low_old = db.call("enqueue", "j", None, None, None, None, None, 0, sender=WORKER)
    clock.advance(1)
    high_future = db.call("enqueue", "j", None, None, None, None, _later(clock, 60), 9, sender=WORKER)
    high_new = db.call("enqueue", "j", None, None, None, None, None, 5, sender=WORKER)
    clock.advance(1)
    high_newer = db.call("enqueue", "j", None, None, None, None, None, 5, sender=WORKER)
    low_new = db.call("enqueue", "j", sender=WORKER)
    order = [db.call("claim", sender=WORKER).id for _ in range(4)]
    assert order == [high_new.id, high_newer.id, low_old.id, low_new.id]
    assert db.call("claim", sender=WORKER) is None  # only the future one is left
    clock.advance(60)
    assert db.call("claim", sender=WORKER).id == high_future.id


def test_claim_by_queue(db: Database) -> None:
    a = db.call("enqueue", "j", "emails", sender=WORKER)
    b = db.call("enqueue", "j", "hooks", sender=WORKER)
    assert db.call("claim", "hooks", sender=WORKER).id == b.id
    assert db.call("claim", "hooks", sender=WORKER) is None
    assert db.call("claim", "nothing-here", sender=WORKER) is None
    assert db.call("claim", None, sender=WORKER).id == a.id


def test_claim_never_returns_dead_completed_or_running(db: Database) -> None:
    dead = db.call("enqueue", "j", sender=WORKER)
    db.call("cancel", dead.id, sender=ADMIN)
    done = db.call("enqueue", "j", sender=WORKER)
    running = db.call("enqueue", "j", sender=WORKER)
    assert db.call("claim", sender=WORKER).id == done.id
    db.call("complete", done.id, {"ok": True}, sender=WORKER)
    assert db.call("claim", sender=WORKER).id == running.id
    assert db.call("claim", sender=WORKER2) is None


def test_claim_starts_an_attempt_with_a_lease(db: Database, clock: ManualClock) -> None:
    db.call("enqueue", "j", sender=WORKER)
    t = db.call("claim", "default", "worker-1", 120, sender=WORKER)
    assert (t.status, t.attempts, t.claimed_by, t.claimed_at, t.lease_holder) == (TaskStatus.RUNNING, 1, "worker-1", clock.now(), WORKER)
    assert t.lease_expires_at == _later(clock, 120) == next_due(db)
    assert t.last_attempted_at == clock.now()


def test_complete_stores_the_result_and_history(db: Database, clock: ManualClock) -> None:
    db.call("enqueue", "j", sender=WORKER)
    t = db.call("claim", None, "w1", sender=WORKER)
    clock.advance(3)
    done = db.call("complete", t.id, {"ok": True}, sender=WORKER)
    assert (done.status, done.result, done.completed_at, done.attempts) == (TaskStatus.COMPLETED, {"ok": True}, clock.now(), 1)
    assert done.lease_holder is None and next_due(db) == t.lease_expires_at  # the sweep stays armed...
    clock.advance(300)
    assert db.run_due() == 1 and next_due(db) is None  # ...fires, finds no lease ended, and goes
    assert queries.get_task(db, WORKER, t.id).status is TaskStatus.COMPLETED
    [h] = queries.history(db, ADMIN)
    assert (h.outcome, h.worker, h.attempt, h.finished_at.micros - h.started_at.micros) == (Outcome.COMPLETED, "w1", 1, 3_000_000)
    with pytest.raises(InvalidTransition, match="completed, not running"):
        db.call("complete", t.id, sender=WORKER)
    with pytest.raises(TaskNotFound):
        db.call("complete", 999, sender=WORKER)


def test_complete_of_a_queued_task_is_an_invalid_transition(db: Database) -> None:
    t = db.call("enqueue", "j", sender=WORKER)
    with pytest.raises(InvalidTransition) as err:
        db.call("complete", t.id, sender=WORKER)
    assert err.value.status_code == 409


def test_fail_requeues_with_backoff_then_dead(db: Database, clock: ManualClock) -> None:
    t = db.call("enqueue", "j", None, None, 2, 10, sender=WORKER)
    db.call("claim", sender=WORKER)
    f = db.call("fail", t.id, "provider 5xx", sender=WORKER)
    assert (f.status, f.attempts, f.last_error, f.run_after) == (TaskStatus.QUEUED, 1, "provider 5xx", _later(clock, 10))
    assert db.call("claim", sender=WORKER) is None
    clock.advance(10)
    db.call("claim", sender=WORKER)
    d = db.call("fail", t.id, "still 5xx", sender=WORKER)
    assert (d.status, d.dead_reason, d.attempts) == (TaskStatus.DEAD, DeadReason.EXHAUSTED, 2)


def test_the_reaper_requeues_an_expired_lease_as_a_failed_attempt(db: Database, clock: ManualClock) -> None:
    t = db.call("enqueue", "j", None, None, 2, 10, sender=WORKER)
    db.call("claim", None, "w1", 60, sender=WORKER)
    clock.advance(59)
    assert db.run_due() == 0
    clock.advance(1)
    assert db.run_due() == 1
    r = queries.get_task(db, ADMIN, t.id)
    assert (r.status, r.attempts, r.lease_holder, r.run_after) == (TaskStatus.QUEUED, 1, None, _later(clock, 10))
    assert r.last_error is not None and "lease expired" in r.last_error and "w1" in r.last_error
    assert queries.history(db, ADMIN)[0].outcome is Outcome.LEASE_EXPIRED
    clock.advance(10)
    db.call("claim", None, "w2", 60, sender=WORKER2)
    clock.advance(60)
    db.run_due()
    d = queries.get_task(db, ADMIN, t.id)
    assert (d.status, d.dead_reason, d.attempts) == (TaskStatus.DEAD, DeadReason.EXHAUSTED, 2)


def test_heartbeat_extends_the_lease(db: Database, clock: ManualClock) -> None:
    t = db.call("enqueue", "j", sender=WORKER)
    db.call("claim", None, None, 60, sender=WORKER)
    clock.advance(50)
    h = db.call("heartbeat", t.id, 60, sender=WORKER)
    assert h.lease_expires_at == _later(clock, 60)
    assert next_due(db) == _later(clock, 10)  # the sweep keeps its time: the old lease end
    clock.advance(50)
    assert db.run_due() == 1  # the old expiry passed: the sweep fired, reaped nothing...
    assert next_due(db) == h.lease_expires_at  # ...and re-armed at the extended lease's end
    assert queries.get_task(db, ADMIN, t.id).status is TaskStatus.RUNNING
    db.call("heartbeat", t.id, 5, sender=WORKER)  # a shorter lease moves the sweep earlier
    assert next_due(db) == _later(clock, 5)
    assert db.call("complete", t.id, sender=WORKER).status is TaskStatus.COMPLETED
    with pytest.raises(InvalidTransition):
        db.call("heartbeat", t.id, sender=WORKER)


def test_a_stale_worker_is_refused(db: Database, clock: ManualClock) -> None:
    t = db.call("enqueue", "j", None, None, 5, 0, sender=WORKER)
    db.call("claim", None, "slow", 60, sender=WORKER)
    clock.advance(60)
    db.run_due()  # reaped
    assert db.call("claim", None, "fast", 60, sender=WORKER2).attempts == 2
    for name, args in [("complete", (t.id, None)), ("fail", (t.id, "late")), ("heartbeat", (t.id, None))]:
        with pytest.raises(StaleLease, match="leased to another claim") as err:
            db.call(name, *args, sender=WORKER)
        assert err.value.status_code == 409 and not isinstance(err.value, InvalidTransition)
    with pytest.raises(StaleLease):
        db.call("complete", t.id, sender=ADMIN)  # an admin is not the lease holder either
    assert db.call("complete", t.id, "done", sender=WORKER2).result == "done"


def test_the_attempt_fences_a_stale_process_of_the_same_identity(db: Database, clock: ManualClock) -> None:
    """Two processes share WORKER's identity: the lease check cannot tell them apart; the
    attempt each claimed can. Without an attempt, the identity alone is checked (as before)."""
    t = db.call("enqueue", "j", None, None, 5, 0, sender=WORKER)
    first = db.call("claim", None, "proc-a", 60, sender=WORKER)
    clock.advance(60)
    db.run_due()  # proc-a paused past its lease: reaped
    second = db.call("claim", None, "proc-b", 60, sender=WORKER)
    assert (first.attempts, second.attempts) == (1, 2)
    before = db.state_hash()
    for name, args in [("complete", (t.id, None, 1)), ("fail", (t.id, "late", 1)), ("heartbeat", (t.id, None, 1))]:
        with pytest.raises(StaleLease, match="attempt 2"):
            db.call(name, *args, sender=WORKER)
    with pytest.raises(StaleLease):
        db.call("complete_many", [Completion(t.id, None, 1)], sender=WORKER)
    assert db.state_hash() == before
    assert db.call("heartbeat", t.id, None, 2, sender=WORKER).attempts == 2
    assert db.call("complete", t.id, "done", 2, sender=WORKER).result == "done"


def test_a_second_enqueue_with_the_same_key_returns_the_first_task(db: Database) -> None:
    a = db.call("enqueue", "j", None, {"n": 1}, None, None, None, 0, "order-7", sender=WORKER)
    b = db.call("enqueue", "other", "q2", {"n": 2}, None, None, None, 0, "order-7", sender=WORKER2)
    assert b == a
    c = db.call("submit", "j", None, None, None, None, None, 0, "order-8", sender=ADMIN)
    assert c.id != a.id
    assert queries.list_tasks(db, ADMIN).total == 2


def test_attempts_count_claims(db: Database, clock: ManualClock) -> None:
    t = db.call("enqueue", "j", None, None, 5, 0, sender=WORKER)
    for n in (1, 2, 3):
        assert db.call("claim", sender=WORKER).attempts == n
        db.call("fail", t.id, "x", sender=WORKER)
    assert db.call("claim", sender=WORKER).attempts == 4
    assert db.call("complete", t.id, sender=WORKER).attempts == 4


def test_the_last_claim_and_the_last_error_stay_after_fail_complete_and_requeue(db: Database, clock: ManualClock) -> None:
    """Seed 000 is silent on these columns after an attempt ends; docs/http.md states our choice:
    `claimed_by` / `claimed_at` describe the latest claim, `last_error` the latest failure, and
    neither is cleared by a fail, a completion or a requeue (the lease fields are what say a job
    is held now)."""
    t = db.call("enqueue", "j", None, None, 2, 30, sender=WORKER)
    first = clock.now()
    db.call("claim", "default", "w1", sender=WORKER)
    failed = db.call("fail", t.id, "boom", sender=WORKER)
    assert (failed.status, failed.claimed_by, failed.claimed_at, failed.last_error) == (TaskStatus.QUEUED, "w1", first, "boom")
    assert (failed.lease_holder, failed.lease_expires_at) == (None, None)

    clock.advance(30)
    second = clock.now()
    running = db.call("claim", "default", "w2", sender=WORKER2)
    assert (running.claimed_by, running.claimed_at, running.last_error) == ("w2", second, "boom")
    done = db.call("complete", t.id, {"ok": True}, sender=WORKER2)
    assert (done.status, done.claimed_by, done.claimed_at, done.last_error) == (TaskStatus.COMPLETED, "w2", second, "boom")

    d = db.call("enqueue", "j", None, None, 1, sender=WORKER)
    db.call("claim", "default", "w3", sender=WORKER)
    dead = db.call("fail", d.id, "gone", sender=WORKER)
    assert (dead.status, dead.dead_reason) == (TaskStatus.DEAD, DeadReason.EXHAUSTED)
    again = db.call("requeue", d.id, sender=ADMIN)
    assert (again.status, again.attempts, again.claimed_by, again.claimed_at, again.last_error) == (TaskStatus.QUEUED, 0, "w3", second, "gone")


def test_a_claim_without_a_queue_takes_any_queue(db: Database, clock: ManualClock) -> None:
    """The seed's claim body has `queue?`; absent, the claim serves every queue (docs/http.md)."""
    other = db.call("enqueue", "j", "emails", sender=WORKER)
    clock.advance(1)
    db.call("enqueue", "j", sender=WORKER)
    assert db.call("claim", sender=WORKER).id == other.id  # the oldest ready of any queue, not of `default`
