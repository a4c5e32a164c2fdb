"""The commit log's record (runtime/commitlog.py reads and writes them): one per committed
transaction, a tagged msgspec Struct, so a new version is a new tag and old logs stay readable.

A module of its own, left interpreted by the optional compiled build: msgspec reads the
annotations of a Struct declared in a compiled module (mypyc) wrongly (a `Literal` as `type`).
"""

from __future__ import annotations

from typing import Literal

import msgspec

# "sql": an owner's INSERT / UPDATE / DELETE (runtime/sql.py), its text as the argument
RecordKind = Literal["init", "call", "connect", "disconnect", "scheduled", "schedule_cleanup", "sql", "procedure"]


class TableChange(msgspec.Struct, array_like=True, frozen=True):
    """The net effect of a transaction on one table: rows (msgpack) deleted, then inserted."""

    table: str
    deletes: list[bytes]
    inserts: list[bytes]


class CommitRecord(msgspec.Struct, tag="commit.v1", frozen=True):
    offset: int
    timestamp: int
    kind: RecordKind
    reducer: str
    sender: bytes
    connection_id: bytes | None
    args: bytes
    changes: list[TableChange]
    sequences: dict[str, int] = {}
    schedule_row: bytes | None = None  # scheduled kinds: table + 0x00 + pk key of the row that fired


LogRecord = CommitRecord
