"""An in-memory backend with the same contract as LMDB: snapshots for readers, nested writers.

Each space is an immutable-by-convention dict. A write transaction copies a space the first time
it writes to it and publishes its copies on commit, so readers keep the dicts they started with
(multi-version concurrency the simple way)."""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterable, Iterator

from .base import Storage
from .txn import ReadTxn, WriteTxn

_Spaces = dict[str, dict[bytes, bytes]]


class _MemRead(ReadTxn):
    def __init__(self, spaces: _Spaces) -> None:
        self._spaces = spaces

    def get(self, space: str, key: bytes) -> bytes | None:
        return self._spaces.get(space, {}).get(key)

    def scan(
        self, space: str, start: bytes | None = None, stop: bytes | None = None, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        data = self._spaces.get(space, {})
        keys = sorted(data)
        lo = 0 if start is None else bisect.bisect_left(keys, start)
        hi = len(keys) if stop is None else bisect.bisect_left(keys, stop)
        chosen = keys[lo:hi]
        if reverse:
            chosen.reverse()
        for key in chosen:
            if key in data:
                yield key, data[key]

    def count(self, space: str) -> int:
        return len(self._spaces.get(space, {}))

    def close(self) -> None:
        pass


class _MemWrite(_MemRead, WriteTxn):
    def __init__(self, storage: MemoryStorage, parent: _MemWrite | None) -> None:
        base = parent._spaces if parent is not None else storage._spaces
        super().__init__(dict(base))
        self._storage = storage
        self._parent = parent
        self._copied: set[str] = set()
        self._done = False
        self._serial = storage._serial

    def serial(self) -> int | None:
        return self._serial

    def _space(self, space: str) -> dict[bytes, bytes]:
        if space not in self._copied:
            self._spaces[space] = dict(self._spaces.get(space, {}))
            self._copied.add(space)
        return self._spaces[space]

    def put(self, space: str, key: bytes, value: bytes) -> None:
        self._space(space)[bytes(key)] = bytes(value)

    def delete(self, space: str, key: bytes) -> bool:
        return self._space(space).pop(key, None) is not None

    def child(self) -> WriteTxn:
        return _MemWrite(self._storage, self)

    def commit(self) -> None:
        if self._done:
            return
        self._done = True
        if self._parent is not None:
            self._parent._spaces = self._spaces
            self._parent._copied = set()  # the child's copies are shared now: copy again on write
        else:
            self._storage._serial += 1  # every commit moves it on (LMDB's, only one that wrote)
            self._storage._spaces = self._spaces
            self._storage._writer.release()

    def abort(self) -> None:
        if self._done:
            return
        self._done = True
        if self._parent is None:
            self._storage._writer.release()

    def close(self) -> None:
        self.abort()


class MemoryStorage(Storage):
    cheap_abort = True  # no nested transaction per lone call (Storage.cheap_abort)

    def __init__(self) -> None:
        self._spaces: _Spaces = {}
        self._writer = threading.Lock()
        self._serial = 0  # the commits so far (WriteTxn.serial)

    def ensure_spaces(self, names: Iterable[str]) -> None:
        for name in names:
            self._spaces.setdefault(name, {})

    def space_names(self) -> list[str]:
        return sorted(self._spaces)

    def begin_read(self) -> ReadTxn:
        return _MemRead(self._spaces)

    def begin_write(self) -> WriteTxn:
        self._writer.acquire()
        return _MemWrite(self, None)

    def grow(self) -> None:
        pass

    def close(self) -> None:
        self._spaces = {}
