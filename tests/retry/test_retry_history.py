"""The attempt history (capped, newest first) and the admin-only reads."""

from __future__ import annotations

from pathlib import Path

import pytest

from stdbmod import Database, ManualClock
from stdbmod.retry import InvalidArgument, NotAuthorized, Outcome, TaskStatus, queries
from tests.retry.support import ADMIN, STRANGER, WORKER, replayed_hash


def _attempts(db: Database, n: int, job_type: str = "j") -> None:
    """n finished attempts: n tasks claimed and completed."""
    for _ in range(n):
        t = db.call("enqueue", job_type, sender=WORKER)
        db.call("claim", sender=WORKER)
        db.call("complete", t.id, sender=WORKER)


def test_history_is_newest_first_across_job_types(db: Database, clock: ManualClock) -> None:
    _attempts(db, 2, "a")
    clock.advance(1)
    _attempts(db, 1, "b")
    rows = queries.history(db, ADMIN)
    assert [r.job_type for r in rows] == ["b", "a", "a"]
    assert [r.id for r in rows] == sorted((r.id for r in rows), reverse=True)
    assert len(queries.history(db, ADMIN, limit=2)) == 2


def test_history_is_capped_in_the_transaction_that_adds(db: Database) -> None:
    db.call("set_history_cap", 3, sender=ADMIN)
    _attempts(db, 5)
    rows = queries.history(db, ADMIN)
    assert [r.task_id for r in rows] == [5, 4, 3]
    last = db.commit_log()[-1]
    [change] = [c for c in last.changes if c.table == "attempt"]
    assert len(change.inserts) == 1 and len(change.deletes) == 1  # trimmed in the same commit


def test_lowering_the_cap_trims_at_once(db: Database) -> None:
    _attempts(db, 4)
    db.call("set_history_cap", 1, sender=ADMIN)
    assert [r.task_id for r in queries.history(db, ADMIN)] == [4]
    db.call("set_history_cap", 0, sender=ADMIN)
    _attempts(db, 1)
    assert queries.history(db, ADMIN) == []


def test_reads_are_admin_only(db: Database) -> None:
    t = db.call("enqueue", "j", sender=WORKER)
    for read in (
        lambda who: queries.list_tasks(db, who),
        lambda who: queries.pending(db, who),
        lambda who: queries.dead_letter(db, who),
        lambda who: queries.history(db, who),
    ):
        for who in (STRANGER, WORKER):
            with pytest.raises(NotAuthorized):
                read(who)
        read(ADMIN)
    assert queries.get_task(db, WORKER, t.id) == t  # workers may read one task
    with pytest.raises(NotAuthorized):
        queries.get_task(db, STRANGER, t.id)


def test_list_filters_and_pagination(db: Database) -> None:
    ids = [db.call("enqueue", "a" if i % 2 else "b", "q1" if i < 6 else "q2", sender=WORKER).id for i in range(10)]
    db.call("cancel", ids[0], sender=ADMIN)
    page = queries.list_tasks(db, ADMIN, per_page=4)
    assert (page.total, [t.id for t in page.items]) == (10, ids[::-1][:4])
    page3 = queries.list_tasks(db, ADMIN, page=3, per_page=4)
    assert [t.id for t in page3.items] == ids[::-1][8:]
    a_q1 = queries.list_tasks(db, ADMIN, job_type="a", queue="q1")
    assert [t.id for t in a_q1.items] == [ids[5], ids[3], ids[1]] and a_q1.total == 3
    q2 = queries.list_tasks(db, ADMIN, queue="q2", per_page=2, page=2)
    assert (q2.total, [t.id for t in q2.items]) == (4, [ids[7], ids[6]])
    dead = queries.dead_letter(db, ADMIN, queue="q1")
    assert [t.id for t in dead.items] == [ids[0]]
    assert queries.list_tasks(db, ADMIN, status="dead").total == 1
    db.call("claim", sender=WORKER)
    pend = queries.pending(db, ADMIN)
    assert pend.total == 9 and [t.id for t in pend.items] == ids[::-1][:9]
    assert {t.status for t in pend.items} == {TaskStatus.QUEUED, TaskStatus.RUNNING}


def test_bad_read_arguments(db: Database) -> None:
    with pytest.raises(InvalidArgument, match="status must be one of"):
        queries.list_tasks(db, ADMIN, status="failed")
    with pytest.raises(InvalidArgument, match="per_page"):
        queries.list_tasks(db, ADMIN, per_page=201)
    with pytest.raises(InvalidArgument, match="page"):
        queries.dead_letter(db, ADMIN, page=0)
    with pytest.raises(InvalidArgument, match="limit"):
        queries.history(db, ADMIN, limit=0)


def test_history_of_one_task_and_replay(db: Database, clock: ManualClock, tmp_path: Path) -> None:
    t = db.call("enqueue", "j", None, None, 3, 0, sender=WORKER)
    for _ in range(3):
        db.call("claim", sender=WORKER)
        db.call("fail", t.id, "no", sender=WORKER)
    _attempts(db, 1)
    rows = queries.history(db, ADMIN, task_id=t.id)
    assert [(r.attempt, r.outcome) for r in rows] == [(3, Outcome.FAILED), (2, Outcome.FAILED), (1, Outcome.FAILED)]
    assert replayed_hash(db, tmp_path / "copy") == db.state_hash()
