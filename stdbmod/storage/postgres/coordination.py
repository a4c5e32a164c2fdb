"""How nodes on one PostgreSQL schema coordinate: who runs the schedules, and who committed.

- Leadership: a session-level advisory lock on a connection of its own. PostgreSQL releases it
  when that session ends, so a leader killed with -9 frees it as soon as the kernel closes its
  socket, and one whose machine vanished once TCP keepalives give up (set short on this
  connection: about `KEEPALIVE` seconds). Followers try to take it at every scheduler pass and
  at least every `POLL` seconds.
- Commits: a write transaction may `announce` a short text; it is sent with `pg_notify` inside
  the transaction, so PostgreSQL delivers it only if, and when, the transaction commits. Each
  node listens on a connection of its own and hands the announcements of the *other* nodes to a
  callback. A notification is a wake-up, never the data: after a lost connection the callback
  is called with None ("you may have missed some: look at the commit log").
"""

from __future__ import annotations

import logging
import os
import threading
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import psycopg

from .sql import LOCK_CLASS, lock_key

if TYPE_CHECKING:
    from .storage import PostgresStorage

log = logging.getLogger("stdbmod.postgres")

LEADER_CLASS = LOCK_CLASS + 1  # the leader lock: beside the writers' lock, never the same
KEEPALIVE: dict[str, Any] = {"keepalives": 1, "keepalives_idle": 5, "keepalives_interval": 1, "keepalives_count": 3}
SERVER_KEEPALIVE = "SET tcp_keepalives_idle = 5; SET tcp_keepalives_interval = 1; SET tcp_keepalives_count = 3"
POLL = 1.0  # how often a follower tries to take the lead, and a listener retries its connection


def channel(schema: str) -> str:
    return f"stdbmod_{schema}"[:63]


class Leadership:
    def __init__(self, storage: PostgresStorage) -> None:
        self._s = storage
        self._conn: psycopg.Connection[Any] | None = None
        self._held = False
        self._lock = threading.Lock()
        self._sql = f"SELECT pg_try_advisory_lock({LEADER_CLASS}, {lock_key(storage.schema)})"

    def lead(self) -> bool:
        """Whether this node leads now (taking the lead if it is free). One round trip."""
        with self._lock:
            try:
                conn = self._conn
                if conn is None or conn.closed or conn.broken:
                    self._held = False
                    if conn is not None:
                        conn.close()
                    # named for its process: pg_stat_activity says which node leads
                    kwargs = {**self._s._connect_kwargs(), **KEEPALIVE, "application_name": f"stdbmod-lead-{os.getpid()}"}
                    conn = self._conn = psycopg.connect(self._s.dsn, **kwargs)
                    conn.execute(SERVER_KEEPALIVE, prepare=False)
                if self._held:
                    conn.execute("SELECT 1")  # still connected: still the holder
                else:
                    row = conn.execute(self._sql).fetchone()
                    self._held = bool(row and row[0])
                    if self._held:
                        log.info("this node leads the schedules of %s", self._s.schema)
            except psycopg.Error as e:
                if self._held:
                    log.warning("lost the lead of %s: %s", self._s.schema, e)
                self._held = False
            return self._held

    def backend_pid(self) -> int | None:
        """The leader connection's server process (tests kill it to see a failover)."""
        conn = self._conn
        return conn.info.backend_pid if conn is not None and not conn.closed else None

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()  # ending the session releases the lock
                self._conn = None
            self._held = False


class Listener:
    """Calls `callback(message)` for each announcement another node's commit made, or
    `callback(None)` after a gap (reconnected), on a thread of its own."""

    def __init__(self, storage: PostgresStorage, node: str, callback: Callable[[str | None], None]) -> None:
        self._s = storage
        self._node = node
        self._callback = callback
        self._stop = threading.Event()
        self._conn: psycopg.Connection[Any] | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"stdbmod-listen-{storage.schema}", daemon=True)
        self._thread.start()

    def wait_ready(self, timeout: float) -> bool:
        """Whether the first LISTEN is in place (commits after this are seen)."""
        return self._ready.wait(timeout)

    def _loop(self) -> None:
        first = True
        prefix = self._node + " "
        while not self._stop.is_set():
            try:
                with psycopg.connect(self._s.dsn, **self._s._connect_kwargs(), **KEEPALIVE) as conn:
                    self._conn = conn
                    conn.execute(f'LISTEN "{channel(self._s.schema)}"')
                    self._ready.set()
                    if not first:
                        self._callback(None)  # what was committed while we were away
                    first = False
                    while not self._stop.is_set():
                        for note in conn.notifies(timeout=POLL):
                            if not note.payload.startswith(prefix):
                                self._callback(note.payload.partition(" ")[2])
            except psycopg.Error as e:
                if self._stop.is_set():
                    return
                log.warning("listening for other nodes' commits on %s: %s; reconnecting", self._s.schema, e)
                self._stop.wait(POLL)
            except Exception:  # the callback's own failure must not end the listening
                log.exception("a commit callback failed")
            finally:
                self._conn = None

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=POLL * 3)


def new_node_id() -> str:
    return uuid.uuid4().hex[:12]
