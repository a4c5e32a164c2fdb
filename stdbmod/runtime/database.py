"""`Database`: a module published into storage, and the ways to call it.

    db = Database.create("./data", module, owner=alice)    # runs init once, as alice
    db.call("send", "hello", sender=alice)                  # one ACID transaction
    with db.read() as view:
        rows = list(view.db.message.iter())
    db.close()
    db = Database.open("./data", module)                    # init does not run again
"""

from __future__ import annotations

import asyncio
import os
import re
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from typing import Any

import msgspec

from .. import codec
from ..errors import (
    ArgumentError,
    CallError,
    DatabaseClosed,
    DatabaseNotFound,
    SchemaMismatch,
    StdbError,
    StorageError,
)
from ..module import Module
from ..schema import ReducerDef
from ..storage import LmdbStorage, Storage, StorageFull
from ..storage.postgres_url import is_url, open_url
from ..types import ConnectionId, Identity, Timestamp
from . import commitlog, procedures, schedules, spaces
from .backup import check_target
from .calls import Calls
from .clock import Clock, SystemClock
from .commitlog import CommitRecord
from .core import Core, Hooks
from .dblog import DbLog, LogLine
from .dbview import DbView
from .integrity import check_integrity
from .jobs import CallJob, Job, LifecycleJob, ScheduledJob
from .logtrim import state_hash_of
from .migrate import rebuild_indexes
from .schema_check import check_compatible
from .transaction import TxView
from .writer import MAX_BATCH, Done, Outcome, Waiter, Writer

# 2: rows are MessagePack arrays (rowformat.py); a database of format 1 holds maps, which this
# version reads as they are. 3: an auto_inc sequence's stored value is a high-water mark, and the
# sequence is the larger of it and the table's largest key (docs/architecture.md, "Sequences"); a
# format 2 database's stored values are each at least the largest key, so it opens as it is, but
# a version that reads format 2 would take a mark for the last value given and give an id
# again. A database of a newer format than this version writes is refused.
FORMAT_VERSION = 3
MAX_PASS = MAX_BATCH  # schedule rows fired per pass: one writer batch, one commit
NAME_RE = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")


class Meta(msgspec.Struct, frozen=True):
    name: str
    owner: Identity
    identity: Identity
    created: Timestamp
    format: int
    schema: dict[str, Any]


_meta_decoder = codec.msgpack_decoder(Meta)


class ReadView:
    """A consistent snapshot of every table (`view.db.<table>`), outside any reducer."""

    def __init__(self, core: Core) -> None:
        self._txn = core.storage.begin_read()
        self.view = TxView(self._txn, core.clock.now())
        self.db: DbView = core.contexts.dbview(self.view)

    def next_offset(self) -> int:
        """The offset of the first commit this snapshot does not hold."""
        return commitlog.next_offset(self._txn)

    def close(self) -> None:
        self._txn.close()

    def __enter__(self) -> ReadView:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _storage(where: str | os.PathLike[str] | Storage, module: Module, **options: Any) -> Storage:
    if isinstance(where, Storage):
        return where
    if is_url(where):  # postgresql://USER@HOST:PORT/DB[?schema=NAME]: docs/scaling.md
        return open_url(str(where), durable=options.get("durable", True))
    options.setdefault("max_spaces", len(_spaces_of(module)))
    return LmdbStorage(os.fspath(where), **options)


def _spaces_of(module: Module) -> list[str]:
    return [*spaces.SYSTEM, *(s for t in module.tables.values() for s in spaces.of_table(t))]


def _store_schema(storage: Storage, module: Module, meta: Meta, index_changes: list[tuple[str, str, bool]]) -> None:
    """Rebuild the changed indexes and store the new schema, in one transaction (grown and run
    again if a big index fills the map)."""
    while True:
        w = storage.begin_write()
        try:
            rebuild_indexes(w, module, index_changes)
            w.put(spaces.META, b"meta", codec.msgpack_encoder.encode(meta))
            w.commit()
            return
        except StorageFull:
            w.abort()
            storage.grow()
        except BaseException:
            w.abort()
            raise


