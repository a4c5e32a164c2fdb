"""The lease sweep: one timer, due at the earliest lease end, reaping every ended lease when it
fires; and the legacy per-claim timers of older databases, which still fire but reap only a lease
that has really ended."""

from __future__ import annotations

from pathlib import Path

import msgspec

from stdbmod import At, Database, ManualClock, Range, ReducerContext, TimeDuration
from stdbmod.retry import Completion, LeaseTimer, Outcome, RetryModule, TaskStatus, queries
from stdbmod.retry.transitions import SWEEP_SPACING
from tests.retry.conftest import published
from tests.retry.support import ADMIN, WORKER, next_due


def status(db: Database, task_id: int) -> tuple[str, int]:
    t = queries.get_task(db, ADMIN, task_id)
    return t.status.value, t.attempts


def test_one_firing_reaps_every_ended_lease_earliest_first_and_rearms(db: Database, clock: ManualClock) -> None:
    ids = [db.call("enqueue", "j", None, None, 3, 0, sender=WORKER).id for _ in range(4)]
    for lease in (30, 10, 20, 90):  # claims ids[0..3] in order, with these leases
        db.call("claim", None, "w", lease, sender=WORKER)
    assert next_due(db) == clock.now() + TimeDuration.from_seconds(10)
    with db.read() as v:
        assert v.db.lease_sweep.count() == 1  # one timer, however many claims
    clock.advance(25)
    assert db.run_due() == 1  # one firing...
    assert [status(db, i) for i in ids] == [("running", 1), ("queued", 1), ("queued", 1), ("running", 1)]
    reaped = [h.task_id for h in reversed(queries.history(db, ADMIN)) if h.outcome is Outcome.LEASE_EXPIRED]
    assert reaped == [ids[1], ids[2]]  # ...reaped both ended leases, the earlier end first
    assert next_due(db) == clock.now() + TimeDuration.from_seconds(5)  # the next lease end: ids[0]'s


def test_after_a_firing_the_sweep_waits_a_second(db: Database, clock: ManualClock) -> None:
    a, b = (db.call("enqueue", "j", None, None, 3, 0, sender=WORKER).id for _ in range(2))
    db.call("claim", None, "w", 10, sender=WORKER)
    clock.advance(0.5)
    db.call("claim", None, "w", 10, sender=WORKER)  # ends half a second after the first
    clock.advance(9.5)
    assert db.run_due() == 1 and status(db, a) == ("queued", 1)
    assert next_due(db) == clock.now() + TimeDuration.from_seconds(1)  # not b's end, 0.5 s away
    clock.advance(0.5)
    assert db.run_due() == 0 and status(db, b) == ("running", 1)
    clock.advance(0.5)
    assert db.run_due() == 1 and status(db, b) == ("queued", 1)  # reaped half a second late


def test_batch_claims_share_the_sweep_and_completing_them_all_lets_it_go(db: Database, clock: ManualClock) -> None:
    for _ in range(3):
        db.call("enqueue", "j", sender=WORKER)
    jobs = db.call("claim_many", 3, None, "w", 60, sender=WORKER)
    db.call("complete_many", [Completion(j.id, None, j.attempts) for j in jobs], sender=WORKER)
    clock.advance(60)
    assert db.run_due() == 1 and next_due(db) is None
    with db.read() as v:
        assert v.db.lease_sweep.count() == 0 and v.db.task.count() == 3


def test_a_sweep_with_nothing_to_reap_changes_no_task(db: Database, clock: ManualClock) -> None:
    t = db.call("enqueue", "j", sender=WORKER)
    db.call("claim", None, "w", 10, sender=WORKER)
    db.call("heartbeat", t.id, 100, sender=WORKER)
    before = queries.get_task(db, ADMIN, t.id)
    clock.advance(10)
    assert db.run_due() == 1
    assert queries.get_task(db, ADMIN, t.id) == before


