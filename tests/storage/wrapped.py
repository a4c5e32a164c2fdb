"""A storage and a write transaction that hand every operation to another: what tests change one
method of.

The LMDB backend's transactions are native classes in the compiled build, whose runtime calls
them through their method table: a method set on an instance is not seen there. An interpreted
subclass of `WriteTxn` is called through Python, which sees it (storage/txn.py)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from stdbmod.storage import ReadTxn, Storage, WriteTxn


class WrappedWrite(WriteTxn):
    """`inner`, operation for operation; a nested transaction is `inner`'s own, not wrapped."""

    def __init__(self, inner: WriteTxn) -> None:
        self.inner = inner

    def get(self, space: str, key: bytes) -> bytes | None:
        return self.inner.get(space, key)

    def scan(self, space: str, start: bytes | None = None, stop: bytes | None = None, reverse: bool = False) -> Iterator[tuple[bytes, bytes]]:
        return self.inner.scan(space, start, stop, reverse)

    def count(self, space: str) -> int:
        return self.inner.count(space)

    def last(self, space: str) -> tuple[bytes, bytes] | None:
        return self.inner.last(space)

    def put(self, space: str, key: bytes, value: bytes) -> None:
        self.inner.put(space, key, value)

    def delete(self, space: str, key: bytes) -> bool:
        return self.inner.delete(space, key)

    def put_new(self, space: str, key: bytes, value: bytes) -> bytes | None:
        return self.inner.put_new(space, key, value)

    def put_last(self, space: str, key: bytes, value: bytes) -> None:
        self.inner.put_last(space, key, value)

    def put_many(self, space: str, items: Iterable[tuple[bytes, bytes]]) -> None:
        self.inner.put_many(space, items)

    def clear(self, space: str) -> None:
        self.inner.clear(space)

    def serial(self) -> int | None:
        return self.inner.serial()

    def announce(self, message: str) -> None:
        self.inner.announce(message)

    def child(self) -> WriteTxn:
        return self.inner.child()

    def commit(self) -> None:
        self.inner.commit()

    def abort(self) -> None:
        self.inner.abort()

    def close(self) -> None:
        self.inner.close()


class WrappedStorage(Storage):
    """`inner`, operation for operation: a test overrides `begin_write` (and keeps what it needs)."""

    def __init__(self, inner: Storage) -> None:
        self.inner = inner

    def ensure_spaces(self, names: Iterable[str]) -> None:
        self.inner.ensure_spaces(names)

    def begin_read(self) -> ReadTxn:
        return self.inner.begin_read()

    def begin_write(self) -> WriteTxn:
        return self.inner.begin_write()

    def grow(self) -> None:
        self.inner.grow()

    def close(self) -> None:
        self.inner.close()
