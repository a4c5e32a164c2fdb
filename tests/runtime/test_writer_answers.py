"""When the writer answers a batch's callers: at once when nothing is queued behind it, else just
before the next batch's commit (whose flush leaves the GIL to the callers it wakes), and never
later than the writer's next wait, a failure of the next batch, or the close."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import pytest

from stdbmod import Database
from stdbmod.errors import TransientStorageError
from stdbmod.runtime.writer import Batch, Writer
from stdbmod.storage import WriteTxn
from stdbmod.storage.memory import MemoryStorage
from tests.conftest import ALICE
from tests.runtime.busy_writer import entered, gate, m, reset, seen, watched


@pytest.fixture
def db(make_db: Callable[..., Database]) -> Database:
    reset()
    return make_db(m)


def _busy(db: Database) -> Future[Any]:
    """A call that holds the writer thread until the gate opens."""
    fut = db.submit("hold", sender=ALICE)
    assert entered.wait(10)
    watched.append(fut)
    return fut


def test_a_batch_with_calls_queued_behind_it_is_answered_at_the_next_commit(db: Database) -> None:
    held = _busy(db)
    behind = db.submit("peek", sender=ALICE)
    gate.set()
    assert behind.result(10) is None
    assert seen == [False]  # `hold` had committed, but its caller was not answered while `peek` ran
    assert held.done() and held.result() is None


@pytest.mark.parametrize(("hold_for_ns", "expected"), [(0, [False, True]), (60 * 10**9, [False, False])])
def test_a_long_next_batch_answers_them_between_two_of_its_calls(db: Database, hold_for_ns: int, expected: list[bool]) -> None:
    db._core.hold_for_ns = hold_for_ns  # 0: any next batch is long; a minute: none is
    held = _busy(db)
    behind = [db.submit("peek", sender=ALICE) for _ in range(2)]  # one batch behind `hold`
    gate.set()
    for fut in behind:
        assert fut.result(10) is None
    assert seen == expected  # with no time to wait, answered after the first call of the next batch
    assert held.result(10) is None


def test_a_batch_with_nothing_queued_behind_it_is_answered_at_once(db: Database) -> None:
    done_at_commit: list[bool] = []
    db.hooks.on_commit = lambda records: done_at_commit.append(watched[0].done())
    held = _busy(db)
    gate.set()
    assert held.result(10) is None
    assert done_at_commit == [True]  # answered before the commit's hooks ran


def test_the_close_answers_a_batch_held_for_a_next_one(db: Database) -> None:
    held = _busy(db)
    closer = threading.Thread(target=db.close)
    closer.start()
    while db._writer._queue.empty():  # the close's stop is queued behind the busy writer
        threading.Event().wait(0.001)
    gate.set()
    assert held.result(10) is None
    closer.join(10)
    assert not closer.is_alive()


def test_a_failed_next_batch_still_answers_the_one_before(db: Database) -> None:
    commits = 0

    def failing_second() -> None:
        nonlocal commits
        commits += 1
        if commits == 2:
            raise RuntimeError("before the second commit")

    db.hooks.before_commit = failing_second
    held = _busy(db)
    behind = db.submit("peek", sender=ALICE)
    gate.set()
    with pytest.raises(RuntimeError, match="before the second commit"):
        behind.result(10)
    assert held.result(10) is None  # committed before: answered though the next batch failed
    with db.read() as v:
        assert [r.text for r in v.db.item.iter()] == ["held"]


class _FlakyBegin(MemoryStorage):
    """Its next write transaction, when `fail` is set, fails once as a lost connection would."""

    def __init__(self) -> None:
        super().__init__()
        self.fail = False
        self.retried: list[bool] = []  # whether the watched call had been answered, at each retry

    def begin_write(self) -> WriteTxn:
        if self.fail:
            self.fail = False
            self.retried.append(False)
            raise TransientStorageError("connection lost (injected)")
        if self.retried and not self.retried[-1]:
            self.retried[-1] = watched[0].done()
        return super().begin_write()


def test_a_next_batch_run_again_answers_the_one_before_first() -> None:
    storage = _FlakyBegin()
    db = Database.create(storage, m, owner=ALICE)
    reset()
    try:
        held = _busy(db)
        behind = db.submit("peek", sender=ALICE)
        storage.fail = True  # the batch behind `hold` fails to begin, and is run again
        gate.set()
        assert behind.result(10) is None
        assert storage.retried == [True]  # answered before the retry, not kept through its pauses
        assert held.result(10) is None
    finally:
        db.close()


def test_only_the_writer_threads_batches_may_be_held() -> None:
    passed: list[Callable[[], bool] | None] = []

    def run_batch(batch: Batch, more: Callable[[], bool] | None) -> None:
        passed.append(more)
        for _, outcome in batch:
            outcome.set_result(None)

    w = Writer(run_batch, lambda: None, "answers-test")
    try:
        w.run("mine").result()  # an idle writer: the caller runs its own batch, answered at once
        w.submit("queued").result(10)
    finally:
        w.close()
    assert passed[0] is None
    more = passed[1]
    assert more is not None and more() is False  # nothing queued behind it