def with_legacy_timers(tmp_path: Path, rm: RetryModule, clock: ManualClock) -> Database:
    """A retry database whose module can also write a per-claim `lease_timer` row, as claims did
    before the sweep (the way an older database holds them)."""

    @rm.module.reducer
    def legacy_timer(ctx: ReducerContext, task_id: int) -> None:
        task = ctx.db.task.id.find(task_id)
        ctx.db.lease_timer.insert(LeaseTimer(0, At(task.lease_expires_at), task_id, task.attempts))

    return published(tmp_path / "legacy", rm, clock)


def test_a_legacy_timer_does_not_reap_a_lease_a_heartbeat_extended(tmp_path: Path, rm: RetryModule, clock: ManualClock) -> None:
    db = with_legacy_timers(tmp_path, rm, clock)
    t = db.call("enqueue", "j", sender=WORKER)
    db.call("claim", None, "w", 30, sender=WORKER)
    db.call("legacy_timer", t.id, sender=ADMIN)
    clock.advance(20)
    db.call("heartbeat", t.id, 60, sender=WORKER)  # moves the lease, not the legacy row
    clock.advance(15)
    db.run_due()  # the legacy row (and the sweep) fire at the old end
    assert status(db, t.id) == ("running", 1)
    with db.read() as v:
        assert v.db.lease_timer.count() == 0
    clock.advance(60)
    db.run_due()
    assert status(db, t.id) == ("queued", 1)
    assert [h.outcome for h in queries.history(db, ADMIN)] == [Outcome.LEASE_EXPIRED]  # reaped once
    db.close()


def test_a_legacy_timer_and_the_sweep_reap_an_ended_lease_once(tmp_path: Path, rm: RetryModule, clock: ManualClock) -> None:
    db = with_legacy_timers(tmp_path, rm, clock)
    t = db.call("enqueue", "j", None, None, 1, sender=WORKER)
    db.call("claim", None, "w", 30, sender=WORKER)
    db.call("legacy_timer", t.id, sender=ADMIN)
    clock.advance(30)
    db.run_due()
    assert queries.get_task(db, ADMIN, t.id).status is TaskStatus.DEAD
    assert [h.outcome for h in queries.history(db, ADMIN)] == [Outcome.LEASE_EXPIRED]
    assert next_due(db) is None
    db.close()


def test_a_legacy_timer_reaps_only_the_attempt_it_was_armed_for(tmp_path: Path, rm: RetryModule, clock: ManualClock) -> None:
    """A row left from a task's first claim fires while its second claim runs on a lease that has
    just ended, which the sweep has not reached yet (after a firing it waits SWEEP_SPACING): that
    claim is not the row's to reap. The sweep reaps it when it comes, once."""
    assert SWEEP_SPACING == TimeDuration.from_seconds(1)  # the story's times below assume it
    db = with_legacy_timers(tmp_path, rm, clock)
    start = clock.now()

    def at(seconds: float) -> None:
        clock.set(start + TimeDuration.from_seconds(seconds))
        db.run_due()

    t, other = (db.call("enqueue", "j", None, None, 3, 0, sender=WORKER).id for _ in range(2))
    assert db.call("claim", None, "first", 30, sender=WORKER).id == t  # attempt 1, lease to 30 s...
    db.call("legacy_timer", t, sender=ADMIN)  # ...and a legacy row due then, for attempt 1
    at(0.5)
    assert db.call("claim", None, "w", 29, sender=WORKER).id == other  # lease to 29.5 s: the sweep's next firing
    at(1)
    db.call("fail", t, "first try", sender=WORKER)  # backoff 0: due again at once
    at(1.8)
    assert db.call("claim", None, "second", 28, sender=WORKER).attempts == 2  # lease to 29.8 s
    at(29.5)  # the sweep reaps `other` and waits a second: next at 30.5
    assert status(db, other) == ("queued", 1) and status(db, t) == ("running", 2)
    at(30)  # the legacy row fires; attempt 2's lease has ended, but it is not attempt 1
    assert status(db, t) == ("running", 2)
    at(30.5)  # the sweep reaps attempt 2
    assert status(db, t) == ("queued", 2)
    history = [(h.attempt, h.outcome, h.worker, h.finished_at) for h in reversed(queries.history(db, ADMIN)) if h.task_id == t]
    assert history == [
        (1, Outcome.FAILED, "first", start + TimeDuration.from_seconds(1)),
        (2, Outcome.LEASE_EXPIRED, "second", start + TimeDuration.from_seconds(30.5)),
    ]
    db.close()


