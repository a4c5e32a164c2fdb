"""A storage wrapper for tests of the write path: records top-level commits and fails them on
demand (the next one, or every one while `failing` is set, like a full disk)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from stdbmod.storage import LmdbStorage, Storage, WriteTxn

from .wrapped import WrappedWrite


class FaultyStorage(Storage):
    def __init__(self, inner: LmdbStorage) -> None:
        self.inner = inner
        self.events: list[str] = []  # "commit" after each top-level commit that succeeded
        self.fail_next: Exception | None = None  # raised by the next top-level commit only
        self.failing: Exception | None = None  # raised by every top-level commit while set
        self.failed_commits = 0

    def ensure_spaces(self, names: Iterable[str]) -> None:
        self.inner.ensure_spaces(names)

    def begin_read(self) -> Any:
        return self.inner.begin_read()

    def begin_write(self) -> WriteTxn:
        outer = WrappedWrite(self.inner.begin_write())  # whose commit the runtime calls as set here
        real_commit = outer.commit

        def commit() -> None:
            error, self.fail_next = self.fail_next or self.failing, None
            if error is not None:
                self.failed_commits += 1
                outer.abort()
                raise error
            real_commit()
            self.events.append("commit")

        outer.commit = commit  # type: ignore[method-assign]
        return outer

    def grow(self) -> None:
        self.inner.grow()

    def close(self) -> None:
        self.inner.close()
