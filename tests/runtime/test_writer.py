"""The write path's scheduling: a lone blocking call runs on its caller's thread, concurrent calls
still share commits, queued work keeps its order, close waits for a running call."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from stdbmod import Database
from stdbmod.errors import DatabaseClosed
from tests.conftest import ALICE
from tests.runtime.busy_writer import entered, gate, m, reset, threads_seen


@pytest.fixture
def db(make_db: Callable[..., Database]) -> Database:
    reset()
    return make_db(m)


def _batches(db: Database) -> list[int]:
    sizes: list[int] = []
    run = db._core.run_batch

    def counting(batch: list[Any], more: Callable[[], bool] | None) -> None:
        sizes.append(len(batch))
        run(batch, more)

    db._writer._run_batch = counting
    return sizes


def test_a_lone_call_runs_on_the_callers_thread(db: Database) -> None:
    assert db.call("add", "a", sender=ALICE) == 1
    assert threads_seen == [threading.get_ident()]
    db.submit("add", "b", sender=ALICE).result()  # submit always goes to the writer thread
    assert threads_seen[1] == db._writer.thread.ident


def test_calls_made_while_the_writer_is_busy_share_one_commit(db: Database) -> None:
    sizes = _batches(db)
    holder = threading.Thread(target=db.call, args=("hold",), kwargs={"sender": ALICE})
    holder.start()
    assert entered.wait(10)
    results: list[int] = []
    callers = [threading.Thread(target=lambda i=i: results.append(db.call("add", f"t{i}", sender=ALICE))) for i in range(8)]
    for t in callers:
        t.start()
    while db._writer._queued < 8:  # every caller has queued its call behind the busy writer
        threading.Event().wait(0.001)
    gate.set()
    holder.join()
    for t in callers:
        t.join()
    assert sorted(results) == list(range(2, 10))
    assert sizes == [1, 8]


def test_work_queued_earlier_runs_first(db: Database) -> None:
    holder = threading.Thread(target=db.call, args=("hold",), kwargs={"sender": ALICE})
    holder.start()
    assert entered.wait(10)
    first = db.submit("add", "first", sender=ALICE)
    second: list[int] = []
    t = threading.Thread(target=lambda: second.append(db.call("add", "second", sender=ALICE)))
    t.start()
    while db._writer._queued < 2:
        threading.Event().wait(0.001)
    gate.set()
    holder.join()
    t.join()
    assert first.result() == 2 and second == [3]
    # and once idle again, a call runs at once on this thread, after everything before it
    assert db.call("add", "third", sender=ALICE) == 4
    with db.read() as view:
        assert [i.text for i in view.db.item.iter()] == ["held", "first", "second", "third"]


def test_close_waits_for_a_call_running_on_its_callers_thread(db: Database) -> None:
    out: list[Any] = []
    holder = threading.Thread(target=lambda: out.append(db.call("hold", sender=ALICE)))
    holder.start()
    assert entered.wait(10)
    closer = threading.Thread(target=db.close)
    closer.start()
    closer.join(0.2)
    assert closer.is_alive()  # the running call holds it
    gate.set()
    closer.join(10)
    holder.join(10)
    assert not closer.is_alive() and out == [None]
    with pytest.raises(DatabaseClosed):
        db.call("add", "late", sender=ALICE)


def _committed_texts(db: Database) -> list[str]:
    """The `add` calls in commit order, as the commit log records them."""
    decode = db.module.reducers["add"].msgpack_decoder.decode
    return [decode(r.args).text for r in db.commit_log() if r.reducer == "add"]


@pytest.mark.parametrize("threads", [1, 4])
def test_commit_order_is_submission_order_under_contention(db: Database, threads: int) -> None:
    """Each thread queues a job (`submit`) and at once makes a blocking call, which may run on the
    thread itself when the writer looks idle: it must never overtake the job the same thread
    queued before it. The commit log says what committed in which order."""
    rounds = 150

    def client(t: int) -> None:
        for i in range(rounds):
            queued = db.submit("add", f"{t}:{2 * i}", sender=ALICE)
            db.call("add", f"{t}:{2 * i + 1}", sender=ALICE)
            queued.result()

    clients = [threading.Thread(target=client, args=(t,)) for t in range(threads)]
    for c in clients:
        c.start()
    for c in clients:
        c.join(120)
    order = _committed_texts(db)
    assert len(order) == 2 * rounds * threads
    for t in range(threads):
        assert [int(x.split(":")[1]) for x in order if x.startswith(f"{t}:")] == list(range(2 * rounds))
