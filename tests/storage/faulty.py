"""A storage wrapper for tests of the write path: records top-level commits and fails them on
demand (the next one, or every one while `failing` is set, like a full disk)."""

from __future__ import annotations

from stdbmod.storage import LmdbStorage, WriteTxn

from .wrapped import WrappedStorage, WrappedWrite


class FaultyStorage(WrappedStorage):
    def __init__(self, inner: LmdbStorage) -> None:
        super().__init__(inner)
        self.events: list[str] = []  # "commit" after each top-level commit that succeeded
        self.fail_next: Exception | None = None  # raised by the next top-level commit only
        self.failing: Exception | None = None  # raised by every top-level commit while set
        self.failed_commits = 0

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
