"""The commit log: one versioned record per committed transaction, appended atomically with it.

Records are tagged msgspec Structs, so a new version is a new tag and old logs stay readable.

A record over `COMPRESS_OVER` bytes is stored LZ4-compressed behind a 0x01 byte (a record's
MessagePack never starts with 0x00 or 0x01: it is a map). Most of a big record is a row twice: an
update holds the row before and after, an insert its arguments and the row made of them;
compressing stores that repetition once (LZ4 reaches 64 KiB back, so rows up to ~32 KB dedupe
whole). LZ4, not zlib: it finds the same repetition at a twentieth of the CPU (~0.5 us for a
1.4 KB record against ~11 us, which was a third of a retry lifecycle call; docs/performance.md),
and it has no entropy stage, so records of random text stay about their text's size. Records
that earlier versions stored zlib-compressed behind a 0x00 byte, or plain, are read as they are.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from typing import Literal

import lz4.block
import msgspec

from ..keys import decode_u64, encode_u64
from ..storage import ReadTxn, WriteTxn
from . import spaces

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

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(LogRecord)

COMPRESS_OVER = 1024  # below this the saving is a few bytes and not worth the writer's time
_ZLIB = b"\x00"  # written by earlier versions; read only
_LZ4 = b"\x01"


def encode(record: CommitRecord) -> bytes:
    raw = _encoder.encode(record)
    if len(raw) > COMPRESS_OVER:
        packed: bytes = _LZ4 + lz4.block.compress(raw)
        if len(packed) < len(raw):
            return packed
    return raw


def decode(raw: bytes) -> CommitRecord:
    tag = raw[:1]
    if tag == _LZ4:
        raw = lz4.block.decompress(raw[1:])
    elif tag == _ZLIB:
        raw = zlib.decompress(raw[1:])
    return _decoder.decode(raw)


def next_offset(txn: ReadTxn) -> int:
    last = txn.last(spaces.COMMIT_LOG)
    return 0 if last is None else decode_u64(last[0]) + 1


def append(txn: WriteTxn, record: CommitRecord) -> None:
    txn.put(spaces.COMMIT_LOG, encode_u64(record.offset), encode(record))


def read(txn: ReadTxn, start: int = 0, limit: int | None = None) -> Iterator[CommitRecord]:
    n = 0
    for _, raw in txn.scan(spaces.COMMIT_LOG, encode_u64(max(start, 0))):
        if limit is not None and n >= limit:
            return
        yield decode(raw)
        n += 1
