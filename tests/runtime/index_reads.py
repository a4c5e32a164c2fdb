"""What the sparse and partial index tests share: the ids an index space holds entries for, taken
from the storage itself, the ids of rows a read gave, a generated run of calls, and the check
that an index reads as its dense twin."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from stdbmod import Database, Identity
from stdbmod.runtime import spaces


def indexed(db: Database, index: str, table: str = "thing") -> list[int]:
    """The ids the index space holds entries for (an int primary key's), from the storage."""
    with db.storage.begin_read() as r:
        return sorted(int.from_bytes(pk[1:], "big") - (1 << 63) for _, pk in r.scan(spaces.index(table, index)))


def ids(rows: Iterator[Any]) -> list[int]:
    return [r.id for r in rows]


def run_ops(db: Database, ops: list[tuple[Any, ...]], sender: Identity) -> None:
    """Call each (reducer, *args) of a generated run; a change or removal of an id that is not
    there is skipped."""
    for op, *args in ops:
        if op != "add":
            with db.read() as v:
                if v.db.thing.id.find(args[0]) is None:
                    continue
        db.call(op, *args, sender=sender)


def assert_reads_agree(pairs: list[tuple[Any, Any, list[Any]]]) -> None:
    """Each (index, its dense twin, specs): filter both ways and count answer alike."""
    for index, dense, specs in pairs:
        for spec in specs:
            for reverse in (False, True):
                assert ids(index.filter(spec, reverse=reverse)) == ids(dense.filter(spec, reverse=reverse)), (spec, reverse)
            assert index.count(spec) == dense.count(spec), spec
