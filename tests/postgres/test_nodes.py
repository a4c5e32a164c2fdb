"""Several nodes (Databases on one PostgreSQL schema, here in one process): calls from any node
in one total order, transient storage failures re-run without the caller noticing, every node's
follower sees every commit, and one node at a time runs the schedules, another taking over."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from typing import Annotated

import msgspec
import psycopg
import pytest

from stdbmod import Database, Identity, Module, PrimaryKey, ReducerContext
from stdbmod.errors import TransientStorageError
from stdbmod.examples.bank import bank
from stdbmod.runtime import Scheduler
from stdbmod.runtime.commitlog import CommitRecord
from stdbmod.storage import WriteTxn
from stdbmod.storage.postgres import PostgresStorage
from tests.postgres import server

OWNER = Identity.from_claims("nodes", "owner")
WAIT = 60.0


class Counter(msgspec.Struct):
    id: Annotated[int, PrimaryKey()]
    n: int


counter = Module("counter")
counter.table(Counter)
_counter = counter.tables["counter"].row_format.decode  # a row image of the commit log


@counter.reducer
def bump(ctx: ReducerContext) -> int:
    row: Counter | None = ctx.db.counter.id.find(0)
    if row is None:
        ctx.db.counter.insert(Counter(0, 1))
        return 1
    ctx.db.counter.id.update(Counter(0, row.n + 1))
    return row.n + 1


KILL: list[PostgresStorage] = []  # the reducer below kills this storage's writer connection once


@counter.reducer
def bump_and_lose_the_connection(ctx: ReducerContext) -> int:
    n: int = bump(ctx)
    if KILL:
        storage = KILL.pop()
        assert storage._writer is not None
        with psycopg.connect(server.DSN, autocommit=True) as conn:
            conn.execute("SELECT pg_terminate_backend(%s)", (storage._writer.info.backend_pid,))
    return n


@pytest.fixture
def schema() -> Iterator[str]:
    with server.fresh_schema() as name:
        yield name


def node(schema: str, module: Module, create: bool = False) -> Database:
    storage = PostgresStorage(server.DSN, schema=schema, readers=2)
    if create:
        return Database.create(storage, module, owner=OWNER)
    return Database.open(storage, module)


def test_calls_from_three_nodes_under_contention_form_one_order(schema: str) -> None:
    """Eight threads on each of three nodes bump one counter: no update is lost, every caller's
    answers rise, and the commit log's order is the order of the answers."""
    nodes = [node(schema, counter, create=True), node(schema, counter), node(schema, counter)]
    answers: dict[tuple[int, int], list[int]] = {}
    errors: list[BaseException] = []

    def work(i: int, t: int) -> None:
        mine = answers.setdefault((i, t), [])
        try:
            for _ in range(15):
                mine.append(nodes[i].call("bump", sender=OWNER))
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i, t)) for i in range(3) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=WAIT * 4)
    try:
        assert not errors
        got = sorted(n for mine in answers.values() for n in mine)
        assert got == list(range(1, 3 * 8 * 15 + 1))  # none lost, none twice
        for mine in answers.values():
            assert mine == sorted(mine)  # each client's history is increasing
        log = nodes[1].commit_log()
        assert [r.offset for r in log] == list(range(len(log)))
        bumps = [r for r in log if r.reducer == "bump"]
        values = [_counter(r.changes[0].inserts[0]).n for r in bumps]
        assert values == list(range(1, 361))  # the log's order is the answers' order
    finally:
        for db in nodes:
            db.close()


def test_a_connection_lost_mid_batch_is_run_again_without_the_caller_noticing(schema: str) -> None:
    db = node(schema, counter, create=True)
    try:
        assert db.call("bump", sender=OWNER) == 1
        KILL.append(db.storage)  # type: ignore[arg-type]
        assert db.call("bump_and_lose_the_connection", sender=OWNER) == 2  # ran twice, committed once
        assert db.call("bump", sender=OWNER) == 3
        assert [r.reducer for r in db.commit_log()][-3:] == ["bump", "bump_and_lose_the_connection", "bump"]
    finally:
        KILL.clear()
        db.close()


class Flaky(PostgresStorage):
    """Its next `failures` top-level commits fail as a serialization failure would."""

    failures = 0

    def begin_write(self) -> WriteTxn:
        outer = super().begin_write()
        real = outer.commit

        def commit() -> None:
            if self.failures:
                self.failures -= 1
                outer.abort()
                raise TransientStorageError("could not serialize access due to concurrent update (injected)")
            real()

        outer.commit = commit  # type: ignore[method-assign]
        return outer


