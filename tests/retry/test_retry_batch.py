"""enqueue_many, claim_many, complete_many: a batch leaves exactly the rows the one-at-a-time
reducers would, is all-or-nothing where documented, and checks roles and bounds."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stdbmod import Database, ManualClock, TimeDuration
from stdbmod.errors import ArgumentError
from stdbmod.retry import Completion, InvalidArgument, InvalidTransition, NewTask, NotAuthorized, RetryModule, StaleLease, TaskStatus
from stdbmod.retry.limits import MAX_BATCH
from tests.retry.conftest import published
from tests.retry.support import ADMIN, STRANGER, WORKER, WORKER2

TABLES = ("task", "attempt", "lease_timer", "attempt_timer")


def rows(db: Database) -> dict[str, list[Any]]:
    with db.read() as view:
        return {t: list(view.db.table(t).iter()) for t in TABLES}


@pytest.fixture
def twin(tmp_path: Path, rm: RetryModule, clock: ManualClock) -> Iterator[Database]:
    """A second database like `db` (same clock): the one-at-a-time side of each comparison."""
    d = published(tmp_path / "twin", rm, clock)
    yield d
    d.close()


SPECS = [
    NewTask("email", payload={"to": "a"}),
    NewTask("webhook", queue="hooks", priority=5, max_attempts=2, backoff_seconds=1),
    NewTask("email", idempotency_key="k1"),
    NewTask("email", idempotency_key="k1"),  # the same key again: the first task comes back
    NewTask("report", priority=-3),
]


def enqueue_one_by_one(db: Database) -> list[Any]:
    return [
        db.call(
            "enqueue", s.job_type, s.queue, s.payload, s.max_attempts, s.backoff_seconds, s.run_after, s.priority, s.idempotency_key, sender=WORKER
        )
        for s in SPECS
    ]


def test_a_batch_leaves_the_rows_of_the_calls_one_by_one(db: Database, twin: Database, clock: ManualClock) -> None:
    batch = db.call("enqueue_many", SPECS, sender=WORKER)
    single = enqueue_one_by_one(twin)
    assert batch == single and batch[2].id == batch[3].id
    assert rows(db) == rows(twin)

    clock.advance(1)
    claimed = db.call("claim_many", 3, None, "w1", 60, sender=WORKER)
    one_by_one = [twin.call("claim", None, "w1", 60, sender=WORKER) for _ in range(3)]
    assert claimed == one_by_one
    assert [t.job_type for t in claimed] == ["webhook", "email", "email"]  # priority, then age
    assert rows(db) == rows(twin)

    clock.advance(1)
    done = db.call("complete_many", [Completion(t.id, {"n": t.id}) for t in claimed], sender=WORKER)
    singles = [twin.call("complete", t.id, {"n": t.id}, sender=WORKER) for t in claimed]
    assert done == singles and {t.status for t in done} == {TaskStatus.COMPLETED}
    assert rows(db) == rows(twin)
    assert len(rows(db)["attempt"]) == 3 and rows(db)["lease_timer"] == []


def test_claim_many_takes_what_is_ready_and_no_more(db: Database, clock: ManualClock) -> None:
    db.call("enqueue_many", [NewTask("a"), NewTask("b", run_after=clock.now() + TimeDuration.from_seconds(60))], sender=WORKER)
    assert [t.job_type for t in db.call("claim_many", 10, sender=WORKER)] == ["a"]
    assert db.call("claim_many", 10, sender=WORKER) == []


def test_enqueue_many_is_all_or_nothing(db: Database) -> None:
    before = rows(db)
    with pytest.raises(InvalidArgument, match=r"tasks\[1\]: max_attempts"):
        db.call("enqueue_many", [NewTask("ok"), NewTask("bad", max_attempts=0)], sender=WORKER)
    assert rows(db) == before


def test_complete_many_is_all_or_nothing_and_names_the_task(db: Database) -> None:
    db.call("enqueue_many", [NewTask("a"), NewTask("b"), NewTask("c")], sender=WORKER)
    mine = db.call("claim_many", 2, sender=WORKER)
    theirs = db.call("claim", sender=WORKER2)
    before = rows(db)
    with pytest.raises(StaleLease, match=f"task {theirs.id} is leased to another claim"):
        db.call("complete_many", [Completion(mine[0].id), Completion(theirs.id), Completion(mine[1].id)], sender=WORKER)
    assert rows(db) == before
    db.call("complete_many", [Completion(t.id) for t in mine], sender=WORKER)
    with pytest.raises(InvalidTransition, match=f"task {mine[0].id} is completed"):
        db.call("complete_many", [Completion(mine[0].id)], sender=WORKER)


@pytest.mark.parametrize(
    ("reducer", "args"),
    [("enqueue_many", ([NewTask("a")],)), ("claim_many", (1,)), ("complete_many", ([Completion(1)],))],
)
def test_batches_need_the_worker_role(db: Database, reducer: str, args: tuple[Any, ...]) -> None:
    before = rows(db)
    with pytest.raises(NotAuthorized):
        db.call(reducer, *args, sender=STRANGER)
    assert rows(db) == before


@pytest.mark.parametrize(
    ("reducer", "args", "message"),
    [
        ("enqueue_many", ([],), "at least one"),
        ("enqueue_many", ([NewTask("a")] * (MAX_BATCH + 1),), "limit is"),
        ("complete_many", ([],), "at least one"),
        ("claim_many", (0,), "limit must be"),
        ("claim_many", (MAX_BATCH + 1,), "limit must be"),
    ],
)
def test_batch_bounds(db: Database, reducer: str, args: tuple[Any, ...], message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        db.call(reducer, *args, sender=ADMIN)


def test_batches_over_json_as_http_and_the_cli_send_them(db: Database) -> None:
    created = db.call_json("enqueue_many", b'[[{"job_type": "a", "payload": [1]}, {"job_type": "b", "priority": 2}]]', sender=WORKER)
    assert [t.job_type for t in created] == ["a", "b"]
    claimed = db.call_json("claim_many", b"[5]", sender=WORKER)
    assert [t.job_type for t in claimed] == ["b", "a"]
    body = b'[[{"task_id": %d, "result": "ok"}, {"task_id": %d}]]' % (claimed[0].id, claimed[1].id)
    assert [t.result for t in db.call_json("complete_many", body, sender=WORKER)] == ["ok", None]
    with pytest.raises(ArgumentError):  # an unknown field in an item is refused, not ignored
        db.call_json("enqueue_many", b'[[{"job_type": "a", "payloda": 1}]]', sender=WORKER)
