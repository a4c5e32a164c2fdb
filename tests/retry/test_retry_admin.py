"""Admin-only reducers: refused for everyone else with no change; the admin set never empties."""

from __future__ import annotations

from typing import Any

import pytest

from stdbmod import Database, ManualClock, TimeDuration
from stdbmod.retry import (
    DeadReason,
    InvalidArgument,
    InvalidTransition,
    NotAuthorized,
    TaskCancelled,
    TaskNotFound,
    TaskStatus,
    queries,
)
from tests.retry.support import ADMIN, STRANGER, WORKER, WORKER2

ADMIN_CALLS: list[tuple[str, tuple[Any, ...]]] = [
    ("submit", ("job",)),
    ("requeue", (1,)),
    ("delete_task", (1,)),
    ("cancel", (1,)),
    ("add_admin", (STRANGER,)),
    ("remove_admin", (ADMIN,)),
    ("grant_worker", (STRANGER,)),
    ("revoke_worker", (WORKER,)),
    ("set_history_cap", (5,)),
    ("set_default_lease", (60,)),
]


@pytest.mark.parametrize("caller", [STRANGER, WORKER], ids=["stranger", "worker"])
@pytest.mark.parametrize(("name", "args"), ADMIN_CALLS, ids=[n for n, _ in ADMIN_CALLS])
def test_admin_reducers_refuse_everyone_else(db: Database, caller: Any, name: str, args: tuple[Any, ...]) -> None:
    db.call("submit", "job", sender=ADMIN)
    before, log_len = db.state_hash(), len(db.commit_log())
    with pytest.raises(NotAuthorized, match="only an admin") as err:
        db.call(name, *args, sender=caller)
    assert err.value.status_code == 403
    assert db.state_hash() == before and len(db.commit_log()) == log_len


def test_worker_reducers_refuse_identities_without_the_role(db: Database) -> None:
    t = db.call("submit", "job", sender=ADMIN)
    for name, args in [("enqueue", ("job",)), ("claim", ()), ("complete", (t.id,)), ("fail", (t.id, "x")), ("heartbeat", (t.id,))]:
        with pytest.raises(NotAuthorized, match="worker role"):
            db.call(name, *args, sender=STRANGER)
    assert db.call("claim", sender=ADMIN) is not None  # an admin may act as a worker


def test_add_and_remove_admins_never_the_last(db: Database) -> None:
    db.call("add_admin", STRANGER, sender=ADMIN)
    db.call("add_admin", STRANGER, sender=ADMIN)  # already one: no-op
    assert queries.is_admin(db, STRANGER)
    db.call("remove_admin", ADMIN, sender=STRANGER)
    assert not queries.is_admin(db, ADMIN)
    with pytest.raises(InvalidTransition, match="last admin"):
        db.call("remove_admin", STRANGER, sender=STRANGER)
    with pytest.raises(InvalidArgument, match="not an admin"):
        db.call("remove_admin", WORKER, sender=STRANGER)
    with pytest.raises(NotAuthorized):
        db.call("add_admin", ADMIN, sender=ADMIN)  # no longer an admin


def test_grant_and_revoke_worker(db: Database) -> None:
    db.call("revoke_worker", WORKER2, sender=ADMIN)
    with pytest.raises(NotAuthorized):
        db.call("claim", sender=WORKER2)
    with pytest.raises(InvalidArgument, match="does not have the worker role"):
        db.call("revoke_worker", WORKER2, sender=ADMIN)
    db.call("grant_worker", WORKER2, sender=ADMIN)
    assert db.call("claim", sender=WORKER2) is None


def _dead(db: Database, clock: ManualClock) -> int:
    t = db.call("submit", "job", None, None, 1, sender=ADMIN)
    db.call("claim", sender=WORKER)
    db.call("fail", t.id, "boom", sender=WORKER)
    return int(t.id)


