"""The failure policy (docs/retry.md, "Failure policy"): fail with retry false or retry_in_seconds,
snooze (bounded), handlers' RetryIn and Snooze, an admin's run now, and the backoff options (a
cap, jitter drawn from ctx.rng that a re-execution of the commit log draws again)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from stdbmod import Database, ManualClock, TimeDuration
from stdbmod.retry import (
    DeadReason,
    HandlerContext,
    InvalidArgument,
    InvalidTransition,
    NewTask,
    NotAuthorized,
    Outcome,
    RetryIn,
    RetryModule,
    Snooze,
    TaskStatus,
    backoff_delay,
    queries,
)
from stdbmod.retry.fingerprint import fingerprint
from stdbmod.retry.limits import MAX_SNOOZES
from stdbmod.runtime import reexecute
from tests.retry.support import ADMIN, WORKER, replayed_hash


def claimed(db: Database, **options: Any) -> Any:
    task = db.call("enqueue", NewTask("job", queue="q", **options), sender=WORKER)
    got = db.call("claim", "q", "w1", sender=WORKER)
    assert got is not None and got.id == task.id
    return got


def test_fail_without_retry_discards_a_fresh_attempt(db: Database) -> None:
    t = claimed(db, max_attempts=5)
    dead = db.call("fail", t.id, "invalid card 4242", 1, False, sender=WORKER)
    assert (dead.status, dead.dead_reason, dead.attempts) == (TaskStatus.DEAD, DeadReason.DISCARDED, 1)
    assert dead.error_fingerprint == fingerprint("invalid card 4242") and not dead.triage_hold
    assert queries.history(db, ADMIN)[0].outcome is Outcome.DISCARDED
    assert [x.id for x in queries.dead_letter(db, ADMIN).items] == [t.id]


def test_retry_in_seconds_overrides_the_backoff_for_that_attempt_only(db: Database, clock: ManualClock) -> None:
    t = claimed(db, max_attempts=3, backoff_seconds=30)
    after = db.call("fail", t.id, "rate limited", None, True, 600, sender=WORKER)
    assert after.status is TaskStatus.QUEUED and after.run_after == clock.now() + TimeDuration.from_seconds(600)
    clock.advance(600)
    db.call("claim", "q", sender=WORKER)
    after = db.call("fail", t.id, "5xx", sender=WORKER)  # the formula again: 30 * 2**(2-1)
    assert after.run_after == clock.now() + TimeDuration.from_seconds(60)
    clock.advance(60)
    db.call("claim", "q", sender=WORKER)
    dead = db.call("fail", t.id, "rate limited", None, True, 5, sender=WORKER)  # the last attempt: exhausted all the same
    assert (dead.status, dead.dead_reason) == (TaskStatus.DEAD, DeadReason.EXHAUSTED)


@pytest.mark.parametrize("args", [(None, False, 5), (None, True, -1), (None, True, 10**9)])
def test_bad_policy_arguments_are_refused_and_change_nothing(db: Database, args: tuple[Any, ...]) -> None:
    t = claimed(db)
    before = db.state_hash()
    with pytest.raises(InvalidArgument):
        db.call("fail", t.id, "x", *args, sender=WORKER)
    assert db.state_hash() == before


def test_snooze_gives_the_attempt_back(db: Database, clock: ManualClock) -> None:
    t = claimed(db, max_attempts=1)
    back = db.call("snooze", t.id, 120, sender=WORKER)
    assert (back.status, back.attempts, back.snoozes, back.lease_holder) == (TaskStatus.QUEUED, 0, 1, None)
    assert back.run_after == clock.now() + TimeDuration.from_seconds(120)
    assert queries.history(db, ADMIN)[0].outcome is Outcome.SNOOZED
    assert db.call("claim", "q", sender=WORKER) is None  # not before its time
    clock.advance(120)
    again = db.call("claim", "q", sender=WORKER)
    assert again.attempts == 1  # max_attempts 1, and still one attempt to run
    done = db.call("complete", t.id, "ok", sender=WORKER)
    assert done.status is TaskStatus.COMPLETED


def test_snooze_is_for_the_lease_holder_of_a_running_task(db: Database) -> None:
    t = db.call("enqueue", "job", "q", sender=WORKER)
    with pytest.raises(InvalidTransition):
        db.call("snooze", t.id, 5, sender=WORKER)
    with pytest.raises(InvalidArgument):
        db.call("snooze", t.id, -5, sender=WORKER)


def test_snoozes_are_bounded(db: Database, clock: ManualClock) -> None:
    t = claimed(db, max_attempts=2)
    for _ in range(MAX_SNOOZES):
        db.call("snooze", t.id, 0, sender=WORKER)
        db.call("claim", "q", sender=WORKER)
    spent = db.call("snooze", t.id, 30, sender=WORKER)  # past the bound it counts as a failed attempt
    assert (spent.status, spent.snoozes, spent.attempts) == (TaskStatus.QUEUED, MAX_SNOOZES, 1)
    assert spent.run_after == clock.now() + TimeDuration.from_seconds(30) and "limit" in (spent.last_error or "")
    clock.advance(30)
    db.call("claim", "q", sender=WORKER)
    dead = db.call("snooze", t.id, 30, sender=WORKER)
    assert (dead.status, dead.dead_reason) == (TaskStatus.DEAD, DeadReason.EXHAUSTED)


def test_handlers_retry_in_and_snooze(tmp_path: Path, rm: RetryModule, clock: ManualClock) -> None:
    runs: list[int] = []

    @rm.handler("poll")
    def poll(ctx: HandlerContext, payload: Any) -> str:
        runs.append(ctx.attempt)
        if len(runs) == 1:
            raise Snooze(300)  # not ready: the attempt is given back
        if len(runs) == 2:
            raise RetryIn(45, "upstream says 45 s")
        return "done"

    db = Database.create(tmp_path / "db", rm.module, owner=ADMIN, clock=clock, durable=False)
    try:
        t = db.call("submit", "poll", None, None, 3, 10, sender=ADMIN)
        db.run_due()
        got = queries.get_task(db, ADMIN, t.id)
        assert (got.status, got.attempts, got.snoozes) == (TaskStatus.QUEUED, 0, 1)
        assert got.run_after == clock.now() + TimeDuration.from_seconds(300)
        clock.advance(300)
        db.run_due()
        got = queries.get_task(db, ADMIN, t.id)
        assert (got.attempts, got.last_error) == (1, "upstream says 45 s")
        assert got.run_after == clock.now() + TimeDuration.from_seconds(45)
        clock.advance(45)
        db.run_due()
        got = queries.get_task(db, ADMIN, t.id)
        assert (got.status, got.attempts, got.result) == (TaskStatus.COMPLETED, 2, "done")
        assert runs == [1, 1, 2]
        assert [h.outcome for h in reversed(queries.history(db, ADMIN))] == [Outcome.SNOOZED, Outcome.FAILED, Outcome.COMPLETED]
    finally:
        db.close()


def test_run_now_makes_a_scheduled_or_backing_off_task_due(db: Database, clock: ManualClock) -> None:
    later = db.call("enqueue", "job", "q", None, None, None, clock.now() + TimeDuration.from_seconds(3600), sender=WORKER)
    with pytest.raises(NotAuthorized):
        db.call("run_now", later.id, sender=WORKER)
    assert db.call("claim", "q", sender=WORKER) is None
    now = db.call("run_now", later.id, sender=ADMIN)
    assert now.run_after == clock.now()
    t = db.call("claim", "q", sender=WORKER)
    assert t.id == later.id
    with pytest.raises(InvalidTransition):
        db.call("run_now", t.id, sender=ADMIN)  # running
    db.call("fail", t.id, "x", sender=WORKER)  # backing off 30 s
    assert db.call("run_now", t.id, sender=ADMIN).run_after == clock.now()
    assert db.call("claim", "q", sender=WORKER).attempts == 2


def test_run_now_fires_a_handler_task(tmp_path: Path, rm: RetryModule, clock: ManualClock) -> None:
    rm.handlers["h"] = lambda ctx, payload: "ran"
    db = Database.create(tmp_path / "db", rm.module, owner=ADMIN, clock=clock, durable=False)
    try:
        t = db.call("submit", "h", None, None, None, None, clock.now() + TimeDuration.from_seconds(86_400), sender=ADMIN)
        db.call("run_now", t.id, sender=ADMIN)
        db.run_due()
        assert queries.get_task(db, ADMIN, t.id).status is TaskStatus.COMPLETED
    finally:
        db.close()


def test_the_default_backoff_is_seed_000s_and_the_cap_bounds_it() -> None:
    assert [backoff_delay(30, n).seconds() for n in (1, 2, 3, 4)] == [30, 60, 120, 240]
    assert [backoff_delay(30, n, 100).seconds() for n in (1, 2, 3, 4)] == [30, 60, 100, 100]


def test_capped_and_jittered_backoff_replays_to_the_same_state(tmp_path: Path, db: Database, clock: ManualClock) -> None:
    runs = []
    for i in range(6):
        t = claimed(db, max_attempts=9, backoff_seconds=100, max_backoff_seconds=150, backoff_jitter=0.5)
        for n in range(1, 4):
            after = db.call("fail", t.id, f"e{i}", sender=WORKER)
            delay = (after.run_after.micros - clock.now().micros) / 1e6
            cap = min(100 * 2 ** (n - 1), 150)
            assert cap * 0.5 <= delay <= cap  # jitter only shortens the capped delay
            runs.append(delay)
            clock.advance(cap)
            assert db.call("claim", "q", sender=WORKER).id == t.id
        clock.advance(1)
    assert len(set(runs)) > 1  # the draws differ from one failure to the next
    # the same calls, re-executed from the commit log, draw the same jitter
    copy = Database.create(tmp_path / "again", db.module, owner=db.owner, identity=db.identity, run_init=False, durable=False)
    try:
        reexecute(copy, db.commit_log())
        assert copy.state_hash() == db.state_hash()
    finally:
        copy.close()
    assert replayed_hash(db, tmp_path / "applied") == db.state_hash()
