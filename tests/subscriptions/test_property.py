"""The subscription property, by Hypothesis: over random reducer sequences (and clock moves that
fire schedules) on the example modules and the task-retry module, every subscriber's initial
rows with every update applied in order equal the query run directly after each commit; for
subscribers that join at the start and midway, to one table and through joins."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stdbmod import Database, Identity, ManualClock, Module
from stdbmod.errors import StdbError
from stdbmod.examples import bank as bank_example
from stdbmod.examples import shop as shop_example
from stdbmod.retry import create_retry_module
from stdbmod.runtime.sql import run_sql
from stdbmod.storage import MemoryStorage
from stdbmod.types import TimeDuration

from .helpers import Collector, key, rebuild

OWNER = Identity.from_claims("test", "owner")
WHO = [OWNER] + [Identity.from_claims("test", f"p{i}") for i in range(3)]

Action = tuple[str, tuple[Any, ...], int]  # reducer, arguments, index into WHO; reducer "" = move the clock
who = st.integers(0, len(WHO) - 1)
tick = st.tuples(st.just(""), st.tuples(st.sampled_from([1, 10, 60, 600])), st.just(0))

BANK_QUERIES = [
    "SELECT * FROM account WHERE balance > 12",
    "SELECT a.* FROM account a JOIN transfer t ON a.id = t.to_id WHERE t.amount > 1",
    "SELECT t.* FROM transfer t JOIN account a ON t.from_id = a.id WHERE a.balance < 20 OR t.amount = 3",
    "SELECT a.* FROM account a JOIN account b ON a.balance = b.id",  # a self-join
    "SELECT * FROM interest_timer",
]
bank_actions = st.one_of(
    st.tuples(st.just("open_account"), st.tuples(st.integers(0, 30)), who),
    st.tuples(st.just("transfer"), st.tuples(st.integers(1, 5), st.integers(0, 8)), who),
    st.tuples(st.just("transfer"), st.tuples(st.integers(1, 4), st.integers(1, 4)), who),
    st.tuples(st.just("schedule_interest"), st.tuples(st.integers(1, 20), st.sampled_from([5, 60]), st.booleans()), st.just(0)),
    st.tuples(st.just("crash"), st.just(()), who),
    tick,
)

RETRY_QUERIES = [
    "SELECT * FROM task WHERE status = 'queued'",
    "SELECT * FROM task WHERE status = 'running' AND attempts >= 1",
    "SELECT * FROM attempt",
    "SELECT t.* FROM task t JOIN attempt a ON t.id = a.task_id WHERE a.outcome = 'failed'",
    "SELECT * FROM attempt_timer",
]
task_id = st.integers(1, 6)
retry_actions = st.one_of(
    st.tuples(st.just("enqueue"), st.tuples(st.sampled_from(["email", "hook"]), st.sampled_from([None, "q2"]), st.sampled_from([None, {"n": 1}])), st.just(0)),
    st.tuples(st.just("enqueue"), st.tuples(st.just("local")), st.just(0)),  # an in-module handler
    st.tuples(st.just("claim"), st.tuples(st.sampled_from([None, "q2"]), st.just("w1"), st.sampled_from([None, 5])), st.just(0)),
    st.tuples(st.just("complete"), st.tuples(task_id, st.sampled_from([None, {"ok": True}])), st.just(0)),
    st.tuples(st.just("fail"), st.tuples(task_id, st.just("boom")), st.just(0)),
    st.tuples(st.just("heartbeat"), st.tuples(task_id), st.just(0)),
    st.tuples(st.sampled_from(["cancel", "requeue", "delete_task"]), st.tuples(task_id), st.just(0)),
    st.tuples(st.just("enqueue"), st.tuples(st.just("email")), st.integers(1, 3)),  # refused: not a worker or admin
    tick,
)

SHOP_QUERIES = [
    'SELECT * FROM "order"',
    "SELECT o.* FROM \"order\" o JOIN task t ON o.task_id = t.id WHERE t.status = 'completed'",
    "SELECT * FROM outbox",
    "SELECT * FROM task WHERE status = 'queued'",
]
shop_actions = st.one_of(
    st.tuples(st.just("place_order"), st.tuples(st.sampled_from(["book", ""]), st.sampled_from(["a@x", "bad"])), who),
    tick,
)


def retry_module() -> Module:
    rm = create_retry_module()

    @rm.handler("local")
    def local(ctx: Any, payload: Any) -> None:
        if ctx.task.attempts < 2:
            raise RuntimeError("the first attempt fails")

    return rm.module


def check(module: Module, queries: list[str], actions: list[Action], join_at: int, prelude: tuple[Action, ...] = ()) -> None:
    clock = ManualClock()
    db = Database.create(MemoryStorage(), module, owner=OWNER, clock=clock)
    try:
        first = Collector()
        subs = [(db.subscribe(queries, first, sender=OWNER), first)]

        def direct(query: str) -> set[bytes]:
            r = run_sql(db, query, OWNER)
            row_type = module.tables[r.table].row_type
            return {key(row_type(*values)) for values in r.rows}

        for step, (reducer, args, w) in enumerate([*prelude, *actions]):
            if step == join_at:
                later = Collector()
                subs.append((db.subscribe(queries[::-1], later, sender=OWNER), later))
            if reducer:
                try:
                    db.call(reducer, *args, sender=WHO[w])
                except StdbError:
                    pass
            else:
                clock.advance(TimeDuration.from_seconds(args[0]))
                db.run_due()
            for sub, got in subs:
                assert sub.sync()
                held = rebuild(got.events)
                for q in queries:
                    assert held[q] == direct(q), (q, step)
    finally:
        db.close()


common = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@common
@given(actions=st.lists(bank_actions, max_size=30), join_at=st.integers(0, 30))
def test_bank(actions: list[Action], join_at: int) -> None:
    accounts: list[Action] = [("open_account", (10 + 5 * i,), i) for i in range(len(WHO))]  # so transfers can succeed
    check(bank_example.bank, BANK_QUERIES, actions, join_at, tuple(accounts))


@common
@given(actions=st.lists(retry_actions, max_size=30), join_at=st.integers(0, 30))
def test_retry(actions: list[Action], join_at: int) -> None:
    tasks: list[Action] = [("enqueue", ("email",), 0), ("enqueue", ("hook", "q2"), 0), ("enqueue", ("local",), 0)]
    check(retry_module(), RETRY_QUERIES, actions, join_at, tuple(tasks))


@common
@given(actions=st.lists(shop_actions, max_size=15), join_at=st.integers(0, 15))
def test_shop(actions: list[Action], join_at: int) -> None:
    check(shop_example.shop, SHOP_QUERIES, actions, join_at)

