"""`db.subscribe` in process: initial rows, then one update per commit touching the queries, with
the call that made it, in commit order; failed calls send nothing; a subscriber's own calls come
back tagged; joins; several query sets; slow, raising and dropped subscribers."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from stdbmod import Database, Identity, ManualClock
from stdbmod.errors import PermissionDenied, SenderError
from stdbmod.examples.bank import bank
from stdbmod.retry import create_retry_module
from stdbmod.runtime.sql import SqlError, run_sql
from stdbmod.runtime.subscriptions import Applied, CallOutcome, Dropped, Removed, Update

from .helpers import Collector, key, rebuild

OWNER = Identity.from_claims("test", "owner")
PEOPLE = [Identity.from_claims("test", f"p{i}") for i in range(12)]
RICH = "SELECT * FROM account WHERE balance > 15"


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    d = Database.create(tmp_path / "db", bank, owner=OWNER, clock=ManualClock())
    yield d
    d.close()


def direct(db: Database, query: str) -> set[bytes]:
    r = run_sql(db, query, OWNER)
    row_type = db.module.tables[r.table].row_type
    return {key(row_type(*values)) for values in r.rows}


def test_initial_rows_then_an_update_per_commit_with_its_call(db: Database) -> None:
    db.call("open_account", 20, sender=PEOPLE[0])
    db.call("open_account", 5, sender=PEOPLE[1])
    got = Collector()
    sub = db.subscribe([RICH], got, sender=PEOPLE[5])
    assert [[a.balance for a in q.rows] for q in sub.initial] == [[20]]
    db.call("open_account", 30, sender=PEOPLE[2])  # in
    db.call("open_account", 1, sender=PEOPLE[3])  # not in: nothing sent
    db.call("transfer", 2, 10, sender=PEOPLE[0])  # 20 -> 10 leaves, 5 -> 15 stays out
    assert sub.sync()
    applied = got.events[0]
    assert isinstance(applied, Applied) and applied.rows[0].rows == sub.initial[0].rows
    updates = got.of(Update)
    assert len(got.events) == 3 and len(updates) == 2
    first, second = updates
    assert (first.reducer, first.sender, first.kind) == ("open_account", PEOPLE[2], "call")
    assert [a.balance for a in first.inserts("account")] == [30] and first.deletes("account") == []
    assert [a.balance for a in second.deletes("account")] == [20] and second.inserts("account") == []
    assert second.timestamp == db.clock.now() and first.offset < second.offset
    assert msgspec.msgpack.decode(second.args) == [2, 10]  # the call's arguments, as logged
    assert rebuild(got.events)[RICH] == direct(db, RICH)
    sub.unsubscribe()
    db.call("open_account", 99, sender=PEOPLE[4])
    assert len(got.events) == 3  # nothing after unsubscribe returned


def test_a_failed_call_sends_nothing_and_its_caller_hears_why(db: Database) -> None:
    db.call("open_account", 20, sender=PEOPLE[0])
    db.call("open_account", 20, sender=PEOPLE[1])
    watcher, caller = Collector(), Collector()
    w = db.subscribe(["SELECT * FROM account"], watcher, sender=PEOPLE[6])
    c = db.subscribe(["SELECT * FROM account"], caller, sender=PEOPLE[0])
    with pytest.raises(Exception, match="insufficient funds"):
        c.call("transfer", 1, 1000, tag="t1").result()
    with pytest.raises(Exception, match="The instance encountered a fatal error"):
        c.call("crash", tag="t2").result()
    assert c.call("transfer", 2, 5, tag="t3").result() is None
    assert c.sync() and w.sync()
    outcomes = caller.of(CallOutcome)
    assert [(o.tag, o.reducer, o.error) for o in outcomes] == [
        ("t1", "transfer", "insufficient funds"),
        ("t2", "crash", "The instance encountered a fatal error."),
    ]
    (mine,) = caller.of(Update)
    assert mine.tag == "t3" and mine.reducer == "transfer"
    (theirs,) = watcher.of(Update)
    assert theirs.tag is None and theirs.offset == mine.offset  # the others see the commit, untagged
    assert watcher.of(CallOutcome) == []


def test_an_own_call_that_touches_no_query_still_comes_back(db: Database) -> None:
    got = Collector()
    sub = db.subscribe(["SELECT * FROM account WHERE balance > 1000"], got, sender=PEOPLE[0])
    sub.call("open_account", 1, tag=1).result()
    with pytest.raises(SenderError):
        sub.call("transfer", 99, 1, tag=2).result()
    assert sub.sync()
    (update,) = got.of(Update)
    assert update.tag == 1 and update.changes == []  # committed, nothing the queries hold
    assert [o.tag for o in got.of(CallOutcome)] == [2]
    assert got.events.index(update) < got.events.index(got.of(CallOutcome)[0])  # in order


def test_updates_arrive_in_commit_order_with_several_writers(db: Database) -> None:
    subs = [Collector() for _ in range(3)]
    handles = [db.subscribe(["SELECT * FROM account", "SELECT * FROM transfer WHERE amount > 1"], c, sender=OWNER) for c in subs]

    opened = threading.Barrier(6)  # accounts 1-4, the transfers' targets, exist before any transfer

    def writer(who: Identity) -> None:
        db.call("open_account", 50, sender=who)
        opened.wait(30)
        for k in range(15):
            db.call("transfer", 1 + k % 4, 1 + k % 3, sender=who)

    threads = [threading.Thread(target=writer, args=(p,)) for p in PEOPLE[:6]]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for h, c in zip(handles, subs):
        assert h.sync()
        offsets = [e.offset for e in c.of(Update)]
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
        held = rebuild(c.events)
        assert held["SELECT * FROM account"] == direct(db, "SELECT * FROM account")
        assert held["SELECT * FROM transfer WHERE amount > 1"] == direct(db, "SELECT * FROM transfer WHERE amount > 1")
    assert [e.offset for e in subs[0].of(Update)] == [e.offset for e in subs[1].of(Update)]


def test_a_join_subscription_follows_both_tables(db: Database) -> None:
    query = "SELECT a.* FROM account a JOIN transfer t ON a.id = t.to_id WHERE t.amount >= 3"
    for p in PEOPLE[:4]:
        db.call("open_account", 20, sender=p)
    db.call("transfer", 2, 5, sender=PEOPLE[0])
    got = Collector()
    sub = db.subscribe([query], got, sender=OWNER)
    assert [a.id for a in sub.initial[0].rows] == [2]
    db.call("transfer", 2, 3, sender=PEOPLE[2])  # a second partner for 2: the row is held once already
    db.call("transfer", 3, 1, sender=PEOPLE[0])  # too small: nothing
    db.call("transfer", 3, 4, sender=PEOPLE[0])  # account 3 joins
    db.call("transfer", 2, 1, sender=PEOPLE[3])  # account 2 changes balance: its row is deleted and inserted
    run_sql(db, "DELETE FROM transfer WHERE to_id = 3", OWNER)  # account 3 leaves
    assert sub.sync()
    updates = got.of(Update)
    assert [([a.id for a in u.deletes("account")], [a.id for a in u.inserts("account")]) for u in updates] == [
        ([2], [2]),  # account 3 paid account 2: 2 is still in, with a new balance
        ([], [3]),
        ([2], [2]),
        ([3], []),
    ]
    assert rebuild(got.events)[query] == direct(db, query)


def test_query_sets_come_and_go(db: Database) -> None:
    db.call("open_account", 20, sender=PEOPLE[0])
    got = Collector()
    sub = db.subscribe([], got, sender=OWNER)
    assert sub.initial == [] and got.events == []
    set_id = sub.add(["SELECT * FROM account", "SELECT * FROM transfer"])
    db.call("open_account", 20, sender=PEOPLE[1])
    held = sub.remove(set_id)
    db.call("open_account", 20, sender=PEOPLE[2])
    assert sub.sync()
    kinds = [type(e).__name__ for e in got.events]
    assert kinds == ["Applied", "Update", "Removed"]
    assert [len(q.rows) for q in held] == [2, 0] and isinstance(got.events[-1], Removed)


def test_refusals_name_the_table_or_column(db: Database) -> None:
    for query, message in [
        ("SELECT id FROM account", "a subscription returns whole rows of one table"),
        ("SELECT * FROM account ORDER BY id", "a subscription takes no ORDER BY or LIMIT"),
        ("SELECT COUNT(*) FROM account", "whole rows of one table"),
        ("DELETE FROM account", "a subscription is a SELECT"),
        ("SELECT * FROM nowhere", "no table named 'nowhere'"),
        ("SELECT * FROM account WHERE colour = 1", "table account has no column 'colour'"),
    ]:
        with pytest.raises(SqlError) as e:
            db.subscribe([query], Collector(), sender=OWNER)
        assert message in str(e.value)
    with pytest.raises(PermissionDenied, match="table config is private"):
        db.subscribe(["SELECT * FROM config"], Collector(), sender=PEOPLE[0])
    assert db.subscribe(["SELECT * FROM config"], Collector(), sender=OWNER).initial[0].rows[0].banker == OWNER


def test_private_tables_for_the_retry_modules_admins(tmp_path: Path) -> None:
    rm = create_retry_module()
    with Database.create(tmp_path / "db", rm.module, owner=OWNER, clock=ManualClock(), durable=False) as d:
        d.call("add_admin", PEOPLE[0], sender=OWNER)
        got = Collector()
        sub = d.subscribe(["SELECT * FROM task WHERE status = 'queued'"], got, sender=PEOPLE[0])
        d.call("enqueue", "email", sender=OWNER)
        assert sub.sync() and [t.job_type for t in got.of(Update)[0].inserts("task")] == ["email"]
        with pytest.raises(PermissionDenied, match="retry admins"):
            d.subscribe(["SELECT * FROM task"], Collector(), sender=PEOPLE[1])


def test_a_slow_or_raising_callback_blocks_nobody(db: Database) -> None:
    release = threading.Event()
    blocked: list[Any] = []

    def slow(event: Any) -> None:
        blocked.append(event)
        release.wait(30)

    def raising(event: Any) -> None:
        raise RuntimeError("a broken subscriber")

    fast = Collector()
    s1 = db.subscribe(["SELECT * FROM account"], slow, sender=OWNER)
    s2 = db.subscribe(["SELECT * FROM account"], raising, sender=OWNER)
    s3 = db.subscribe(["SELECT * FROM account"], fast, sender=OWNER)
    for p in PEOPLE[:10]:
        db.call("open_account", 1, sender=p)  # the writer does not wait for the slow one
    assert s3.sync() and len(fast.of(Update)) == 10
    assert len(blocked) == 1  # still in its first event (the Applied)
    release.set()
    assert s1.sync() and s2.sync() and len(blocked) == 11
    assert s2.active  # a raising callback is logged, the subscription goes on


def test_a_subscriber_too_far_behind_is_dropped(db: Database) -> None:
    release = threading.Event()
    seen: list[Any] = []

    def slow(event: Any) -> None:
        seen.append(event)
        release.wait(30)

    sub = db.subscribe(["SELECT * FROM account"], slow, sender=OWNER, max_pending=3)
    other = Collector()
    db.subscribe(["SELECT * FROM account"], other, sender=OWNER)
    for p in PEOPLE[:8]:
        db.call("open_account", 1, sender=p)
    assert other.wait(lambda es: len([e for e in es if isinstance(e, Update)]) == 8)
    release.set()
    assert sub.sync()
    assert isinstance(seen[-1], Dropped) and "more than 3 events behind" in seen[-1].reason
    assert not sub.active and len(seen) <= 5  # the Applied, at most 3 queued, the Dropped
