"""`ReducerContext`: everything a reducer may touch."""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator
from typing import Any

from ..errors import SenderError
from ..types import ConnectionId, Identity, Timestamp
from .tables import DbView
from .transaction import Transaction


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
        """A line in the database log, kept whether or not the call commits."""
        self._tx.logs.append((level, message))

    def require_scheduler(self) -> None:
        """Refuse unless called by the scheduler (the database itself)."""
        if self.sender != self.identity:
            raise SenderError(f"{self.reducer} may only be called by the scheduler")

    def __repr__(self) -> str:
        return f"ReducerContext(reducer={self.reducer!r}, sender={self.sender!s}, timestamp={self.timestamp!r})"

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(f"ReducerContext has no {name!r}")
