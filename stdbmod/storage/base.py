"""The storage interface: a transactional, ordered key/value store over bytes.

Everything above this layer (rows, indexes, the commit log) is encoded to bytes before it gets
here, so a backend is small: named spaces of sorted byte keys, read transactions that see a
snapshot, and write transactions that can nest (a child commits into its parent or aborts
alone; storage/txn.py declares them). `LmdbStorage` is the production backend; `MemoryStorage` exists for tests and is held to
the same contract (tests/storage/contract.py).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable

from .txn import ReadTxn, WriteTxn


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
