"""Procedures (SpacetimeDB 2.x): module functions that run outside any transaction, so they may
wait on the network, and open short transactions of their own when they need the tables.

    @mod.procedure
    def fetch_price(ctx: ProcedureContext, symbol: str) -> int:
        price = http_get(...)                      # no transaction is open: the writer keeps going
        ctx.with_tx(lambda tx: tx.db.price.insert(Price(symbol, price)))
        return price

A procedure runs on the database's procedure pool (a thread each), never on the writer: a
procedure blocked on a socket holds nothing the reducers need. `ctx.with_tx(fn)` runs `fn(tx)`
(`tx` an ordinary `ReducerContext`) as one transaction through the writer, logged in the commit
log as kind `procedure` with the procedure's name, sender and arguments; it returns what `fn`
returned, or raises what it raised (its writes rolled back). `ctx.read()` is a read snapshot.
`ctx.log` lines reach the database log with the next transaction or when the procedure ends.

Called like a reducer (`db.call`, `/call`, `stdbmod call`); from a schedule table, its row is
deleted (or an interval row re-armed) in a transaction that commits *before* the procedure
starts, as SpacetimeDB does: a scheduled procedure runs at most once, never twice after a crash.
"""

from __future__ import annotations

import logging
import random
import threading
import traceback
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import ReducerFailed, SenderError, StdbError
from ..schema import ReducerDef
from ..types import ConnectionId, Identity, Timestamp
from .context import ContextFactory, ReducerContext, check_level
from .jobs import Job
from .transaction import Transaction

if TYPE_CHECKING:
    from .database import Database, ReadView

T = TypeVar("T")

DEFAULT_WORKERS = 64  # procedures running at once; more wait their turn (Database.procedure_workers)
CLOSE_WAIT = 30.0  # seconds `Database.close` waits for running procedures

log = logging.getLogger("stdbmod.procedures")


@dataclass
class TxJob(Job):
    """One `with_tx` of a procedure: `fn(ctx)` in a transaction of its own (kind `procedure`)."""

    fn: Callable[[ReducerContext], Any] | None = None
    logs: list[tuple[str, str]] = field(default_factory=list)  # the procedure's pending log lines

    def run(self, contexts: ContextFactory, tx: Transaction) -> Any:
        tx.logs.extend(self.logs)  # kept whether or not `fn` commits, as a reducer's
        assert self.fn is not None
        return self.fn(self.context_of(contexts, tx))


class ProcedureContext:
    """What a procedure sees: the caller (`sender`, `connection_id`), the database's own
    `identity`, its start `timestamp`, an `rng` seeded from it, `with_tx`, `read` and `log`."""

    __slots__ = ("_db", "reducer", "sender", "identity", "connection_id", "timestamp", "_args", "_logs", "_rng", "_failed")

    def __init__(
        self, db: Database, reducer: str, sender: Identity, connection_id: ConnectionId | None, timestamp: Timestamp, args: bytes
    ) -> None:
        self._db = db
        self.reducer = reducer
        self.sender = sender
        self.identity = db.identity
        self.connection_id = connection_id
        self.timestamp = timestamp
        self._args = args
        self._logs: list[tuple[str, str]] = []
        self._rng: random.Random | None = None
        self._failed: set[int] = set()  # errors of with_tx, already in the database log

    @property
    def database_identity(self) -> Identity:
        return self.identity

    @property
    def rng(self) -> random.Random:
        if self._rng is None:
            self._rng = random.Random(self.timestamp.micros)
        return self._rng

    def with_tx(self, fn: Callable[[ReducerContext], T]) -> T:
        """Run `fn(tx)` as one transaction (the writer's), wait for its durable commit and return
        what `fn` returned. If `fn` raises, its writes roll back and the error is raised here
        (SenderError as it was, anything else as ReducerFailed, its traceback in the log)."""
        job = TxJob(kind="procedure", reducer=self.reducer, sender=self.sender, connection_id=self.connection_id,
                    args_bytes=self._args, fn=fn, logs=self._logs)
        self._logs = []
        try:
            return self._db._wait(self._db._run(job))  # type: ignore[no-any-return]
        except StdbError as e:
            self._failed.add(id(e))
            raise

    def read(self) -> ReadView:
        """A read snapshot of the tables (`with ctx.read() as view: view.db.<table>...`); keep it
        short: it pins the pages it sees."""
        return self._db.read()

    def log(self, message: str, level: str = "info") -> None:
        """A line in the database log (SpacetimeDB's levels: trace, debug, info, warn, error, panic)."""
        self._logs.append((check_level(level), message))

    def __repr__(self) -> str:
        return f"ProcedureContext(reducer={self.reducer!r}, sender={self.sender!s}, timestamp={self.timestamp!r})"


