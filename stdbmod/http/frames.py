"""The frames between `serve --workers N`'s HTTP fronts and its writer process (http/workers.py).

Each front holds one end of a socketpair the writer made for it (no path on disk, so no other
process can connect and call reducers as anyone). A frame is a 4-byte big-endian length, then a
MessagePack-encoded msgspec Struct. A front sends `Call`, `Sql`, `Connect`, `Disconnect`,
`Scrape` or `Dash`; the writer answers each with one `Reply` carrying the same `id`, a write's after its
commit is on disk (its future resolved), so a front answers a request only when its write is
durable. After commits the writer also sends a `Notice`, the wake-up of the front's commit-log
readers.

A reply's value and a failure's exception travel pickled: a reducer returns any Python value
(a `Task`, a list of them, None) and the HTTP layer renders it as it would in one process. Only
the fronts unpickle, and only what their own parent process sent; the writer decodes nothing but
these Structs from a front. A length over `MAX_FRAME` ends the connection (FrameTooLarge).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

import msgspec

from ..errors import StdbError

MAX_FRAME = 64 << 20  # far above a request body (1 MiB by default) or a batch route's answer
_LENGTH = struct.Struct(">I")


class FrameTooLarge(StdbError, ValueError):
    """A peer announced a frame over MAX_FRAME: the link is closed, not read into memory."""


class Call(msgspec.Struct, tag="call", array_like=True):
    id: int
    reducer: str
    args: bytes  # the arguments as the commit log stores them (a MessagePack array)
    sender: bytes
    connection_id: bytes | None = None


class Sql(msgspec.Struct, tag="sql", array_like=True):
    """One INSERT, UPDATE or DELETE the front planned and checked (runtime/sql.py's `SqlJob`)."""

    id: int
    args: bytes  # the statement's text, as its commit record holds it
    sender: bytes


class Connect(msgspec.Struct, tag="connect", array_like=True):
    id: int
    sender: bytes


class Disconnect(msgspec.Struct, tag="disconnect", array_like=True):
    id: int
    sender: bytes
    connection_id: bytes


class Failure(msgspec.Struct, array_like=True):
    name: str  # the exception's class name
    message: str
    status: int
    code: str | None = None
    pickled: bytes = b""  # (class, args, attributes), when they pickle


class Reply(msgspec.Struct, tag="reply", array_like=True):
    id: int
    value: bytes = b""  # the result, pickled
    failure: Failure | None = None
    offset: int | None = None  # the call's commit record's offset, when it wrote one
    timestamp: int | None = None  # the call's timestamp (micros), which the writer gave it


class Notice(msgspec.Struct, tag="notice", array_like=True):
    """Unasked, after commits that wrote a record (the writer's commit taps): the front wakes
    its commit-log readers (subscriptions, the commit feed), which read the records from the
    log themselves; `logged`: a commit also wrote database log lines (`logs?follow=true`)."""

    logged: bool = False


class Scrape(msgspec.Struct, tag="scrape", array_like=True):
    """A front's `GET /metrics`, its admin check passed: the writer answers with the whole
    exposition as the reply's value (metrics_fronts.py)."""

    id: int


class Dash(msgspec.Struct, tag="dash", array_like=True):
    """A front's question to the dashboard's state, which the writer holds (dashboard/desk.py):
    `op` names it, `args` are its strings; the reply's value is the answer."""

    id: int
    op: str
    args: list[str]


Request = Call | Sql | Connect | Disconnect | Scrape | Dash

_encoder = msgspec.msgpack.Encoder()
request_decoder = msgspec.msgpack.Decoder(Request)
reply_decoder = msgspec.msgpack.Decoder(Reply | Notice)


def encode(frame: Request | Reply | Notice) -> bytes:
    body = _encoder.encode(frame)
    if len(body) > MAX_FRAME:
        raise FrameTooLarge(f"a frame of {len(body):,} bytes is over the {MAX_FRAME:,} bytes the link takes")
    return _LENGTH.pack(len(body)) + body


class FrameReader:
    """Splits a byte stream into frame bodies, whatever size the pieces `feed` gets."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> Iterator[bytes]:
        buf = self._buf
        buf += data
        start = 0
        while len(buf) - start >= 4:
            (n,) = _LENGTH.unpack_from(buf, start)
            if n > MAX_FRAME:
                raise FrameTooLarge(f"the peer announced a frame of {n:,} bytes, over {MAX_FRAME:,}")
            if len(buf) - start - 4 < n:
                break
            yield bytes(buf[start + 4 : start + 4 + n])
            start += 4 + n
        del buf[:start]
