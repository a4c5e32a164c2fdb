"""Dead-letter triage (retry/triage.py, docs/operations.md): groups by error fingerprint, bulk
requeue and delete by filter with a dry run that changes nothing, bounded batches over 100k dead
tasks, and no retry-all loop (a task that dies again with the fingerprint it was bulk-requeued
under is held until an admin acts)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import msgspec
import pytest

from stdbmod import Database, ManualClock, Module, PrimaryKey, ReducerContext, TimeDuration, Timestamp
from stdbmod.retry import DeadReason, InvalidArgument, NewTask, NotAuthorized, Task, TaskStatus, create_retry_module, queries
from stdbmod.retry.fingerprint import fingerprint
from stdbmod.retry.triage import TRIAGE_BATCH, TRIAGE_SCAN, BulkAction, TriageFilter, dlq_groups, get_op, preview
from tests.retry.support import ADMIN, WORKER


def die(db: Database, job_type: str, error: str, queue: str = "q") -> Task:
    """A task that dies on its first attempt with `error`, as a worker's fail says."""
    t = db.call("enqueue", NewTask(job_type, queue=queue, max_attempts=1), sender=WORKER)
    claimed = db.call("claim", queue, sender=WORKER)
    assert claimed.id == t.id
    dead: Task = db.call("fail", t.id, error, sender=WORKER)
    assert dead.status is TaskStatus.DEAD
    return dead


def test_realistic_errors_group_by_fingerprint(db: Database, clock: ManualClock) -> None:
    a = die(db, "sync", "timeout after 3012 ms for user 42")
    clock.advance(10)
    b = die(db, "export", "timeout after 2999 ms for user 7", queue="q2")
    c = die(db, "sync", "KeyError: 'user_id'")
    clock.advance(10)
    die(db, "sync", "connection refused to 10.0.0.12:5432")
    d = die(db, "sync", "connection refused to 10.0.0.7:5432")
    assert a.error_fingerprint == b.error_fingerprint == fingerprint("timeout after 1 ms for user 1") != c.error_fingerprint
    groups = dlq_groups(db, ADMIN)
    assert [(g.count, g.job_types) for g in groups] == [(2, ["sync"]), (2, ["export", "sync"]), (1, ["sync"])]
    timeout = groups[1]
    assert (timeout.fingerprint, timeout.first_seen, timeout.last_seen) == (a.error_fingerprint, a.finished_at, b.finished_at)
    assert timeout.sample_error == "timeout after 2999 ms for user 7" and timeout.shape == "timeout after <n> ms for user <n>"
    assert timeout.queues == ["q", "q2"] and groups[0].fingerprint == d.error_fingerprint
    assert [g.count for g in dlq_groups(db, ADMIN, job_type="export")] == [1]
    with pytest.raises(NotAuthorized):
        dlq_groups(db, WORKER)


def test_dry_run_changes_nothing_and_bulk_requeue_takes_the_filter(db: Database, clock: ManualClock) -> None:
    early = [die(db, "sync", f"timeout after {n} ms") for n in range(3)]
    clock.advance(3600)
    late = [die(db, "sync", f"timeout after {n} ms") for n in range(3, 5)]
    other = die(db, "export", "timeout after 9 ms")
    fp = early[0].error_fingerprint
    before = db.state_hash()
    p = preview(db, ADMIN, TriageFilter(fingerprint=fp, job_type="sync"))
    assert (p.count, [t.id for t in p.sample]) == (5, [t.id for t in early + late])
    cutoff = TriageFilter(fingerprint=fp, finished_before=early[-1].finished_at)
    assert preview(db, ADMIN, cutoff).count == 3
    assert preview(db, ADMIN, TriageFilter(queue="nope")).count == 0
    assert db.state_hash() == before  # a dry run is a read
    with pytest.raises(NotAuthorized):
        db.call("bulk_dlq", BulkAction.REQUEUE, cutoff, sender=WORKER)
    with pytest.raises(InvalidArgument):
        db.call("bulk_dlq", BulkAction.REQUEUE, TriageFilter(finished_after=clock.now(), finished_before=early[0].finished_at), sender=ADMIN)
    assert db.state_hash() == before
    op = db.call("bulk_dlq", BulkAction.REQUEUE, cutoff, sender=ADMIN)
    assert (op.done, op.processed, op.batches) == (True, 3, 1)
    statuses = {t.id: queries.get_task(db, ADMIN, t.id).status for t in early + late + [other]}
    assert [statuses[t.id] for t in early] == [TaskStatus.QUEUED] * 3
    assert [statuses[t.id] for t in late + [other]] == [TaskStatus.DEAD] * 3
    requeued = queries.get_task(db, ADMIN, early[0].id)
    assert (requeued.attempts, requeued.error_fingerprint, requeued.triage_hold) == (0, fp, False)  # the bulk mark
    gone = db.call("bulk_dlq", BulkAction.DELETE, TriageFilter(job_type="export"), sender=ADMIN)
    assert gone.processed == 1 and get_op(db, ADMIN, gone.id).done
    assert queries.dead_letter(db, ADMIN).total == 2