def made_before_the_sweep(path: Path, rm: RetryModule) -> None:
    """Rewrite a closed database into what the retry module made before the sweep: no
    `lease_sweep` table and no index the sweep walks (by_end, over lease_expires_at) in its stored
    schema or its data."""
    from stdbmod import codec
    from stdbmod.runtime import spaces
    from stdbmod.runtime.database import Meta, _meta_decoder
    from stdbmod.storage import LmdbStorage

    storage = LmdbStorage(str(path))
    try:
        w = storage.begin_write()
        meta: Meta = _meta_decoder.decode(w.get(spaces.META, b"meta") or b"")
        tables = [t for t in meta.schema["tables"] if t["name"] != "lease_sweep"]
        for t in tables:
            if t["name"] == "task":
                del t["indexes"]["by_end"]
        w.clear(spaces.index("task", "by_end"))
        w.clear(spaces.rows("lease_sweep"))
        for key, queue_key in list(w.scan(spaces.SCHEDULE_BY_ROW)):
            if key.startswith(b"lease_sweep\x00"):
                w.delete(spaces.SCHEDULE_QUEUE, queue_key)
                w.delete(spaces.SCHEDULE_BY_ROW, key)
        schema = {**meta.schema, "tables": tables}
        w.put(spaces.META, b"meta", codec.msgpack_encoder.encode(msgspec.structs.replace(meta, schema=schema)))
        w.commit()
        with storage.begin_read() as r:
            assert r.count(spaces.index("task", "by_end")) == 0 and r.count(spaces.rows("lease_timer")) == 2
    finally:
        storage.close()


def test_a_database_made_before_the_sweep_opens_builds_the_index_and_reaps_its_old_claims(
    tmp_path: Path, rm: RetryModule, clock: ManualClock
) -> None:
    db = with_legacy_timers(tmp_path, rm, clock)
    old, extended = (db.call("enqueue", "j", None, None, 3, 0, sender=WORKER).id for _ in range(2))
    for task in (old, extended):
        db.call("claim", None, "w", 30, sender=WORKER)
        db.call("legacy_timer", task, sender=ADMIN)  # as the claims of that version did
    db.close()
    made_before_the_sweep(tmp_path / "legacy", rm)

    db = Database.open(tmp_path / "legacy", rm.module, clock=clock, durable=False)
    assert db.check_integrity() == []  # the new index was built from the rows
    with db.read() as v:
        running = (TaskStatus.RUNNING, None, Range(clock.now()))
        assert sorted(t.id for t in v.db.task.by_end.filter(running)) == [old, extended]
        assert v.db.lease_sweep.count() == 0 and v.db.lease_timer.count() == 2
    db.call("heartbeat", extended, 120, sender=WORKER)  # arms the sweep at the new end
    clock.advance(30)
    db.run_due()  # the legacy rows fire: the ended lease is reaped, the extended one kept
    assert status(db, old) == ("queued", 1) and status(db, extended) == ("running", 1)
    clock.advance(90)
    db.run_due()  # the sweep reaps the extended claim at its new end
    assert status(db, extended) == ("queued", 1)
    assert [h.task_id for h in reversed(queries.history(db, ADMIN))] == [old, extended]
    db.close()
