"""The PostgreSQL backend: the storage contract over psycopg 3, for several stdbmod processes
(nodes) on one database.

- Layout: one schema per stdbmod database; `kv(space, key, value)` ordered by (space, key) as
  bytes, `spaces(id, name, n)` with each space's key count (see sql.py).
- Reads: `begin_read` takes a pooled connection and opens a REPEATABLE READ, READ ONLY
  transaction, pinning its snapshot at once; it never waits for a writer.
- Writes: one top-level write transaction at a time per process (as LMDB), on a dedicated
  connection, in READ COMMITTED after taking the schema's advisory transaction lock: every
  write transaction of every node runs alone, in lock order, and each statement sees every
  earlier commit. That makes them serializable (docs/architecture.md says why in full).
  Writes wait in the client (writeset.py) and reach PostgreSQL in one statement at commit; a
  nested transaction is a client-side write set, so rolling back one call of a batch costs
  nothing. synchronous_commit is on unless `durable=False`.
- Failures: a serialization failure, a deadlock, or a connection lost before COMMIT was sent is
  `TransientStorageError` (nothing was written: run the transaction again). A connection lost
  while COMMIT was in flight is resolved by asking a new connection for the transaction's
  status (`pg_xact_status`): committed is a success, aborted is transient, anything else is a
  `StorageError` saying the outcome is unknown. Never a wrong answer.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import psycopg
import psycopg.errors
from psycopg_pool import ConnectionPool, PoolTimeout

from ...errors import KeyTooLarge, StorageError, TransientStorageError
from ..base import Storage
from ..txn import ReadTxn, WriteTxn
from .coordination import Leadership, Listener, channel, new_node_id
from .sql import Statements
from .writeset import WriteSet, lookup, merged, pending_range

SCHEMA_RE = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
DEFAULT_SCHEMA = "stdbmod"
# PostgreSQL's btree refuses index entries over ~2.7 kB; stdbmod's own keys stay under 511 bytes.
MAX_KEY = 2000
PAGES = (16, 128, 1024, 8192)  # rows per page of a scan: small first (most scans stop early)
CONNECT_TIMEOUT = 10.0
STATUS_WAIT = 10.0  # how long a commit whose connection died waits for its outcome to be known
CACHE_KEYS = 200_000  # the writer's cache of stored values (emptied when full)
_MISS = object()

_TRANSIENT = (psycopg.errors.SerializationFailure, psycopg.errors.DeadlockDetected)


def _translate(e: psycopg.Error, conn: psycopg.Connection[Any] | None) -> StorageError:
    if isinstance(e, _TRANSIENT):
        return TransientStorageError(f"PostgreSQL: {e.sqlstate}: {e}".rstrip())
    if conn is None or conn.broken or conn.closed:
        return TransientStorageError(f"lost the PostgreSQL connection: {e}".rstrip())
    if isinstance(e, psycopg.errors.DiskFull):
        return StorageError(f"PostgreSQL is out of disk space: {e}".rstrip())
    return StorageError(f"PostgreSQL: {e}".rstrip())


class _PgRead(ReadTxn):
    """Reads over one connection's transaction: a snapshot (`begin_read`) or the writer's."""

    def __init__(self, storage: PostgresStorage, conn: psycopg.Connection[Any]) -> None:
        self._s = storage
        self._conn: psycopg.Connection[Any] | None = conn
        self._cur = conn.cursor(binary=True)
        self._sql = storage.sql

    def _run(self, query: Any, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        if self._conn is None:
            raise StorageError("the transaction has ended")
        try:
            return self._cur.execute(query, params).fetchall()
        except psycopg.Error as e:
            raise _translate(e, self._conn) from e

    def _stored_get(self, space: str, key: bytes) -> bytes | None:
        sid = self._s.space_id(space)
        if sid is None:
            return None
        rows = self._run(self._sql.get, (sid, key))
        return bytes(rows[0][0]) if rows else None

    def _stored_scan(self, space: str, start: bytes | None, stop: bytes | None, reverse: bool) -> Iterator[tuple[bytes, bytes]]:
        """PostgreSQL's pairs in [start, stop), in pages; the transaction's snapshot (or the
        writers' lock) keeps the pages consistent with each other."""
        sid = self._s.space_id(space)
        if sid is None:
            return
        lo_op = None if start is None else ">="
        for size in _pages():
            params: list[Any] = [sid]
            if lo_op is not None:
                params.append(start)
            if stop is not None:
                params.append(stop)
            params.append(size)
            rows = self._run(self._sql.scan(lo_op, stop is not None, reverse), tuple(params))
            for key, value in rows:
                yield bytes(key), bytes(value)
            if len(rows) < size:
                return
            last = bytes(rows[-1][0])
            if reverse:
                stop = last
            else:
                start, lo_op = last, ">"

    def _stored_count(self, space: str) -> int:
        sid = self._s.space_id(space)
        if sid is None:
            return 0
        rows = self._run(self._sql.count, (sid,))
        return int(rows[0][0]) if rows else 0

    def get(self, space: str, key: bytes) -> bytes | None:
        return self._stored_get(space, key)

    def scan(self, space: str, start: bytes | None = None, stop: bytes | None = None, reverse: bool = False) -> Iterator[tuple[bytes, bytes]]:
        return self._stored_scan(space, start, stop, reverse)

    def count(self, space: str) -> int:
        return self._stored_count(space)

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            self._s._end_read(conn)


def _pages() -> Iterator[int]:
    yield from PAGES
    while True:
        yield PAGES[-1]


class _PgWrite(_PgRead, WriteTxn):
    """A write transaction: the top level holds the connection and the writers' lock; a child
    is only a write set over its parent's."""

    def __init__(self, storage: PostgresStorage, conn: psycopg.Connection[Any], parent: _PgWrite | None, serial: int | None = None) -> None:
        super().__init__(storage, conn)
        self._parent = parent
        # the schema's version when the writers' lock was taken: every commit that writes moves
        # it on by one, so it numbers the commits as LMDB's transaction id does (WriteTxn.serial)
        self._serial: int | None = serial if parent is None else parent._serial
        self._mine = WriteSet()
        # innermost first: where a read looks for pending writes
        self._levels: list[WriteSet] = [self._mine, *(parent._levels if parent is not None else ())]
        self._done = False
        self._announced: list[str] = []

    def _live(self) -> None:
        if self._done:
            raise StorageError("the transaction has ended")

    def get(self, space: str, key: bytes) -> bytes | None:
        found, value = lookup(self._levels, space, key)
        return value if found else self._cached_get(space, key)

    def _cached_get(self, space: str, key: bytes) -> bytes | None:
        cache = self._s._cache
        hit = cache.get((space, key), _MISS)
        if hit is not _MISS:
            return hit  # type: ignore[return-value]
        value = self._stored_get(space, key)
        if len(cache) >= CACHE_KEYS:
            cache.clear()
        cache[(space, key)] = value
        return value

    def scan(self, space: str, start: bytes | None = None, stop: bytes | None = None, reverse: bool = False) -> Iterator[tuple[bytes, bytes]]:
        pending = pending_range(self._levels, space, start, stop)
        return merged(self._stored_scan(space, start, stop, reverse), pending, reverse)

    def count(self, space: str) -> int:
        pending = pending_range(self._levels, space, None, None)
        n = self._stored_count(space)
        if not pending:
            return n
        sid = self._s.space_id(space)
        written = [k for k, v in pending if v is not None]
        deleted = [k for k, v in pending if v is None]
        stored_written = self._count_stored(sid, written)
        stored_deleted = self._count_stored(sid, deleted)
        return n + (len(written) - stored_written) - stored_deleted

    def _count_stored(self, sid: int | None, keys: list[bytes]) -> int:
        if sid is None or not keys:
            return 0
        return int(self._run(self._sql.count_keys, (sid, keys))[0][0])

    def put(self, space: str, key: bytes, value: bytes) -> None:
        if space not in self._s._ids:
            self._s.require_space(space)
        if len(key) > MAX_KEY:
            raise KeyTooLarge(f"a key is longer than the PostgreSQL backend's {MAX_KEY}-byte limit")
        self._mine.set(space, bytes(key), bytes(value))

    def delete(self, space: str, key: bytes) -> bool:
        if space not in self._s._ids:
            self._s.require_space(space)
        found, value = lookup(self._levels, space, key)
        existed = value is not None if found else self._cached_get(space, key) is not None
        if existed:
            self._mine.set(space, bytes(key), None)
        return existed

    def clear(self, space: str) -> None:
        if space not in self._s._ids:
            self._s.require_space(space)
        for key in [k for k, _ in self.scan(space)]:
            self._mine.set(space, key, None)

    def announce(self, message: str) -> None:
        self._announced.append(message)

    def child(self) -> WriteTxn:
        self._live()
        assert self._conn is not None
        return _PgWrite(self._s, self._conn, self)

    def serial(self) -> int | None:
        return self._serial

    def commit(self) -> None:
        if self._done:
            return
        self._done = True
        if self._parent is not None:
            self._mine.merge_into(self._parent._mine)
            self._parent._announced += self._announced
            return
        conn, self._conn = self._conn, None
        assert conn is not None
        self._s._commit(conn, self._mine, self._announced)

    def abort(self) -> None:
        if self._done:
            return
        self._done = True
        if self._parent is None:
            conn, self._conn = self._conn, None
            if conn is not None:
                self._s._rollback(conn)

    def close(self) -> None:
        self.abort()


class PostgresStorage(Storage):
    """Spaces in the schema `schema` of the PostgreSQL database at `dsn` (a libpq URL or
    key=value string). `durable=False` turns synchronous_commit off (tests, scratch copies):
    a server crash may then lose the last commits, a client crash never does."""

    shared = True

    def __init__(self, dsn: str, *, schema: str = DEFAULT_SCHEMA, durable: bool = True, readers: int = 8, **_ignored: Any) -> None:
        if not SCHEMA_RE.match(schema):
            raise StorageError(f"schema {schema!r} must match {SCHEMA_RE.pattern}")
        self.dsn = dsn
        self.schema = schema
        self.durable = durable
        self.sql = Statements(schema)
        self._ids: dict[str, int] = {}
        self._ids_lock = threading.Lock()
        self._writer_lock = threading.Lock()  # one top-level write transaction per process
        self._writer: psycopg.Connection[Any] | None = None
        # What this node's write transactions read or wrote, true as long as nobody else commits:
        # valid while the schema's version is `_cache_version` (checked under the writers' lock).
        self._cache: dict[tuple[str, bytes], bytes | None] = {}
        self._cache_version: int | None = None
        self._closed = False
        self.node = new_node_id()  # names this process's announcements, so it skips its own
        self._channel = channel(schema)
        self._leadership: Leadership | None = None
        self._listeners: list[Listener] = []
        self._pool: ConnectionPool[psycopg.Connection[Any]] | None = None
        conn = self._connect()
        try:
            self._create(conn)
        except BaseException:
            conn.close()
            raise
        self._writer = conn
        self._pool = ConnectionPool(
            dsn,
            min_size=1,
            max_size=max(1, readers),
            kwargs=self._connect_kwargs(),
            configure=self._configure,
            timeout=CONNECT_TIMEOUT,
            name=f"stdbmod-{schema}",
            open=True,
        )

    # --- connections ---------------------------------------------------------------------------

    def _connect_kwargs(self) -> dict[str, Any]:
        return {"autocommit": True, "prepare_threshold": 0, "connect_timeout": int(CONNECT_TIMEOUT), "application_name": "stdbmod"}

    def _configure(self, conn: psycopg.Connection[Any]) -> None:
        conn.execute("SET synchronous_commit = " + ("on" if self.durable else "off"))

    def _connect(self) -> psycopg.Connection[Any]:
        try:
            conn = psycopg.connect(self.dsn, **self._connect_kwargs())
            self._configure(conn)
        except psycopg.Error as e:
            # transient: nothing was written, and the server may be back for the next try
            raise TransientStorageError(f"cannot connect to PostgreSQL: {e}".rstrip()) from e
        return conn

    def _create(self, conn: psycopg.Connection[Any]) -> None:
        """The schema and its tables, created under the writers' lock when missing (nodes
        starting together must not race), then the known spaces."""
        try:
            row = conn.execute("SELECT to_regclass(%s), to_regclass(%s)", (f'"{self.schema}".kv', f'"{self.schema}".version')).fetchone()
            if row is None or row[0] is None or row[1] is None:
                with conn.transaction():
                    conn.execute(self.sql.lock)
                    for statement in [*self.sql.create, *self.sql.create_version]:
                        conn.execute(statement)
            self._load_ids(conn)
        except psycopg.Error as e:
            raise StorageError(f"cannot set up the schema {self.schema!r}: {e}".rstrip()) from e

    def _load_ids(self, conn: psycopg.Connection[Any]) -> None:
        rows = conn.execute(self.sql.spaces).fetchall()
        with self._ids_lock:
            self._ids.update({str(name): int(i) for name, i in rows})

    def _writer_conn(self) -> psycopg.Connection[Any]:
        conn = self._writer
        if conn is None or conn.closed or conn.broken:
            if conn is not None:
                conn.close()
            self._writer = None
            conn = self._writer = self._connect()
        return conn

    # --- spaces --------------------------------------------------------------------------------

    def space_id(self, space: str) -> int | None:
        sid = self._ids.get(space)
        if sid is None and not self._closed:
            # another node may have created it since we looked
            with self._pool_conn() as conn:
                self._load_ids(conn)
            sid = self._ids.get(space)
        return sid

    def require_space(self, space: str) -> int:
        sid = self.space_id(space)
        if sid is None:
            raise StorageError(f"space {space!r} was never created (call ensure_spaces first)")
        return sid

    def space_names(self) -> list[str]:
        with self._pool_conn() as conn:
            self._load_ids(conn)
        return sorted(self._ids)

    def ensure_spaces(self, names: Iterable[str]) -> None:
        missing = [n for n in names if n not in self._ids]
        if not missing:
            return
        with self._writer_lock:
            conn = self._writer_conn()
            try:
                with conn.transaction():
                    conn.execute(self.sql.lock)
                    conn.execute(self.sql.add_spaces, (missing,))
                self._load_ids(conn)
            except psycopg.Error as e:
                raise _translate(e, conn) from e

    # --- transactions --------------------------------------------------------------------------

    def _pool_conn(self) -> Any:
        if self._pool is None or self._closed:
            raise StorageError("the PostgreSQL storage is closed")
        try:
            return self._pool.connection()
        except PoolTimeout as e:
            raise StorageError(f"no PostgreSQL connection within {CONNECT_TIMEOUT:.0f} s: {e}") from e

    def begin_read(self) -> ReadTxn:
        if self._pool is None or self._closed:
            raise StorageError("the PostgreSQL storage is closed")
        for attempt in range(3):
            try:
                conn = self._pool.getconn()
            except PoolTimeout as e:
                raise StorageError(f"no PostgreSQL connection within {CONNECT_TIMEOUT:.0f} s: {e}") from e
            try:
                # the SELECT pins the snapshot now: REPEATABLE READ takes it at the first query
                conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY; SELECT 1", prepare=False)
                return _PgRead(self, conn)
            except psycopg.Error as e:
                self._pool.putconn(conn)  # a broken connection is discarded by the pool
                if attempt == 2 or not (conn.broken or conn.closed):
                    raise _translate(e, None if conn.broken else conn) from e
        raise AssertionError("unreachable")

    def _end_read(self, conn: psycopg.Connection[Any]) -> None:
        try:
            if not conn.broken and not conn.closed:
                conn.execute("ROLLBACK")
        except psycopg.Error:
            pass  # the pool discards a connection it cannot reset
        if self._pool is not None and not self._closed:
            self._pool.putconn(conn)
        else:
            conn.close()

    def begin_write(self) -> WriteTxn:
        if self._closed:
            raise StorageError("the PostgreSQL storage is closed")
        self._writer_lock.acquire()
        try:
            conn = self._writer_conn()
            try:
                with conn.pipeline():
                    conn.execute("BEGIN ISOLATION LEVEL READ COMMITTED")
                    conn.execute(self.sql.lock)
                    version = conn.execute(self.sql.version)
                row = version.fetchone()
            except psycopg.Error as e:
                self._forget()
                raise _translate(e, conn) from e
            if row is None or row[0] != self._cache_version:
                self._cache.clear()  # another node committed since: what we knew may be stale
                self._cache_version = None if row is None else int(row[0])
            return _PgWrite(self, conn, None, self._cache_version)
        except BaseException:
            self._writer_lock.release()
            raise

    def _commit(self, conn: psycopg.Connection[Any], writes: WriteSet, announced: list[str]) -> None:
        try:
            if not writes.writes:
                self._end(conn, "COMMIT")
                return
            args = self._flush_args(writes)
            try:
                with conn.pipeline():
                    conn.execute(self.sql.flush, args)
                    bumped = conn.execute(self.sql.bump)
                    for message in announced:  # delivered by PostgreSQL at the commit, if any
                        conn.execute("SELECT pg_notify(%s, %s)", (self._channel, f"{self.node} {message}"))
                    xid_cur = conn.execute("SELECT pg_current_xact_id()::text")
                version_row = bumped.fetchone()
                xid_row = xid_cur.fetchone()
            except psycopg.Error as e:
                self._forget()
                self._discard_failed(conn)
                raise _translate(e, conn) from e
            assert xid_row is not None and version_row is not None
            xid = str(xid_row[0])
            try:
                conn.execute("COMMIT")
            except psycopg.Error as e:
                self._forget()
                if not (conn.broken or conn.closed):
                    self._discard_failed(conn)
                    raise _translate(e, conn) from e
                self._resolve(xid, e)
                return
            self._remember(writes, int(version_row[0]))
        finally:
            self._writer_lock.release()

    def _forget(self) -> None:
        self._cache.clear()
        self._cache_version = None

    def _remember(self, writes: WriteSet, version: int) -> None:
        """After our commit moved the version to `version`: the cache holds what we wrote."""
        cache = self._cache
        if len(cache) >= CACHE_KEYS:
            cache.clear()
        for space, pending in writes.writes.items():
            for key, value in pending.items():
                cache[(space, key)] = value
        self._cache_version = version

    def _flush_args(self, writes: WriteSet) -> tuple[list[int], list[bytes], list[bytes], list[int], list[bytes]]:
        up_s: list[int] = []
        up_k: list[bytes] = []
        up_v: list[bytes] = []
        del_s: list[int] = []
        del_k: list[bytes] = []
        for space, pending in writes.writes.items():
            sid = self.require_space(space)
            for key, value in pending.items():
                if value is None:
                    del_s.append(sid)
                    del_k.append(key)
                else:
                    up_s.append(sid)
                    up_k.append(key)
                    up_v.append(value)
        return up_s, up_k, up_v, del_s, del_k

    def _resolve(self, xid: str, cause: psycopg.Error) -> None:
        """The connection died while COMMIT was in flight: ask a new one what became of it."""
        deadline = time.monotonic() + STATUS_WAIT
        status: str | None = None
        while True:
            try:
                with psycopg.connect(self.dsn, **self._connect_kwargs()) as probe:
                    row = probe.execute("SELECT pg_xact_status(%s::text::xid8)", (xid,)).fetchone()
                    status = None if row is None else row[0]
            except psycopg.Error:
                status = None
            if status == "committed":
                return
            if status == "aborted":
                raise TransientStorageError(f"lost the PostgreSQL connection during COMMIT, which did not happen: {cause}") from cause
            if time.monotonic() > deadline:
                raise StorageError(
                    f"lost the PostgreSQL connection during COMMIT and could not learn whether transaction {xid} committed "
                    f"(status {status or 'unknown'}): {cause}"
                ) from cause
            time.sleep(0.1)  # the old backend has not finished ending the transaction yet

    def _end(self, conn: psycopg.Connection[Any], verb: str) -> None:
        try:
            conn.execute(verb)
        except psycopg.Error as e:
            self._discard_failed(conn)
            raise _translate(e, conn) from e

    def _discard_failed(self, conn: psycopg.Connection[Any]) -> None:
        """After an error inside the transaction: roll it back, or drop a broken connection."""
        try:
            if not (conn.broken or conn.closed):
                conn.execute("ROLLBACK")
                return
        except psycopg.Error:
            pass
        conn.close()

    def _rollback(self, conn: psycopg.Connection[Any]) -> None:
        try:
            self._discard_failed(conn)
        finally:
            self._writer_lock.release()

    # --- the rest ------------------------------------------------------------------------------

    def grow(self) -> None:
        pass  # PostgreSQL has no map to grow: a full disk is a StorageError

    def lead(self) -> bool:
        if self._closed:
            return False
        if self._leadership is None:
            self._leadership = Leadership(self)
        return self._leadership.lead()

    def watch(self, callback: Callable[[str | None], None]) -> Callable[[], None]:
        listener = Listener(self, self.node, callback)
        self._listeners.append(listener)
        listener.wait_ready(CONNECT_TIMEOUT)

        def stop() -> None:
            listener.close()
            if listener in self._listeners:
                self._listeners.remove(listener)

        return stop

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for listener in list(self._listeners):
            listener.close()
        if self._leadership is not None:
            self._leadership.close()
        if self._pool is not None:
            self._pool.close()
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def drop(self) -> None:
        """Remove the schema and everything in it (tests; `stdbmod` never calls it)."""
        with psycopg.connect(self.dsn, **self._connect_kwargs()) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE')
