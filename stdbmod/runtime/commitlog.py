"""The commit log: one versioned record per committed transaction, appended atomically with it.

Records are tagged msgspec Structs, so a new version is a new tag and old logs stay readable.

A record over `COMPRESS_OVER` bytes is stored zlib-compressed behind a 0x00 byte (a record's
MessagePack never starts with one: it is a map). Most of a big record is a row twice: an update
holds the row before and after, an insert its arguments and the row made of them; compressing
stores that repetition once (zlib sees 32 KiB back, so rows up to ~16 KB dedupe whole). Records
written before, or small, are read as they are.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from typing import Literal

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
_COMPRESSED = b"\x00"


def encode(record: CommitRecord) -> bytes:
    raw = _encoder.encode(record)
    if len(raw) > COMPRESS_OVER:
        packed = _COMPRESSED + _compress(raw)
        if len(packed) < len(raw):
            return packed
    return raw


def _compress(raw: bytes) -> bytes:
    """A zlib stream of `raw` at level 1 (the writer's thread pays for it), with a window just
    big enough to reach back over the whole record (32 KiB at most, as before) and a hash table
    to match: everything a record repeats is still found, and the compressor sets up and zeroes
    kilobytes instead of ~256 KiB. That set-up was a fifth of a 1.3 KB record's ~225,000
    instructions (now ~177,000). The stream says its window; `zlib.decompress` reads any."""
    wbits = max(9, min(15, (len(raw) - 1).bit_length()))
    c = zlib.compressobj(1, zlib.DEFLATED, wbits, min(9, max(1, wbits - 7)))
    return c.compress(raw) + c.flush()


def decode(raw: bytes) -> CommitRecord:
    if raw[:1] == _COMPRESSED:
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