class Database:
    """A database with one module. Thread-safe: calls from any thread go through one writer."""

    # How many procedures may run at once (each on a thread of the procedure pool); set before
    # the first procedure call to change it.
    procedure_workers: int = procedures.DEFAULT_WORKERS

    def __init__(self, storage: Storage, module: Module, meta: Meta, clock: Clock) -> None:
        self.module = module
        self.meta = meta
        self._core = Core(storage, module, clock, meta.identity)
        self._writer = Writer(self._core.run_batch, self._core.release, meta.name)
        self._calls = Calls(module, meta.owner, self._writer, self._procedure_pool)
        self.hooks: Hooks = self._core.hooks  # on_commit, on_schedule_change, on_panic, on_batch
        self._hub: Any = None  # runtime/subscriptions.py's Hub, made by the first subscribe
        self._procedures: procedures.Procedures | None = None  # the procedure pool, made by the first procedure call
        self._procedures_lock = threading.Lock()
        self._closed = False
        self._closing: list[Callable[[], None]] = []  # `on_close`

    # --- creating and opening ------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        where: str | os.PathLike[str] | Storage,
        module: Module,
        *,
        owner: Identity,
        name: str | None = None,
        clock: Clock | None = None,
        identity: Identity | None = None,
        run_init: bool = True,
        **storage_options: Any,
    ) -> Database:
        """Publish `module` into empty storage: record the owner and the database's own identity,
        create the tables and run `init` as the owner, all in one transaction."""
        module.finalize()
        name = name or module.name.lower().replace("_", "-")
        if not NAME_RE.match(name):
            raise CallError(f"database name {name!r} must match {NAME_RE.pattern}")
        storage = _storage(where, module, **storage_options)
        try:
            storage.ensure_spaces(_spaces_of(module))
            with storage.begin_read() as r:
                if r.get(spaces.META, b"meta") is not None:
                    raise CallError("a database already exists there; open it instead")
            clock = clock or SystemClock()
            meta = Meta(
                name=name,
                owner=owner,
                identity=identity or Identity.from_claims("stdbmod", str(uuid.uuid4())),
                created=clock.now(),
                format=FORMAT_VERSION,
                schema=module.describe(),
            )
            db = cls(storage, module, meta, clock)
        except BaseException:
            storage.close()
            raise

        def write_meta(tx: Any) -> None:
            tx.wtxn.put(spaces.META, b"meta", codec.msgpack_encoder.encode(meta))

        job = LifecycleJob(
            kind="init", reducer="init", sender=owner, hooks=module.lifecycle["init"] if run_init else [], before=write_meta
        )
        # A replica (run_init=False) gets its log from the source: its own creation is not a record.
        job.skip_record = not run_init
        try:
            db._wait(db._writer.submit(job))
        except BaseException:
            db.close()
            raise
        return db

    @classmethod
    def open(
        cls, where: str | os.PathLike[str] | Storage, module: Module, *, clock: Clock | None = None, **storage_options: Any
    ) -> Database:
        """Open an existing database. Its stored schema must be compatible with `module`'s.
        `readonly=True` (a storage option) opens it for reading only: nothing is written, so a
        module whose schema differs from the stored one is used without storing it, unless it
        needs an index rebuilt or a table the database lacks (refused)."""
        module.finalize()
        if not isinstance(where, Storage) and not is_url(where) and not os.path.exists(os.path.join(os.fspath(where), "data.mdb")):
            raise DatabaseNotFound(f"no database at {os.fspath(where)}")
        storage = _storage(where, module, **storage_options)
        try:
            with storage.begin_read() as r:
                raw = r.get(spaces.META, b"meta")
            if raw is None:
                raise DatabaseNotFound("no database there (publish one first)")
            meta = _meta_decoder.decode(raw)
            if meta.format > FORMAT_VERSION:
                raise SchemaMismatch(
                    f"the database is of storage format {meta.format}, newer than this version of stdbmod reads ({FORMAT_VERSION}): upgrade stdbmod"
                )
            new_schema = module.describe()
            index_changes = check_compatible(meta.schema, new_schema)
            storage.ensure_spaces(_spaces_of(module))
            if new_schema != meta.schema or meta.format != FORMAT_VERSION:
                meta = msgspec.structs.replace(meta, schema=new_schema, format=FORMAT_VERSION)
                if not storage.readonly:
                    _store_schema(storage, module, meta, index_changes)
                elif index_changes:
                    raise StorageError("opened read-only, but the module needs indexes rebuilt: open it writable once")
            return cls(storage, module, meta, clock or SystemClock())
        except BaseException:
            storage.close()
            raise

    # --- identity ------------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self.meta.name

    @property
    def owner(self) -> Identity:
        return self.meta.owner

    @property
    def identity(self) -> Identity:
        return self.meta.identity

    @property
    def clock(self) -> Clock:
        return self._core.clock

    @property
    def storage(self) -> Storage:
        return self._core.storage

    # --- calls ---------------------------------------------------------------------------------

    def reducer(self, name: str, sender: Identity | None = None) -> ReducerDef:
        """The reducer `name` as `sender` may call it: a client-callable one, or, for the owner
        (SpacetimeDB 2.x: private functions), a scheduled one too (its argument is a row of its
        table; the row is not looked up nor deleted). A lifecycle reducer is refused with
        LifecycleCall (400); anything else, NoSuchReducer (404). `sender` None: as a client."""
        return self._calls.reducer(name, sender)

    def submit(self, reducer: str, *args: Any, sender: Identity, connection_id: ConnectionId | None = None) -> Future[Any]:
        """Queue a call; the future resolves after its commit is on disk (or with its error)."""
        return self._submit(self._calls.job(reducer, args, sender, connection_id))

    def submit_typed(
        self, reducer: str, args: tuple[Any, ...], *, sender: Identity, connection_id: ConnectionId | None = None
    ) -> Future[Any]:
        """`submit` for arguments already of the reducer's parameter types, every parameter in
        order (or one instance of a spread reducer's Struct): values a decoder at least as strict
        as the reducer's made, as the HTTP job routes' wire bodies are (tests/http/test_arguments.py
        holds each body in step with its reducer). They go to the commit log and to the reducer as
        they are, without the second type check `submit` makes of arbitrary Python values."""
        return self._submit(self._calls.job(reducer, args, sender, connection_id, typed=True))

    def submit_typed_to(
        self, reducer: str, args: tuple[Any, ...], outcome: Outcome, *, sender: Identity, connection_id: ConnectionId | None = None
    ) -> None:
        """`submit_typed`, settling `outcome` (any object with `Future`'s `done`, `set_result` and
        `set_exception`; on the writer thread, after the commit) instead of returning a `Future`:
        for a caller with its own way to wake up, as the HTTP server's event loop has. A `Future`
        builds a condition variable and takes its lock at each step from its creation to the
        waiter's wake-up."""
        self._submit_to(self._calls.job(reducer, args, sender, connection_id, typed=True), outcome)

    def call(self, reducer: str, *args: Any, sender: Identity, connection_id: ConnectionId | None = None) -> Any:
        """Call a reducer as `sender` and wait for its durable commit. Returns what it returned.

        Raises SenderError (its message), ReducerFailed (generic), ArgumentError, NoSuchReducer."""
        return self._calls.call(reducer, args, sender, connection_id)

    def call_json(self, reducer: str, body: bytes, *, sender: Identity, connection_id: ConnectionId | None = None) -> Any:
        """Call with the arguments as JSON (the HTTP and CLI form): an array in parameter order,
        or an object keyed by parameter name (missing ones take their defaults)."""
        return self._wait(self._run(self._json_job(reducer, body, sender, connection_id)))

    def submit_json(self, reducer: str, body: bytes, *, sender: Identity, connection_id: ConnectionId | None = None) -> Future[Any]:
        return self._submit(self._json_job(reducer, body, sender, connection_id))

    def _json_job(self, reducer: str, body: bytes, sender: Identity, connection_id: ConnectionId | None) -> CallJob:
        r = self.reducer(reducer, sender)
        try:
            # a JSON array in parameter order, or an object keyed by parameter name
            decoded = r.decode_json_object(body) if body.lstrip()[:1] == b"{" else r.json_decoder.decode(body)
        except msgspec.DecodeError as e:
            raise ArgumentError(r.explain(e)) from None
        except RecursionError:  # msgspec's answer to JSON nested deeper than it can decode
            raise ArgumentError(f"{reducer}: the arguments are nested too deeply") from None
        return self._calls.job(reducer, (), sender, connection_id, decoded)

    async def call_async(self, reducer: str, *args: Any, sender: Identity, connection_id: ConnectionId | None = None) -> Any:
        return await asyncio.wrap_future(self.submit(reducer, *args, sender=sender, connection_id=connection_id))

    def call_many(self, calls: Sequence[tuple[str, tuple[Any, ...], Identity]]) -> list[Any]:
        """Run several calls at once (they share commits); each result or exception, in order.
        Every call's arguments are checked first: one that fails raises before any call runs."""
        jobs: list[Job] = [self._calls.job(name, args, sender, None) for name, args, sender in calls]
        futures = self._calls.run_many(jobs)
        out: list[Any] = []
        for f in futures:
            try:
                out.append(f.result())
            except StdbError as e:
                out.append(e)
        return out

    def connect(self, sender: Identity) -> ConnectionId:
        """Open a connection: runs `client_connected`; its failure rejects the connection."""
        conn = ConnectionId.random()
        job = LifecycleJob(
            kind="connect", reducer="client_connected", sender=sender, connection_id=conn,
            hooks=self.module.lifecycle["client_connected"], track_client=self._tracks_clients,
        )
        self._wait(self._submit(job))
        return conn

    def disconnect(self, sender: Identity, connection_id: ConnectionId) -> None:
        """Close a connection: runs `client_disconnected`; a failure there is only logged."""
        hooks = self.module.lifecycle["client_disconnected"]
        job = LifecycleJob(
            kind="disconnect", reducer="client_disconnected", sender=sender, connection_id=connection_id, hooks=hooks,
            track_client=self._tracks_clients,
        )
        try:
            self._wait(self._submit(job))
        except StdbError:
            pass

    @property
    def _tracks_clients(self) -> bool:
        # Open connections are kept only for modules that have a disconnect hook to run for them.
        return bool(self.module.lifecycle["client_disconnected"])

    def dangling_connections(self) -> list[tuple[Identity, ConnectionId]]:
        """The connections opened (`connect`) and never closed: after a crash, those its clients held."""
        with self._core.storage.begin_read() as r:
            return [(Identity(v), ConnectionId(k)) for k, v in r.scan(spaces.CLIENTS)]

    def disconnect_dangling(self) -> int:
        """Run `client_disconnected` for every connection a previous run left open (a crash), as
        SpacetimeDB does at startup; how many. The server calls it when it starts, on a store it
        serves alone: on PostgreSQL another node's open connections look the same."""
        dangling = self.dangling_connections()
        for sender, conn in dangling:
            self.disconnect(sender, conn)
        return len(dangling)

    def call_job(
        self, reducer: str, args: Sequence[Any] = (), *, json: bytes | None = None, sender: Identity, connection_id: ConnectionId | None = None
    ) -> CallJob:
        """A checked call (arguments as values, or as a JSON array) for `submit_job`, for a caller
        that wants the job back (its commit's offset, `job.offset`, once it ran)."""
        if json is not None:
            return self._json_job(reducer, json, sender, connection_id)
        return self._calls.job(reducer, tuple(args), sender, connection_id)

    def submit_job(self, job: Job) -> Future[Any]:
        """Queue a job the runtime prepared itself (the replays' way in)."""
        return self._submit(job)

    def submit_job_to(self, job: Job, outcome: Outcome) -> None:
        """`submit_job`, settling `outcome` instead of returning a `Future` (as `submit_typed_to`)."""
        self._submit_to(job, outcome)

    def _submit(self, job: Job) -> Future[Any]:
        return self._calls.submit(job)

    def _submit_to(self, job: Job, outcome: Outcome) -> None:
        self._calls.submit_to(job, outcome)

    def _run(self, job: Job) -> Future[Any] | Waiter | Done:
        """As `_submit`, for a caller that waits for the result: run here if the writer is idle."""
        return self._calls.run(job)

    def _procedure_pool(self) -> procedures.Procedures:
        with self._procedures_lock:
            if self._closed:
                raise DatabaseClosed("the database is closed")
            if self._procedures is None:
                self._procedures = procedures.Procedures(self, self.procedure_workers)
            return self._procedures

    @staticmethod
    def _wait(fut: Future[Any] | Waiter | Done) -> Any:
        return fut.result()

    # --- schedules -----------------------------------------------------------------------------

    def next_due(self) -> Timestamp | None:
        """When the earliest schedule row is due, or None."""
        with self._core.storage.begin_read() as r:
            return schedules.next_due(r)

    def run_due(self, now: Timestamp | None = None, limit: int = 100_000) -> int:
        """Fire every schedule row due at `now` (default: the clock), including rows the fired
        reducers schedule for now; how many fired. Tests call this under a manual clock.
        A storage failure (not a reducer's) is raised: the rows stay due for a later try."""
        fired = 0
        while fired < limit:
            n, _ = self.fire_due(now, min(MAX_PASS, limit - fired), wait_procedures=True)
            if not n:
                break
            fired += n
        return fired

    def fire_due(self, now: Timestamp | None = None, limit: int = MAX_PASS, *, wait_procedures: bool = False) -> tuple[int, Timestamp | None]:
        """One pass of the scheduler: fire the rows due at `now` (default: the clock), at most
        `limit`, whatever instants they were due at, as one batch: each in its own nested
        transaction (a failing one aborts only itself), all under one commit. It runs on the
        calling thread when the writer is idle (no hand-off to wake up for). Returns how many
        fired and when the first row not fired is due (None: no other row). A storage failure
        is raised: the rows stay due for a later try. Scheduled procedures start once their rows
        are settled; `wait_procedures` waits for them to end (the scheduler does not)."""
        with self._core.storage.begin_read() as r:
            due, nxt = schedules.due(r, now or self.clock.now(), limit)
        if not due:
            return 0, nxt
        if self._writer.running_here():
            raise CallError("a reducer cannot run the scheduler")
        jobs = [ScheduledJob(kind="scheduled", reducer="", sender=self.identity, queue_key=k) for k in due]
        futures = self._writer.run_many(jobs)
        storage_failure: StorageError | None = None
        started: list[Future[Any]] = []
        for job, f in zip(jobs, futures):
            try:
                f.result()
            except StorageError as e:
                storage_failure = storage_failure or e
            except StdbError:
                pass  # the failure is in the database log; the row was cleaned up
            else:
                if job.launch is not None:  # a scheduled procedure: its row is gone, now it runs
                    rdef, row = job.launch
                    started.append(self._procedure_pool().submit(
                        rdef, (row,), sender=self.identity, args_bytes=job.args_bytes, timestamp=job.timestamp
                    ))
        if storage_failure is not None:
            # Nothing was committed and the rows are still due: going round again would
            # spin as long as the storage fails (a full disk). The caller retries later.
            raise storage_failure
        if wait_procedures:
            for p in started:
                try:
                    p.result()
                except StdbError:
                    pass  # in the database log
        return len(due), nxt

    # --- subscriptions -------------------------------------------------------------------------

    def subscribe(
        self,
        queries: Sequence[str],
        on_update: Callable[[Any], None],
        *,
        sender: Identity,
        connection_id: ConnectionId | None = None,
        inline: bool = False,
        max_pending: int | None = None,
    ) -> Any:
        """Subscribe `sender` to `queries` (SQL SELECTs): `on_update` gets their rows (`Applied`),
        then one `Update` per committed transaction that changes them, in commit order, only
        after its commit is on disk. Returns the `Subscription` (runtime/subscriptions.py,
        docs/subscriptions.md). Raises SqlError or PermissionDenied for a query it refuses."""
        from . import subscriptions  # sqlglot is slow to import: only subscribers pay for it

        if self._closed:
            raise StorageError("the database is closed")
        if self._hub is None:
            self._hub = subscriptions.Hub(self)
        pending = subscriptions.MAX_PENDING if max_pending is None else max_pending
        return self._hub.subscribe(queries, on_update, sender, connection_id, inline, pending)

    # --- reading -------------------------------------------------------------------------------

    def read(self) -> ReadView:
        """A read-only snapshot of the tables; never waits for the writer."""
        return ReadView(self._core)

    def commit_log_end(self) -> int:
        """The offset the next commit will get (every node's commits share one log)."""
        with self._core.storage.begin_read() as r:
            return commitlog.next_offset(r)

    def follow_commits(self, callback: Callable[[list[CommitRecord]], None], start: int | None = None) -> Callable[[], None]:
        """Call `callback(records)` with every commit from offset `start` on (default: from
        now), this node's and, on PostgreSQL, every other node's, in the log's order, each
        once, on a thread of its own; returns the function that stops it. The feed for
        subscriptions: see runtime/follow.py and docs/scaling.md."""
        from .follow import CommitFollower

        return CommitFollower(self, callback, start).stop

    def commit_log(self, start: int = 0, limit: int | None = None) -> list[CommitRecord]:
        with self._core.storage.begin_read() as r:
            return list(commitlog.read(r, start, limit))

    def iter_commit_log(self, start: int = 0, chunk: int = 1000) -> Iterator[CommitRecord]:
        """The whole log in short read transactions (a long one would pin old pages)."""
        while True:
            records = self.commit_log(start, chunk)
            yield from records
            if len(records) < chunk:
                return
            start = records[-1].offset + 1

    def on_log(self, tap: Callable[[], None]) -> Callable[[], None]:
        """Call `tap()` (on the writer's thread: it must only wake someone) after every commit
        that wrote database log lines; returns the function that stops it. Log followers (HTTP
        `?follow=true`) wake on it and read `logs(start=...)`."""
        taps = self.hooks.log_taps
        taps.append(tap)
        return lambda: taps.remove(tap) if tap in taps else None

    def log_end(self) -> int:
        """The offset the next database log line will get."""
        last = self.logs(last=1)
        return last[-1].offset + 1 if last else 0

    def logs(self, last: int | None = None, start: int = 0) -> list[LogLine]:
        with self._core.storage.begin_read() as r:
            return list(DbLog.read(r, last, start))

    def state_hash(self) -> str:
        """A hash of every row of every table; equal states give equal hashes."""
        with self._core.storage.begin_read() as r:
            return state_hash_of(r, self.module.tables)

    def check_integrity(self) -> list[str]:
        """Disagreements between rows and what is derived from them (indexes, sequences, the
        schedule queue, commit log offsets), one line each; empty when consistent."""
        with self._core.storage.begin_read() as r:
            return check_integrity(r, self.module.tables)

    def backup(self, dest: str | os.PathLike[str]) -> None:
        """A compacted, consistent copy of the whole database at `dest` (a new or empty
        directory), taken in a read transaction: writers keep going while it runs, and the copy
        holds every transaction committed before it began."""
        self._core.storage.copy_to(check_target(dest), compact=True)

    def describe(self) -> dict[str, Any]:
        return self.module.describe()

    # --- closing -------------------------------------------------------------------------------

    def on_close(self, stop: Callable[[], None]) -> None:
        """Call `stop()` first thing when the database closes (a background thread that reads
        it ends there, before the storage goes)."""
        self._closing.append(stop)

    def close(self) -> None:
        """Finish queued calls, then release the storage."""
        if self._closed:
            return
        self._closed = True
        for stop in reversed(self._closing):
            stop()  # background readers first: the storage must not close under them
        with self._procedures_lock:
            pool, self._procedures = self._procedures, None
        if pool is not None:
            pool.close()  # before the writer: running procedures' transactions still go through
        self._writer.close()
        if self._hub is not None:
            self._hub.close()
        self._core.storage.close()

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
