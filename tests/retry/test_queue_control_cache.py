"""`retry_queue` is a cached table (queues.py): the writer keeps the rows a claim reads by key from
one call to the next. Every claim must still see the controls as the storage holds them: after a
pause or a limit in the same batch, after a call that paused and then failed, after a savepoint
rolled back, and after another writer's commit."""

from __future__ import annotations

from pathlib import Path

from stdbmod import Database, ManualClock, Module, ReducerContext, SenderError
from stdbmod.codec import msgpack_encoder
from stdbmod.keys import encode_value
from stdbmod.retry import RetryModule, TaskStatus, create_retry_module
from stdbmod.retry.queues import set_limits, set_paused
from stdbmod.retry.tables import Limits, RetryQueue
from stdbmod.retry.transitions import arm_attempt
from stdbmod.runtime import spaces
from tests.retry.support import ADMIN, WORKER


def test_the_queue_control_table_is_cached(rm: RetryModule) -> None:
    assert rm.module.tables["retry_queue"].cached


def test_claims_in_one_batch_follow_pause_resume_and_limits(db: Database) -> None:
    for _ in range(4):
        db.call("enqueue", "j", "q", None, sender=WORKER)
    claim = ("claim", (None, "w"), WORKER)
    out = db.call_many([
        claim,  # reads q's (absent) row: the cache keeps the absence
        ("pause_queue", ("q",), ADMIN),
        claim,
        ("resume_queue", ("q",), ADMIN),
        claim,
        ("set_queue_limits", ("q", 2), ADMIN),  # two running already
        claim,
        ("set_queue_limits", ("q", 3), ADMIN),
        claim,
        claim,
    ])  # fmt: skip
    ids = [None if out[i] is None else out[i].id for i in (0, 2, 4, 6, 8, 9)]
    assert ids == [1, None, 2, None, 3, None]


def _app(rm: RetryModule) -> Module:
    app = Module("app")
    app.include(rm.module)

    @app.reducer
    def pause_then_fail(ctx: ReducerContext, queue: str) -> None:
        set_paused(ctx, queue, True, arm_attempt)
        assert ctx.db.retry_queue.queue.find(queue).paused  # read back: now in the cache
        raise SenderError("changed my mind")

    @app.reducer
    def limit_in_savepoint(ctx: ReducerContext, queue: str) -> bool:
        try:
            with ctx.savepoint():
                set_limits(ctx, queue, Limits(concurrency=1))
                assert ctx.db.retry_queue.queue.find(queue) is not None
                raise SenderError("rolled back")
        except SenderError:
            pass
        return ctx.db.retry_queue.queue.find(queue) is None

    return app


def test_a_failed_call_or_a_rolled_back_savepoint_leaves_no_control_behind(tmp_path: Path, clock: ManualClock) -> None:
    rm = create_retry_module()
    db = Database.create(tmp_path / "app", _app(rm), owner=ADMIN, clock=clock, durable=False)
    try:
        db.call("grant_worker", WORKER, sender=ADMIN)
        for _ in range(3):
            db.call("enqueue", "j", "q", None, sender=WORKER)
        out = db.call_many([("claim", (None, "w"), WORKER), ("pause_then_fail", ("q",), ADMIN), ("claim", (None, "w"), WORKER)])
        assert out[0].id == 1 and isinstance(out[1], SenderError) and out[2].id == 2
        assert db.call("limit_in_savepoint", "q", sender=ADMIN) is True
        assert db.call("claim", None, "w", sender=WORKER).id == 3  # no concurrency limit of 1 was kept
    finally:
        db.close()


def test_a_pause_committed_by_another_writer_is_seen(db: Database) -> None:
    for _ in range(2):
        db.call("enqueue", "j", "q", None, sender=WORKER)
    assert db.call("claim", None, "w", sender=WORKER).id == 1  # q's absent row is now kept
    # a write transaction that is not one of the writer's batches (another process, a tool)
    txn = db.storage.begin_write()
    txn.put(spaces.rows("retry_queue"), encode_value("q"), msgpack_encoder.encode(RetryQueue("q", paused=True)))
    txn.commit()
    assert db.call("claim", None, "w", sender=WORKER) is None
    with db.read() as v:
        assert v.db.task.id.find(2).status is TaskStatus.QUEUED
