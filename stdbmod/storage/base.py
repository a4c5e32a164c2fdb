"""The storage interface: a transactional, ordered key/value store over bytes.

Everything above this layer (rows, indexes, the commit log) is encoded to bytes before it gets
here, so a backend is small: named spaces of sorted byte keys, read transactions that see a
snapshot, and write transactions that can nest (a child commits into its parent or aborts
alone). `LmdbStorage` is the production backend; `MemoryStorage` exists for tests and is held to
the same contract (tests/storage/contract.py).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator


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


class WriteTxn(ReadTxn):
    """A write transaction. Only one top-level write transaction exists at a time."""

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


class Storage(ABC):
    """A store of named spaces. Open spaces with `ensure_spaces` before using them in a write."""

    readonly = False  # opened for reading only: `begin_write` and `ensure_spaces` of a new space fail
    # Whether several processes serve this store at once (PostgreSQL nodes): then no one of them
    # may take what another left (its open connections) for what a crash left.
    shared = False
    # Whether aborting a write transaction and beginning another costs next to nothing (no round
    # trip): the runtime then runs a lone call straight in the batch's transaction instead of a
    # nested one, and undoes a failed one by aborting it all.
    cheap_abort = False

    @abstractmethod
    def ensure_spaces(self, names: Iterable[str]) -> None:
        """Create the named spaces that do not exist yet (commits on its own)."""

    def space_names(self) -> list[str]:
        """Every space the store holds (a copy between backends walks them)."""
        raise NotImplementedError(f"{type(self).__name__} cannot list its spaces")

    @abstractmethod
    def begin_read(self) -> ReadTxn:
        """A read-only snapshot; never waits for a writer."""

    @abstractmethod
    def begin_write(self) -> WriteTxn:
        """The write transaction. Call from one thread only (the runtime's writer)."""

    @abstractmethod
    def grow(self) -> None:
        """Make room after `StorageFull`; no transaction may be open."""

    @abstractmethod
    def close(self) -> None:
        """Release the store; later calls fail."""

    def copy_to(self, path: str, compact: bool = True) -> None:
        """A consistent copy of the whole store at `path` (a backend may not support it)."""
        raise NotImplementedError(f"{type(self).__name__} cannot copy itself")

    # --- several processes on one store (PostgreSQL); an embedded store has one -------------

    def lead(self) -> bool:
        """Whether this process should run the schedules now: processes sharing a store elect
        one at a time, and another takes over when it dies. Alone, it always leads."""
        return True

    def watch(self, callback: Callable[[str | None], None]) -> Callable[[], None]:
        """Call `callback(message)` with what another process's committed transaction
        announced, or `callback(None)` when some may have been missed; returns the function
        that stops watching. Alone, nothing ever comes."""
        return lambda: None


class StorageFull(Exception):
    """The store ran out of room; abort every open write transaction, call `grow`, try again.

    Not a StdbError: it never leaves the runtime, which retries the batch after growing."""
