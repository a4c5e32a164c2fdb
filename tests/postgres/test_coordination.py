"""Nodes on one schema: one leads the schedules at a time and another takes over when it dies;
a committed transaction's announcement reaches the other nodes (never an aborted one's)."""

from __future__ import annotations

import queue
import time
from collections.abc import Callable, Iterator

import psycopg
import pytest

from stdbmod.storage.postgres import PostgresStorage
from tests.postgres import server

WAIT = 30.0  # generous: the machine is shared


@pytest.fixture
def nodes() -> Iterator[list[PostgresStorage]]:
    with server.fresh_schema() as schema:
        made = [PostgresStorage(server.DSN, schema=schema, readers=1) for _ in range(3)]
        try:
            yield made
        finally:
            for s in made:
                s.close()


def until(check: Callable[[], bool]) -> bool:
    """Whether `check` comes true within WAIT: a session's end reaches PostgreSQL's lock table
    a moment after the client lets go (the node's own loop retries every second the same way)."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.02)
    return False


def terminate(pid: int | None) -> None:
    assert pid is not None
    with psycopg.connect(server.DSN, autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(%s)", (pid,))


def test_one_node_leads_and_another_takes_over_when_its_session_ends(nodes: list[PostgresStorage]) -> None:
    a, b, c = nodes
    assert [a.lead(), b.lead(), c.lead()] == [True, False, False]
    assert a.lead() and not b.lead()  # holding it is stable
    assert a._leadership is not None
    terminate(a._leadership.backend_pid())  # what kill -9 of the leader's process amounts to
    assert until(lambda: any(s.lead() for s in nodes))  # someone leads again (a may win the race)
    assert sum(s.lead() for s in nodes) == 1  # and only one


def test_a_closed_leader_frees_the_lead(nodes: list[PostgresStorage]) -> None:
    a, b, _ = nodes
    assert a.lead() and not b.lead()
    a.close()
    assert not a.lead()
    assert until(b.lead)


def test_announcements_reach_the_other_nodes_only_when_committed(nodes: list[PostgresStorage]) -> None:
    a, b, c = nodes
    got_a: queue.Queue[str | None] = queue.Queue()
    got_b: queue.Queue[str | None] = queue.Queue()
    got_c: queue.Queue[str | None] = queue.Queue()
    stops = [a.watch(got_a.put), b.watch(got_b.put), c.watch(got_c.put)]
    a.ensure_spaces(["s"])
    w = a.begin_write()
    w.put("s", b"k", b"v")
    w.announce("aborted")
    w.abort()
    w = a.begin_write()
    w.put("s", b"k", b"v")
    child = w.child()
    child.announce("child aborted")
    child.abort()
    child = w.child()
    child.announce("first")
    child.commit()
    w.announce("second")
    w.commit()
    assert [got_b.get(timeout=WAIT), got_b.get(timeout=WAIT)] == ["first", "second"]
    assert [got_c.get(timeout=WAIT), got_c.get(timeout=WAIT)] == ["first", "second"]
    w = b.begin_write()  # b's own commit reaches a and c, not b
    w.put("s", b"k2", b"v")
    w.announce("from b")
    w.commit()
    assert got_a.get(timeout=WAIT) == "from b"
    assert got_c.get(timeout=WAIT) == "from b"
    assert got_b.empty() and got_a.empty()
    for stop in stops:
        stop()


def test_a_listener_that_lost_its_connection_reconnects_and_says_it_may_have_missed_some(nodes: list[PostgresStorage]) -> None:
    a, b, _ = nodes
    got: queue.Queue[str | None] = queue.Queue()
    stop = b.watch(got.put)
    listener = b._listeners[0]
    assert listener._conn is not None
    terminate(listener._conn.info.backend_pid)
    assert got.get(timeout=WAIT) is None
    assert listener.wait_ready(WAIT)
    a.ensure_spaces(["s"])
    for _ in range(100):  # the new LISTEN may not be in place yet: commit until one arrives
        w = a.begin_write()
        w.put("s", b"k", b"v")
        w.announce("after")
        w.commit()
        try:
            assert got.get(timeout=0.5) == "after"
            break
        except queue.Empty:
            continue
    else:
        raise AssertionError("no announcement arrived after the reconnect")
    stop()
