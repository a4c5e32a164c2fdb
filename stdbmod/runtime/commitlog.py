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

The record's types are in records.py: the optional compiled build compiles these functions, and
msgspec would misread a `Literal` field of a Struct declared in a compiled module.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from typing import Final

import lz4.block
import msgspec

from ..keys import decode_u64, encode_u64
from ..storage import ReadTxn, WriteTxn
from . import spaces
from .records import CommitRecord, LogRecord, RecordKind, TableChange

__all__ = ["COMPRESS_OVER", "CommitRecord", "LogRecord", "RecordKind", "TableChange", "append", "decode", "encode", "next_offset", "read"]

_encoder: Final = msgspec.msgpack.Encoder()
_decoder: Final = msgspec.msgpack.Decoder(LogRecord)

COMPRESS_OVER: Final = 1024  # below this the saving is a few bytes and not worth the writer's time
_ZLIB: Final = b"\x00"  # written by earlier versions; read only
_LZ4: Final = b"\x01"


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
    txn.put_last(spaces.COMMIT_LOG, encode_u64(record.offset), encode(record))


def read(txn: ReadTxn, start: int = 0, limit: int | None = None) -> Iterator[CommitRecord]:
    n = 0
    for _, raw in txn.scan(spaces.COMMIT_LOG, encode_u64(max(start, 0))):
        if limit is not None and n >= limit:
            return
        yield decode(raw)
        n += 1
