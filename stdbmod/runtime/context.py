"""`ReducerContext`, everything a reducer may touch, and `ContextFactory`, which makes them (and
the `db` views of reads and replays) for the jobs the writer runs."""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator

from ..errors import InvalidValue, NoSuchAttribute, SenderError
from ..module import Module
from ..types import ConnectionId, Identity, Timestamp
from . import dbview
from .dblog import LEVELS
from .dbview import DbView, LazyDbView
from .transaction import Transaction, TxView


def check_level(level: str) -> str:
    """`level` if it is one of SpacetimeDB's log levels; InvalidValue (the module author's
    mistake: the call fails) otherwise."""
    if level not in LEVELS:
        raise InvalidValue(f"log level {level!r} is not one of {', '.join(LEVELS)}")
    return level


class ReducerContext:
    """The caller (`sender`, `connection_id`), the database's own `identity`, the call's fixed
    `timestamp`, a deterministic `rng` seeded from the timestamp, and `db`, the tables."""

    __slots__ = ("sender", "identity", "connection_id", "timestamp", "db", "_tx", "_rng", "reducer")

    def __init__(
        self,
        tx: Transaction,
        db: DbView,
        *,
        sender: Identity,
        identity: Identity,
        connection_id: ConnectionId | None,
        reducer: str,
    ) -> None:
        self._tx = tx
        self.db = db
        self.sender = sender
        self.identity = identity
        self.connection_id = connection_id
        self.timestamp: Timestamp = tx.timestamp
        self.reducer = reducer
        self._rng: random.Random | None = None

    @property
    def database_identity(self) -> Identity:
        return self.identity

    @property
    def rng(self) -> random.Random:
        if self._rng is None:
            self._rng = random.Random(self.timestamp.micros)
        return self._rng

    @contextlib.contextmanager
    def savepoint(self) -> Iterator[None]:
        """Writes made inside are rolled back if the block raises (the exception propagates)."""
        with self._tx.savepoint():
            yield

    def log(self, message: str, level: str = "info") -> None:
        """A line in the database log, kept whether or not the call commits. `level` is one of
        SpacetimeDB's: trace, debug, info, warn, error, panic (anything else raises)."""
        self._tx.logs.append((check_level(level), message))

    def require_scheduler(self) -> None:
        """Refuse unless called by the scheduler (the database itself)."""
        if self.sender != self.identity:
            raise SenderError(f"{self.reducer} may only be called by the scheduler")

    def __repr__(self) -> str:
        return f"ReducerContext(reducer={self.reducer!r}, sender={self.sender!s}, timestamp={self.timestamp!r})"


def explain(error: Exception) -> Exception:
    """What a call's log names for an AttributeError of its reducer: `NoSuchAttribute` for a
    name the context does not hold, `NoSuchTable` and the like for one its `db` does not
    (`dbview.explain`), else `error` itself. The context has no `__getattr__` to raise those
    itself: CPython sends every attribute read of an object whose class has one through a
    slower hook, found or not (~400 instructions a read; docs/performance.md, "Fourteenth
    round")."""
    if type(error) is AttributeError and isinstance(error.obj, ReducerContext) and isinstance(error.name, str):
        return NoSuchAttribute(f"ReducerContext has no {error.name!r}")
    return dbview.explain(error)


class ContextFactory:
    """The database's module and identity, and the views and contexts made from them."""

    def __init__(self, module: Module, identity: Identity) -> None:
        self.module = module
        self.identity = identity
        self._writer_db: DbView | None = None  # see `context`
        # the transaction it is bound to (the writer reuses one): kept here, as reading the
        # interpreted DbView's own costs an attribute lookup every call (compiled)
        self._bound: TxView | None = None

    def dbview(self, view: TxView) -> DbView:
        """`db` over `view`: a read snapshot, or a transaction outside any reducer (replays)."""
        return LazyDbView(view, self.module.tables)

    def context(self, tx: Transaction, *, sender: Identity, connection_id: ConnectionId | None, reducer: str) -> ReducerContext:
        """A reducer's context. Only on the writer side, which runs one job at a time: every
        call shares one DbView, rebound to its transaction (building handles and accessors afresh
        for every call cost more than many a reducer's own work)."""
        db = self._writer_db
        if db is None:
            db = self._writer_db = DbView.whole(tx, self.module.tables)
        elif tx is not self._bound:
            db.rebind(tx)
        self._bound = tx
        return ReducerContext(tx, db, sender=sender, identity=self.identity, connection_id=connection_id, reducer=reducer)