def test_requeue_resets_attempts_and_is_due_now(db: Database, clock: ManualClock) -> None:
    tid = _dead(db, clock)
    clock.advance(100)
    t = db.call("requeue", tid, sender=ADMIN)
    assert (t.status, t.attempts, t.dead_reason, t.run_after) == (TaskStatus.QUEUED, 0, None, clock.now())
    assert t.last_error == "boom"  # kept for the post-mortem
    assert db.call("claim", sender=WORKER).attempts == 1
    with pytest.raises(InvalidTransition, match="only a dead task can be requeued"):
        db.call("requeue", tid, sender=ADMIN)
    with pytest.raises(TaskNotFound) as err:
        db.call("requeue", 999, sender=ADMIN)
    assert err.value.status_code == 404


def test_delete_only_dead_tasks(db: Database, clock: ManualClock) -> None:
    tid = _dead(db, clock)
    live = db.call("submit", "job", sender=ADMIN)
    with pytest.raises(InvalidTransition, match="only a dead task can be deleted"):
        db.call("delete_task", live.id, sender=ADMIN)
    db.call("delete_task", tid, sender=ADMIN)
    with pytest.raises(TaskNotFound):
        queries.get_task(db, ADMIN, tid)
    assert len(queries.history(db, ADMIN, task_id=tid)) == 1  # history outlives the task


def test_cancel_only_queued_or_running_tasks(db: Database) -> None:
    t = db.call("submit", "job", sender=ADMIN)
    c = db.call("cancel", t.id, "customer left", sender=ADMIN)
    assert (c.status, c.dead_reason, c.last_error) == (TaskStatus.DEAD, DeadReason.CANCELLED, "customer left")
    assert db.call("claim", sender=WORKER) is None
    with pytest.raises(InvalidTransition, match="only a queued or running task can be cancelled"):
        db.call("cancel", t.id, sender=ADMIN)
    r = db.call("submit", "job", sender=ADMIN)
    db.call("claim", sender=WORKER)
    running = db.call("cancel", r.id, sender=ADMIN)  # a running one too (issue 16): its worker is refused from then on
    assert (running.status, running.dead_reason, running.lease_expires_at) == (TaskStatus.DEAD, DeadReason.CANCELLED, None)
    with pytest.raises(TaskCancelled):
        db.call("complete", r.id, sender=WORKER)
    done = db.call("submit", "job", sender=ADMIN)
    db.call("claim", sender=WORKER)
    db.call("complete", done.id, sender=WORKER)
    with pytest.raises(InvalidTransition, match="completed"):
        db.call("cancel", done.id, sender=ADMIN)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("",), "job_type must be a non-empty string"),
        (("x" * 201,), "job_type is 201 characters long"),
        (("job", ""), "queue must be a non-empty string"),
        (("job", "q" * 5000), "queue is 5000 characters long"),
        (("job", None, None, 0), "max_attempts must be an integer from 1"),
        (("job", None, None, None, -1), "backoff_seconds must be an integer from 0"),
        (("job", None, None, None, None, None, 2**40), "priority must be an integer"),
        (("job", None, None, None, None, None, 0, "k" * 1000), "idempotency_key is 1000 characters long"),
    ],
)
def test_bad_task_arguments_are_invalid(db: Database, args: tuple[Any, ...], message: str) -> None:
    before = db.state_hash()
    for reducer, sender in (("submit", ADMIN), ("enqueue", WORKER)):
        with pytest.raises(InvalidArgument, match=message) as err:
            db.call(reducer, *args, sender=sender)
        assert err.value.status_code == 400
    assert db.state_hash() == before


def test_bad_settings_and_leases_are_invalid(db: Database) -> None:
    for name, arg in [("set_history_cap", -1), ("set_default_lease", 0), ("set_default_lease", 10**9)]:
        with pytest.raises(InvalidArgument):
            db.call(name, arg, sender=ADMIN)
    db.call("submit", "job", sender=ADMIN)
    with pytest.raises(InvalidArgument, match="lease_seconds"):
        db.call("claim", None, None, 0, sender=WORKER)
    with pytest.raises(InvalidArgument, match="worker_id is 300"):
        db.call("claim", None, "w" * 300, sender=WORKER)


def test_set_default_lease_applies_to_later_claims(db: Database, clock: ManualClock) -> None:
    db.call("set_default_lease", 60, sender=ADMIN)
    db.call("submit", "job", sender=ADMIN)
    t = db.call("claim", sender=WORKER)
    assert t.lease_expires_at == clock.now() + TimeDuration.from_seconds(60)
