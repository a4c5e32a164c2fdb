"""The task table's mostly-None indexes (idempotency_key, unique_key, error_fingerprint) are
sparse: a plain enqueue writes no entry in them; a key or a fingerprint writes one, and every
walk of them (an idempotent enqueue, a unique enqueue, the dead-letter triage by fingerprint)
answers as before. A database whose indexes were dense drops their None entries on open.

Two more are partial (`Index(only=...)`): by_claim holds queued tasks only (the claim's walk) and
by_end every task but a queued one (the lease sweep's and retention's walks), so a claim deletes
one entry where it rewrote two, and a completion leaves by_claim alone."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import msgspec

from stdbmod import Database, Index, ManualClock, Module, ReducerContext
from stdbmod.retry import NewTask, RetryAdmin, RetryModule, TaskStatus, UniqueSpec
from stdbmod.retry.tables import TASK_INDEXES, Task
from stdbmod.retry.triage import BulkAction, TriageFilter, preview
from stdbmod.runtime import spaces
from tests.retry.support import ADMIN, WORKER

SPARSE = ("idempotency_key", "unique_key", "error_fingerprint")
PARTIAL = {"by_claim": (TaskStatus.QUEUED,), "by_end": (TaskStatus.RUNNING, TaskStatus.COMPLETED, TaskStatus.DEAD)}


def entries(db: Database) -> dict[str, int]:
    """Entries per index of the task table, counted in the storage."""
    with db.storage.begin_read() as r:
        return {name: r.count(spaces.index("task", name)) for name in db.module.tables["task"].indexes}


def test_the_three_indexes_are_sparse_and_the_others_are_not(rm: RetryModule) -> None:
    indexes = rm.module.tables["task"].indexes
    assert sorted(n for n, ix in indexes.items() if ix.sparse) == sorted(SPARSE)
    assert {n: ix.only for n, ix in indexes.items() if ix.only} == PARTIAL


def test_a_plain_enqueue_writes_four_fewer_entries(db: Database) -> None:
    before = entries(db)
    db.call("enqueue", NewTask("job"), sender=WORKER)
    grown = {n: entries(db)[n] - before[n] for n in before}
    assert grown == {n: 0 if n in SPARSE or n == "by_end" else 1 for n in before}
    assert sum(grown.values()) == len(before) - 4


def test_a_claim_moves_the_task_from_by_claim_to_by_end_and_a_completion_keeps_it_there(db: Database) -> None:
    db.call("enqueue", NewTask("job"), sender=WORKER)
    queued = entries(db)
    assert (queued["by_claim"], queued["by_end"]) == (1, 0)
    task = db.call("claim", None, "w", sender=WORKER)
    assert (entries(db)["by_claim"], entries(db)["by_end"]) == (0, 1)
    db.call("complete", task.id, None, sender=WORKER)
    assert (entries(db)["by_claim"], entries(db)["by_end"]) == (0, 1)
    with db.read() as v:  # a walk for queued tasks reads the rows: none are queued
        assert list(v.db.task.by_end.filter(TaskStatus.QUEUED)) == []
        assert [t.id for t in v.db.task.by_claim.filter(TaskStatus.COMPLETED)] == [task.id]
    assert db.check_integrity() == []


def test_keys_and_fingerprints_have_entries_and_their_walks_answer_as_before(db: Database) -> None:
    first = db.call("enqueue", NewTask("job", idempotency_key="k1"), sender=WORKER)
    assert db.call("enqueue", NewTask("job", idempotency_key="k1"), sender=WORKER).id == first.id  # found by its key
    unique = db.call("enqueue_unique", NewTask("job", payload={"n": 1}, unique=UniqueSpec()), sender=WORKER)
    again = db.call("enqueue_unique", NewTask("job", payload={"n": 1}, unique=UniqueSpec()), sender=WORKER)
    assert (again.duplicate, again.task.id) == (True, unique.task.id)
    plain = db.call("enqueue", NewTask("job", max_attempts=1), sender=WORKER)
    assert [entries(db)[n] for n in SPARSE] == [1, 1, 0]
    # the plain task dies: its fingerprint gets an entry, and triage finds it by it
    for _ in range(3):
        got = db.call("claim", None, "w", sender=WORKER)
        db.call("fail", got.id, "boom", None, got.id != plain.id, sender=WORKER)
    with db.read() as v:
        dead = v.db.task.id.find(plain.id)
    assert dead.status is TaskStatus.DEAD and dead.error_fingerprint is not None
    assert [entries(db)[n] for n in SPARSE] == [1, 1, 1]  # the two retried ones have none yet
    assert [t.id for t in preview(db, ADMIN, TriageFilter(fingerprint=dead.error_fingerprint)).sample] == [plain.id]
    op = db.call("bulk_dlq", BulkAction.REQUEUE, TriageFilter(fingerprint=dead.error_fingerprint), sender=ADMIN)
    assert op.processed == 1
    with db.read() as v:  # requeued in bulk: it keeps its fingerprint, and its entry
        assert [t.id for t in v.db.task.error_fingerprint.filter(dead.error_fingerprint)] == [plain.id]
        # asked for None, the sparse index reads the rows: every task without a key
        assert [t.id for t in v.db.task.idempotency_key.filter(None)] == [unique.task.id, plain.id]
    assert db.check_integrity() == []


def stored_tasks(db: Database) -> list[tuple[bytes, bytes]]:
    with db.storage.begin_read() as r:
        return list(r.scan(spaces.rows("task")))


def dense_module() -> Module:
    """The task table as it was before its three indexes were sparse, with a reducer that adds
    tasks straight into it."""
    columns: list[tuple[Any, ...]] = []
    for f in msgspec.structs.fields(Task):
        kind = Annotated[str | None, Index()] if f.name in SPARSE else f.type
        columns.append((f.name, kind) if f.required else (f.name, kind, f.default))
    task = msgspec.defstruct("Task", columns)
    m = Module("retry")
    m.table(task, indexes=TASK_INDEXES)
    m.table(RetryAdmin, cached=True)

    @m.reducer
    def old_rows(ctx: ReducerContext) -> None:
        now = ctx.timestamp
        ctx.db.retry_admin.insert(RetryAdmin(ctx.sender, now, ctx.sender))
        for key, fp in ((None, None), ("k1", None), (None, "fp-a"), (None, None)):
            status = TaskStatus.DEAD if fp else TaskStatus.QUEUED
            ctx.db.task.insert(task(
                id=0, created_at=now, updated_at=now, queue="default", job_type="job", payload=None, status=status, dead_reason=None,
                attempts=0, max_attempts=3, backoff_seconds=0, priority=0, neg_priority=0, in_module=False, run_after=now,
                idempotency_key=key, error_fingerprint=fp, finished_at=now if fp else None,
            ))  # fmt: skip

    return m


def test_a_database_with_dense_indexes_opens_sparse_and_reads_right(tmp_path: Path, rm: RetryModule, clock: ManualClock) -> None:
    where = tmp_path / "dense"
    with Database.create(where, dense_module(), owner=ADMIN, clock=clock, durable=False) as old:
        old.call("old_rows", sender=ADMIN)
        with old.storage.begin_read() as r:
            assert [r.count(spaces.index("task", n)) for n in SPARSE] == [4, 4, 4]
        rows = stored_tasks(old)
    with Database.open(where, rm.module, clock=clock, durable=False) as db:
        assert [entries(db)[n] for n in SPARSE] == [1, 0, 1]  # only the values are left
        assert db.check_integrity() == [] and stored_tasks(db) == rows  # the rows untouched
        with db.read() as v:
            assert [t.id for t in v.db.task.error_fingerprint.filter("fp-a")] == [3]
            assert [t.id for t in v.db.task.unique_key.filter(None)] == [1, 2, 3, 4]
        assert db.call("enqueue", NewTask("job", idempotency_key="k1"), sender=ADMIN).id == 2  # the old task, by its key
        assert db.call("enqueue", NewTask("job"), sender=ADMIN).id == 5
        assert [entries(db)[n] for n in SPARSE] == [1, 0, 1]
