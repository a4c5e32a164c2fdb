"""The database log: failures, module log lines and system events, readable by the owner.

Unlike the commit log it records what did not commit too. It is capped: the oldest lines are
trimmed in the transaction that appends new ones."""

from __future__ import annotations

from collections.abc import Iterator

import msgspec

from ..keys import decode_u64, encode_u64
from ..storage import ReadTxn, WriteTxn
from . import spaces

DEFAULT_CAP = 10_000
# SpacetimeDB's log levels, least severe first (`spacetime logs -l`): the only ones a line has.
LEVELS = ("trace", "debug", "info", "warn", "error", "panic")


class LogLine(msgspec.Struct, frozen=True, tag="line.v1"):
    offset: int
    timestamp: int
    level: str
    reducer: str
    message: str


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(LogLine)


class DbLog:
    def __init__(self, cap: int = DEFAULT_CAP) -> None:
        self.cap = cap

    def append(self, txn: WriteTxn, timestamp: int, level: str, reducer: str, message: str) -> None:
        last = txn.last(spaces.DB_LOG)
        offset = decode_u64(last[0]) + 1 if last else 0
        txn.put(spaces.DB_LOG, encode_u64(offset), _encoder.encode(LogLine(offset, timestamp, level, reducer, message)))
        excess = txn.count(spaces.DB_LOG) - self.cap
        if excess > 0:
            old = [k for k, _ in zip((k for k, _ in txn.scan(spaces.DB_LOG)), range(excess))]
            for k in old:
                txn.delete(spaces.DB_LOG, k)

    @staticmethod
    def read(txn: ReadTxn, last: int | None = None, start: int = 0) -> Iterator[LogLine]:
        """Lines from offset `start`, or only the `last` N."""
        if last is not None:
            tail = [raw for _, raw in zip(range(last), (v for _, v in txn.scan(spaces.DB_LOG, reverse=True)))]
            for raw in reversed(tail):
                yield _decoder.decode(raw)
            return
        for _, raw in txn.scan(spaces.DB_LOG, encode_u64(start)):
            yield _decoder.decode(raw)