class Procedures:
    """The database's procedure pool (made on first use)."""

    def __init__(self, db: Database, workers: int) -> None:
        self._db = db
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"stdbmod-procedure-{db.name}")
        self._running = 0
        self._idle = threading.Condition()

    def submit(
        self, rdef: ReducerDef, args: tuple[Any, ...], *, sender: Identity, connection_id: ConnectionId | None = None,
        args_bytes: bytes = b"", timestamp: Timestamp | None = None,
    ) -> Future[Any]:
        return self._pool.submit(self._run, rdef, args, sender, connection_id, args_bytes, timestamp)

    def _run(
        self, rdef: ReducerDef, args: tuple[Any, ...], sender: Identity, connection_id: ConnectionId | None, args_bytes: bytes,
        timestamp: Timestamp | None,
    ) -> Any:
        with self._idle:
            self._running += 1
        try:
            return self._call(rdef, args, sender, connection_id, args_bytes, timestamp)
        finally:
            with self._idle:
                self._running -= 1
                self._idle.notify_all()

    def _call(
        self, rdef: ReducerDef, args: tuple[Any, ...], sender: Identity, connection_id: ConnectionId | None, args_bytes: bytes,
        timestamp: Timestamp | None,
    ) -> Any:
        db = self._db
        ctx = ProcedureContext(db, rdef.name, sender, connection_id, timestamp or db.clock.now(), args_bytes)
        try:
            return rdef.call(ctx, *args)
        except SenderError as e:
            if id(e) not in ctx._failed:
                ctx._logs.append(("error", str(e)))
            raise
        except ReducerFailed as e:
            if id(e) not in ctx._failed:
                ctx._logs.append(("panic", "".join(traceback.format_exception(e)).rstrip()))
            raise
        except Exception as e:
            ctx._logs.append(("panic", "".join(traceback.format_exception(e)).rstrip()))
            raise ReducerFailed(rdef.name) from None
        finally:
            if ctx._logs:  # the lines not flushed by a with_tx: a transaction that writes only them
                logs = ctx._logs
                ctx._logs = []
                job = TxJob(kind="procedure", reducer=rdef.name, sender=sender, connection_id=connection_id, fn=_nothing, logs=logs)
                try:
                    db._wait(db._run(job))
                except StdbError:
                    pass

    def close(self, wait: float | None = None) -> None:
        """Drop the procedures not started and wait up to `wait` seconds for the running ones
        (their transactions still go through meanwhile). One still running after that (a
        handler stuck on the network) fails at its next transaction, the database being
        closed: as after a crash, an I/O handler's attempt is then reaped by its lease."""
        wait = CLOSE_WAIT if wait is None else wait
        self._pool.shutdown(wait=False, cancel_futures=True)
        with self._idle:
            if not self._idle.wait_for(lambda: self._running == 0, timeout=wait):
                log.warning("closing with %d procedure(s) still running after %.0f s", self._running, wait)


def _nothing(ctx: ReducerContext) -> None:
    return None