def test_a_bulk_requeued_task_that_dies_again_alike_is_held_until_an_admin_acts(db: Database) -> None:
    t = die(db, "sync", "timeout after 3012 ms")
    fp = t.error_fingerprint
    everything = TriageFilter()
    db.call("bulk_dlq", BulkAction.REQUEUE, everything, sender=ADMIN)
    db.call("claim", "q", sender=WORKER)
    again = db.call("fail", t.id, "timeout after 2999 ms", sender=WORKER)  # the same shape
    assert (again.status, again.triage_hold, again.error_fingerprint) == (TaskStatus.DEAD, True, fp)
    assert dlq_groups(db, ADMIN)[0].held == 1
    op = db.call("bulk_dlq", BulkAction.REQUEUE, everything, sender=ADMIN)  # retry-all passes it by: no loop
    assert op.processed == 0 and queries.get_task(db, ADMIN, t.id).status is TaskStatus.DEAD
    assert preview(db, ADMIN, everything).count == 0
    assert preview(db, ADMIN, TriageFilter(include_held=True)).count == 1
    # a different death is a new story: not held
    db.call("bulk_dlq", BulkAction.REQUEUE, TriageFilter(include_held=True), sender=ADMIN)
    db.call("claim", "q", sender=WORKER)
    other = db.call("fail", t.id, "KeyError: 'x'", 1, sender=WORKER)
    assert (other.triage_hold, other.dead_reason) == (False, DeadReason.EXHAUSTED)
    # an admin's own requeue clears the mark: dying again alike is not held
    db.call("bulk_dlq", BulkAction.REQUEUE, everything, sender=ADMIN)
    db.call("claim", "q", sender=WORKER)
    held = db.call("fail", t.id, "KeyError: 'y'", sender=WORKER)
    assert held.triage_hold
    fresh = db.call("requeue", t.id, sender=ADMIN)
    assert (fresh.error_fingerprint, fresh.triage_hold) == (None, False)
    db.call("claim", "q", sender=WORKER)
    assert not db.call("fail", t.id, "KeyError: 'z'", sender=WORKER).triage_hold


# --- 100k dead tasks ---------------------------------------------------------------------------------


def test_bulk_actions_over_100k_dead_tasks_run_in_bounded_transactions(tmp_path: Path, clock: ManualClock) -> None:
    rm = create_retry_module()
    app = Module("app")
    app.include(rm.module)

    class Seed(msgspec.Struct):
        id: Annotated[int, PrimaryKey()]

    app.table(Seed)

    @app.reducer
    def seed_dead(ctx: ReducerContext, n: int, kind: str) -> None:
        """n dead tasks at once (the fast way to fill the dead-letter tier for this test)."""
        now = ctx.timestamp
        fp = fingerprint(kind)
        for _ in range(n):
            ctx.db.task.insert(Task(0, now, now, "bulk", kind, None, TaskStatus.DEAD, DeadReason.EXHAUSTED, 1, 1, 30, 0, 0, False, now,
                                    last_error=kind, finished_at=now, error_fingerprint=fp))  # fmt: skip

    db = Database.create(tmp_path / "db", app, owner=ADMIN, clock=clock, durable=False)
    try:
        for _ in range(10):
            db.call("seed_dead", 10_000, "timeout after 30 s", sender=ADMIN)
        db.call("seed_dead", 2_000, "KeyError: 'x'", sender=ADMIN)  # another group, read past by the walk
        group = TriageFilter(fingerprint=fingerprint("timeout after 30 s"))
        before = db.state_hash()
        assert preview(db, ADMIN, group).count == 100_000 and db.state_hash() == before
        start = db.commit_log_end()
        clock.advance(1)
        op = db.call("bulk_dlq", BulkAction.REQUEUE, group, sender=ADMIN)
        assert not op.done and op.processed == TRIAGE_BATCH
        db.run_due()
        op = get_op(db, ADMIN, op.id)
        assert op.done and op.processed == 100_000 and 100_000 // TRIAGE_BATCH <= op.batches <= 100_000 // TRIAGE_BATCH + 1
        # every transaction changed at most TRIAGE_BATCH tasks: no long writer transaction
        sizes = [sum(len(c.inserts) for c in r.changes if c.table == "task") for r in db.commit_log(start)]
        assert len(sizes) >= 100_000 // TRIAGE_BATCH and max(sizes) <= TRIAGE_BATCH
        assert queries.list_tasks(db, ADMIN, status="queued", per_page=1).total == 100_000
        assert queries.dead_letter(db, ADMIN, per_page=1).total == 2_000
        # delete over a walk that reads many non-matching rows: the scan bound holds too
        for _ in range(2):
            db.call("seed_dead", 10_000, "timeout after 30 s", sender=ADMIN)
        start = db.commit_log_end()
        op = db.call("bulk_dlq", BulkAction.DELETE, TriageFilter(job_type="KeyError: 'x'"), sender=ADMIN)
        db.run_due()
        op = get_op(db, ADMIN, op.id)
        assert op.done and op.processed == 2_000 and op.batches >= 22_000 // TRIAGE_SCAN
        sizes = [sum(len(c.deletes) for c in r.changes if c.table == "task") for r in db.commit_log(start)]
        assert max(sizes) <= TRIAGE_BATCH
        assert queries.dead_letter(db, ADMIN, per_page=1).total == 20_000
    finally:
        db.close()


def test_a_filter_on_time_is_inclusive_and_by_death(db: Database, clock: ManualClock) -> None:
    a = die(db, "x", "e")
    clock.advance(60)
    b = die(db, "x", "e")
    assert a.finished_at is not None and b.finished_at is not None
    at_b = TriageFilter(finished_after=b.finished_at)
    assert [t.id for t in preview(db, ADMIN, at_b).sample] == [b.id]
    assert [t.id for t in preview(db, ADMIN, TriageFilter(finished_before=a.finished_at + TimeDuration(1))).sample] == [a.id]
    assert preview(db, ADMIN, TriageFilter(finished_after=Timestamp(0))).count == 2