def test_serialization_failures_are_retried_without_the_caller_noticing(schema: str) -> None:
    storage = Flaky(server.DSN, schema=schema, readers=2)
    db = Database.create(storage, counter, owner=OWNER)
    try:
        storage.failures = 3
        assert db.call("bump", sender=OWNER) == 1
        assert storage.failures == 0
        assert [r.reducer for r in db.commit_log()] == ["init", "bump"]
    finally:
        db.close()


def into(q: queue.Queue[CommitRecord], kind: str | None = None) -> Callable[[list[CommitRecord]], None]:
    def put(records: list[CommitRecord]) -> None:
        for r in records:
            if kind is None or r.kind == kind:
                q.put(r)

    return put


def test_every_node_follows_every_commit_in_order(schema: str) -> None:
    a = node(schema, counter, create=True)
    b = node(schema, counter)
    seen: dict[str, queue.Queue[CommitRecord]] = {"a": queue.Queue(), "b": queue.Queue()}
    stops = [db.follow_commits(into(seen[k])) for k, db in (("a", a), ("b", b))]
    try:
        for i in range(10):
            (a if i % 2 else b).call("bump", sender=OWNER)
        for k in ("a", "b"):
            got = [seen[k].get(timeout=WAIT) for _ in range(10)]
            assert [_counter(r.changes[0].inserts[0]).n for r in got] == list(range(1, 11))
            assert seen[k].empty()
    finally:
        for stop in stops:
            stop()
        a.close()
        b.close()


def test_one_node_fires_the_schedules_and_another_takes_over(schema: str) -> None:
    """Both nodes run a scheduler; one leads. A one-shot row due now runs once (interest paid
    once). The leader's lock session dies (as with kill -9): the other node takes over and
    fires the next row."""
    a = Database.create(PostgresStorage(server.DSN, schema=schema, readers=2), bank, owner=OWNER)
    b = Database.open(PostgresStorage(server.DSN, schema=schema, readers=2), bank)
    fired: queue.Queue[CommitRecord] = queue.Queue()
    stop_follow = a.follow_commits(into(fired, "scheduled"))
    schedulers = [Scheduler(a).start(), Scheduler(b).start()]
    try:
        a.call("open_account", 1000, sender=OWNER)
        a.call("schedule_interest", 10, 0, True, sender=OWNER)
        first = fired.get(timeout=WAIT)
        leader = next(db for db in (a, b) if db.storage._leadership is not None and db.storage._leadership._held)  # type: ignore[attr-defined]
        with a.read() as v:
            assert [acc.balance for acc in v.db.account.iter()] == [1100]  # once, not twice
        other = b if leader is a else a
        pid = leader.storage._leadership.backend_pid()  # type: ignore[attr-defined]
        schedulers[0 if leader is a else 1].stop()  # the leader's scheduler is gone...
        with psycopg.connect(server.DSN, autocommit=True) as conn:  # ...and so is its lock session
            conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
        other.call("schedule_interest", 10, 0, True, sender=OWNER)
        second = fired.get(timeout=WAIT)
        assert second.offset > first.offset
        assert other.storage._leadership is not None and other.storage._leadership._held  # type: ignore[attr-defined]
        with a.read() as v:
            assert [acc.balance for acc in v.db.account.iter()] == [1210]
        assert fired.empty()
    finally:
        stop_follow()
        for s in schedulers:
            s.stop()
        a.close()
        b.close()


def test_a_nodes_caches_hold_across_its_own_commits_and_not_past_anothers(schema: str) -> None:
    """The writer's cache (cached tables' rows, sequences, counts) outlives a batch while the
    schema's version says no other node committed since (`WriteTxn.serial`)."""
    from tests.runtime.test_row_cache import m as cached

    a, b = node(schema, cached, create=True), node(schema, cached)
    try:
        # `shared`'s rows are frozen: a node hands out the row it decoded, until another node's
        # commit empties its cache
        for t in ("setting", "shared"):
            assert a.call("put", t, 1, sender=OWNER) == 1
            assert a.call("read", t, sender=OWNER) == 1
            assert a._core._cache_serial is not None  # trusted for the next batch, if nobody else writes
            assert b.call("put", t, 2, sender=OWNER) == 2
            assert a.call("read", t, sender=OWNER) == 2  # the other node's write is seen
            assert b.call("read", t, sender=OWNER) == 2
        # the sequence of `seen` (a's reads took 1 and 2 of each table, b's 3) read again after b's commits
        assert a.call("add_then_fail", False, sender=OWNER) == 7
    finally:
        a.close()
        b.close()
