"""What the contract suite cannot see about the PostgreSQL backend: its client-side write sets
against the memory backend under random nesting, two storages on one schema (two nodes), the
durability setting, and lost connections."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stdbmod.errors import StorageError, TransientStorageError
from stdbmod.storage import MemoryStorage, ReadTxn, WriteTxn
from stdbmod.storage.postgres import PostgresStorage
from stdbmod.storage.postgres.storage import _PgRead
from tests.postgres import server


@pytest.fixture
def schema() -> Iterator[str]:
    with server.fresh_schema() as name:
        yield name


@pytest.fixture
def pg(schema: str) -> Iterator[PostgresStorage]:
    s = PostgresStorage(server.DSN, schema=schema)
    yield s
    s.close()


# --- write sets against the memory backend ------------------------------------------------------

# few keys, so transactions meet each other's keys; zero and 0xff bytes, prefixes of each other
keys = st.sampled_from([b"", b"\x00", b"a", b"a\x00", b"\xff", b"\xff\xff"])
bound = st.none() | keys
op = st.one_of(  # puts and scans weighted up: the bugs live where writes meet stored keys
    st.tuples(st.just("put"), keys),
    st.tuples(st.just("put"), keys),
    st.tuples(st.just("put"), keys),
    st.tuples(st.just("scan"), bound, bound, st.booleans()),
    st.tuples(st.just("delete"), keys),
    st.tuples(st.just("get"), keys),
    st.tuples(st.just("scan"), bound, bound, st.booleans()),
    st.tuples(st.just("count")),
    st.tuples(st.just("child")),
    st.tuples(st.just("child")),
    st.tuples(st.just("commit")),
    st.tuples(st.just("abort")),
    st.tuples(st.just("clear")),
)
spaces = itertools.count()
values = itertools.count()


def observe(txn: ReadTxn, space: str, o: tuple[Any, ...]) -> Any:
    if o[0] == "get":
        return txn.get(space, o[1])
    if o[0] == "scan":
        return list(txn.scan(space, o[1], o[2], o[3]))
    return txn.count(space)


def run_ops(space: str, stacks: list[list[WriteTxn]], ops: list[tuple[Any, ...]]) -> None:
    for o in ops:
        kind = o[0]
        if kind in ("child", "commit", "abort"):
            for stack in stacks:
                if kind == "child":
                    stack.append(stack[-1].child())
                elif len(stack) > 1:
                    getattr(stack.pop(), kind)()
            continue
        seen: list[Any] = []
        value = b"v%d" % next(values)  # every put a new value: an old one showing through is seen
        for stack in stacks:
            t = stack[-1]
            if kind == "put":
                t.put(space, o[1], value)
                seen.append(None)
            elif kind == "delete":
                seen.append(t.delete(space, o[1]))
            elif kind == "clear":
                t.clear(space)
                seen.append(None)
            else:
                seen.append(observe(t, space, o))
        assert seen[0] == seen[1], o
    for stack in stacks:
        while len(stack) > 1:
            stack.pop().commit()
        stack[0].commit()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.lists(op, min_size=2, max_size=25), min_size=1, max_size=3))
def test_write_sets_behave_like_the_memory_backend(pg: PostgresStorage, transactions: list[list[tuple[Any, ...]]]) -> None:
    """Random nested transactions (each a list of operations; a 'child' opens a level, 'commit'
    and 'abort' end the innermost, the top level commits at the end) give the same answers on
    PostgreSQL as in memory, and leave the same committed state."""
    space = f"s{next(spaces)}"
    mem = MemoryStorage()
    mem.ensure_spaces([space])
    pg.ensure_spaces([space])
    for ops in transactions:
        stacks: list[list[WriteTxn]] = [[mem.begin_write()], [pg.begin_write()]]
        try:
            run_ops(space, stacks, ops)
        except BaseException:
            for stack in stacks:
                stack[0].abort()  # a failing example must not leave the writer taken
            raise
        with mem.begin_read() as m, pg.begin_read() as p:
            assert list(m.scan(space)) == list(p.scan(space))
            assert m.count(space) == p.count(space)


def test_long_scans_page_through_in_both_directions(pg: PostgresStorage) -> None:
    pg.ensure_spaces(["a"])
    w = pg.begin_write()
    w.put_many("a", [(i.to_bytes(4, "big"), b"v") for i in range(3000)])
    w.commit()
    with pg.begin_read() as r:
        assert [int.from_bytes(k, "big") for k, _ in r.scan("a")] == list(range(3000))
        assert [int.from_bytes(k, "big") for k, _ in r.scan("a", reverse=True)] == list(range(2999, -1, -1))
        lo, hi = (17).to_bytes(4, "big"), (2900).to_bytes(4, "big")
        assert [int.from_bytes(k, "big") for k, _ in r.scan("a", lo, hi, reverse=True)] == list(range(2899, 16, -1))
        assert r.count("a") == 3000
        assert r.last("a") == ((2999).to_bytes(4, "big"), b"v")


# --- two storages on one schema: two nodes -------------------------------------------------------


def test_two_nodes_share_spaces_and_see_each_others_commits(pg: PostgresStorage, schema: str) -> None:
    other = PostgresStorage(server.DSN, schema=schema)
    try:
        pg.ensure_spaces(["a"])
        w = pg.begin_write()
        w.put("a", b"k", b"from one")
        w.commit()
        with other.begin_read() as r:
            assert r.get("a", b"k") == b"from one" and r.count("a") == 1
        w = other.begin_write()  # the space was created by the other node
        w.put("a", b"k2", b"from two")
        w.commit()
        with pg.begin_read() as r:
            assert list(r.scan("a")) == [(b"k", b"from one"), (b"k2", b"from two")]
    finally:
        other.close()


def test_write_transactions_of_two_nodes_run_one_at_a_time(pg: PostgresStorage, schema: str) -> None:
    """A read-modify-write on one counter from two nodes at once loses no increment: the second
    node's transaction waits for the first's lock and then reads its commit."""
    other = PostgresStorage(server.DSN, schema=schema)
    pg.ensure_spaces(["c"])
    errors: list[BaseException] = []

    def bump(s: PostgresStorage, n: int) -> None:
        try:
            for _ in range(n):
                w = s.begin_write()
                raw = w.get("c", b"n")
                w.put("c", b"n", str(int(raw or b"0") + 1).encode())
                w.commit()
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    try:
        threads = [threading.Thread(target=bump, args=(s, 60)) for s in (pg, other)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert not errors
        with pg.begin_read() as r:
            assert r.get("c", b"n") == b"120"
    finally:
        other.close()


def test_a_writer_of_one_node_blocks_the_other_until_it_ends(pg: PostgresStorage, schema: str) -> None:
    other = PostgresStorage(server.DSN, schema=schema)
    pg.ensure_spaces(["a"])
    started = threading.Event()
    got: list[bytes | None] = []
    w = pg.begin_write()
    w.put("a", b"k", b"first")

    def second() -> None:
        started.set()
        w2 = other.begin_write()
        got.append(w2.get("a", b"k"))
        w2.abort()

    t = threading.Thread(target=second)
    t.start()
    started.wait(10)
    t.join(timeout=0.5)  # a generous look: it must still be waiting for the lock
    assert t.is_alive() and got == []
    w.commit()
    t.join(timeout=30)
    other.close()
    assert got == [b"first"]


# --- durability and connections -----------------------------------------------------------------


def test_synchronous_commit_is_on_unless_asked_otherwise(pg: PostgresStorage, schema: str) -> None:
    w = pg.begin_write()
    assert w._run("SHOW synchronous_commit", ()) == [("on",)]  # type: ignore[attr-defined]
    w.abort()
    fast = PostgresStorage(server.DSN, schema=schema, durable=False)
    w = fast.begin_write()
    assert w._run("SHOW synchronous_commit", ()) == [("off",)]  # type: ignore[attr-defined]
    w.abort()
    fast.close()


def kill_writer(pg: PostgresStorage) -> None:
    assert pg._writer is not None
    pid = pg._writer.info.backend_pid
    with psycopg.connect(server.DSN, autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(%s)", (pid,))


def test_a_connection_lost_before_commit_is_transient_and_the_next_transaction_reconnects(pg: PostgresStorage) -> None:
    pg.ensure_spaces(["a"])
    w = pg.begin_write()
    w.put("a", b"k", b"lost")
    kill_writer(pg)
    with pytest.raises(TransientStorageError):
        w.commit()
    w = pg.begin_write()  # a new connection
    assert w.get("a", b"k") is None
    w.put("a", b"k", b"kept")
    w.commit()
    with pg.begin_read() as r:
        assert r.get("a", b"k") == b"kept"


def test_a_lost_read_connection_is_a_clear_error_and_the_next_read_reconnects(pg: PostgresStorage) -> None:
    pg.ensure_spaces(["a"])
    r = pg.begin_read()
    pid = r._conn.info.backend_pid  # type: ignore[attr-defined]
    with psycopg.connect(server.DSN, autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
    with pytest.raises(StorageError, match="connection"):
        r.get("a", b"k")
    r.close()
    for _ in range(3):  # the pool may hand out other connections it had
        with pg.begin_read() as r2:
            assert r2.get("a", b"k") is None


def test_commit_outcome_after_a_lost_connection_is_asked_of_the_server(pg: PostgresStorage) -> None:
    """The connection died while COMMIT was in flight: `_resolve` asks pg_xact_status; a
    committed transaction is a success, an aborted one transient, never a guess."""
    with psycopg.connect(server.DSN, autocommit=True) as conn:
        conn.execute("BEGIN")
        committed = conn.execute("SELECT pg_current_xact_id()::text").fetchone()[0]  # type: ignore[index]
        conn.execute("COMMIT")
        conn.execute("BEGIN")
        aborted = conn.execute("SELECT pg_current_xact_id()::text").fetchone()[0]  # type: ignore[index]
        conn.execute("ROLLBACK")
    cause = psycopg.OperationalError("server closed the connection unexpectedly")
    pg._resolve(committed, cause)
    with pytest.raises(TransientStorageError):
        pg._resolve(aborted, cause)


def test_an_unreachable_server_is_a_clear_error() -> None:
    with pytest.raises(StorageError, match="cannot connect to PostgreSQL"):
        PostgresStorage("postgresql://nobody@127.0.0.1:1/none")


def test_a_writers_cache_never_hides_another_nodes_commit(pg: PostgresStorage, schema: str) -> None:
    """A node's write transactions remember what they read and wrote (no round trip the next
    time) only while nobody else commits: another node's commit moves the schema's version and
    the next write transaction starts afresh."""
    other = PostgresStorage(server.DSN, schema=schema)
    try:
        pg.ensure_spaces(["a"])
        w = pg.begin_write()
        w.put("a", b"k", b"mine")
        w.commit()
        w = pg.begin_write()
        assert w.get("a", b"k") == b"mine" and w.get("a", b"absent") is None
        w.abort()
        assert pg._cache[("a", b"k")] == b"mine"  # remembered...
        sent = []
        real = _PgRead._run

        def counting(self: _PgRead, query: Any, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
            sent.append(query)
            return real(self, query, params)

        _PgRead._run = counting  # type: ignore[method-assign]
        try:
            w = pg.begin_write()
            assert w.get("a", b"k") == b"mine" and w.get("a", b"absent") is None
            w.abort()
            assert sent == []  # ...and read from memory while nobody else wrote
            w2 = other.begin_write()
            w2.put("a", b"k", b"theirs")
            w2.put("a", b"absent", b"now here")
            w2.commit()
            w = pg.begin_write()
            assert w.get("a", b"k") == b"theirs" and w.get("a", b"absent") == b"now here"
            assert w.delete("a", b"k")
            w.commit()
            w2 = other.begin_write()
            assert w2.get("a", b"k") is None
            w2.abort()
        finally:
            _PgRead._run = real  # type: ignore[method-assign]
    finally:
        other.close()
