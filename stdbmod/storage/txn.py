"""The transactions of the storage interface (storage/base.py): `ReadTxn` and `WriteTxn`.

Their own module so that the optional compiled build makes them native classes: the runtime
calls a transaction's get, put and delete ~10 times a reducer call through these types, and a
call through an interpreted class is a Python method call (a lookup of the method and its
arguments parsed, ~200 instructions); through a native one it is a C call. The memory and
PostgreSQL backends subclass them in interpreted code, which the class allows.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator

from .._mypyc import mypyc_attr


@mypyc_attr(allow_interpreted_subclasses=True)
class ReadTxn(ABC):
    """A consistent snapshot. Close it promptly: an open snapshot pins old pages."""

    @abstractmethod
    def get(self, space: str, key: bytes) -> bytes | None:
        """The value stored under `key`, or None."""

    @abstractmethod
    def scan(
        self, space: str, start: bytes | None = None, stop: bytes | None = None, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        """(key, value) pairs with start <= key < stop, in key order (or reversed)."""

    @abstractmethod
    def count(self, space: str) -> int:
        """How many keys the space holds."""

    def last(self, space: str) -> tuple[bytes, bytes] | None:
        """The (key, value) with the greatest key, or None if the space is empty."""
        return next(iter(self.scan(space, reverse=True)), None)

    @abstractmethod
    def close(self) -> None:
        """End the transaction (a write transaction that was not committed is aborted)."""

    def __enter__(self) -> ReadTxn:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@mypyc_attr(allow_interpreted_subclasses=True)
class WriteTxn(ReadTxn):
    """A write transaction. Only one top-level write transaction exists at a time."""

    # Compiled, an attribute of its own gives WriteTxn instances a layout of their own, so that
    # CPython builds any class deriving from it on WriteTxn, whatever the order of its bases
    # (a backend's `class W(R, WriteTxn)`, R its ReadTxn): a native class makes its interpreted
    # subclasses' method tables, and on ReadTxn's a call typed WriteTxn would read past the end
    # of the table. tests/storage runs the memory backend's `_MemWrite(_MemRead, WriteTxn)`.
    _layout: bool = True

    @abstractmethod
    def put(self, space: str, key: bytes, value: bytes) -> None:
        """Store `value` under `key`, replacing any value there."""

    @abstractmethod
    def delete(self, space: str, key: bytes) -> bool:
        """Remove `key`; whether it was there."""

    @abstractmethod
    def child(self) -> WriteTxn:
        """A nested transaction. Until it ends, the parent must not be used."""

    @abstractmethod
    def commit(self) -> None:
        """Make the writes durable (top level) or merge them into the parent (a child)."""

    @abstractmethod
    def abort(self) -> None:
        """Discard the writes."""

    def put_new(self, space: str, key: bytes, value: bytes) -> bytes | None:
        """Store `value` under `key` unless the key holds a value: None if stored, else the
        value held (and nothing written). A backend may do it in one step (LMDB)."""
        held = self.get(space, key)
        if held is None:
            self.put(space, key, value)
        return held

    def put_last(self, space: str, key: bytes, value: bytes) -> None:
        """Store `value` under `key`, which sorts after every key the space holds (a log's next
        record). A backend may write it without searching for its place and refuse a key that
        does not sort last (LMDB's MDB_APPEND: a StorageError, nothing written)."""
        self.put(space, key, value)

    def put_many(self, space: str, items: Iterable[tuple[bytes, bytes]]) -> None:
        for key, value in items:
            self.put(space, key, value)

    def clear(self, space: str) -> None:
        """Remove every key of the space (it stays, empty)."""
        for key in [k for k, _ in self.scan(space)]:
            self.delete(space, key)

    def serial(self) -> int | None:
        """This write transaction's number in the store's sequence of commits: if it commits a
        change and no other writer commits after it, the next write transaction has serial + 1.
        None if the store cannot tell (the runtime then trusts its caches for one batch only)."""
        return None

    def announce(self, message: str) -> None:
        """Tell the other processes writing this store, if and when this transaction commits
        (`Storage.watch`). A store only one process writes (LMDB, memory) has nobody to tell."""
