"""A write transaction's pending writes, kept in the client until the top-level commit.

Each level of nesting (the batch, a call's child, a savepoint inside the call) has its own
`WriteSet`: per space, the keys it wrote (a value, or None for a deletion) and the same keys in
order. Reads look from the innermost level outwards, then at PostgreSQL. A child's commit merges
its set into its parent's; an abort drops it. So a nested rollback costs no round trip (a
PostgreSQL SAVEPOINT costs two, and a call in a batch needs one), and the top level sends the
whole batch's writes as one statement.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator, Sequence

Pending = dict[bytes, bytes | None]  # key -> value, or None: deleted


class WriteSet:
    __slots__ = ("writes", "order")

    def __init__(self) -> None:
        self.writes: dict[str, Pending] = {}
        self.order: dict[str, list[bytes]] = {}  # the keys of `writes[space]`, sorted

    def set(self, space: str, key: bytes, value: bytes | None) -> None:
        pending = self.writes.get(space)
        if pending is None:
            pending = self.writes[space] = {}
            self.order[space] = []
        if key not in pending:
            bisect.insort(self.order[space], key)
        pending[key] = value

    def merge_into(self, parent: WriteSet) -> None:
        for space, pending in self.writes.items():
            mine = parent.writes.get(space)
            if mine is None:
                parent.writes[space] = pending
                parent.order[space] = self.order[space]
                continue
            keys = parent.order[space]
            for k in self.order[space]:
                if k not in mine:
                    bisect.insort(keys, k)
            mine.update(pending)

    def keys_in(self, space: str, start: bytes | None, stop: bytes | None) -> Sequence[bytes]:
        keys = self.order.get(space)
        if not keys:
            return ()
        lo = 0 if start is None else bisect.bisect_left(keys, start)
        hi = len(keys) if stop is None else bisect.bisect_left(keys, stop)
        return keys[lo:hi]


def lookup(levels: Sequence[WriteSet], space: str, key: bytes) -> tuple[bool, bytes | None]:
    """(whether a level wrote `key`, what the innermost such level left there)."""
    for level in levels:
        pending = level.writes.get(space)
        if pending is not None and key in pending:
            return True, pending[key]
    return False, None


def pending_range(levels: Sequence[WriteSet], space: str, start: bytes | None, stop: bytes | None) -> list[tuple[bytes, bytes | None]]:
    """Every pending write to `space` in [start, stop), in key order, the innermost level's
    value winning (`levels` innermost first)."""
    slices = [(level, level.keys_in(space, start, stop)) for level in levels]
    slices = [(level, keys) for level, keys in slices if keys]
    if not slices:
        return []
    if len(slices) == 1:
        level, keys = slices[0]
        pending = level.writes[space]
        return [(k, pending[k]) for k in keys]
    keys = sorted(set().union(*(keys for _, keys in slices)))
    return [(k, lookup(levels, space, k)[1]) for k in keys]


def merged(stored: Iterable[tuple[bytes, bytes]], pending: list[tuple[bytes, bytes | None]], reverse: bool) -> Iterator[tuple[bytes, bytes]]:
    """`stored` (PostgreSQL's pairs, in scan order) with the pending writes laid over them:
    a pending value replaces or adds a key, a pending deletion hides it."""
    if not pending:
        yield from stored
        return
    if reverse:
        pending = pending[::-1]
    i, n = 0, len(pending)
    for key, value in stored:
        while i < n and (pending[i][0] > key if reverse else pending[i][0] < key):
            k, v = pending[i]
            i += 1
            if v is not None:
                yield k, v
        if i < n and pending[i][0] == key:
            v = pending[i][1]
            i += 1
            if v is not None:
                yield key, v
            continue
        yield key, value
    for k, v in pending[i:]:
        if v is not None:
            yield k, v
