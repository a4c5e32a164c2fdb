"""A response leaves in one write (http/coalesce.py): uvicorn's protocol, as `serve` runs it, driven
byte by byte over a transport that records its writes, and the `Coalescing` writer alone."""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.config import Config
from uvicorn.server import ServerState

from stdbmod.http.coalesce import Coalescing
from stdbmod.http.guard import protocol
from stdbmod.http.limits import DEFAULT_LIMITS

REQUEST = b"GET / HTTP/1.1\r\nHost: test\r\n\r\n"


class Recording(asyncio.Transport):
    """A transport that keeps each write apart."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        assert not self.closed, "a write after close"
        self.writes.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 50000)}.get(name, default)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        pass


async def _answered(app: Any, requests: bytes, answers: int, between: asyncio.Event | None = None) -> list[bytes]:
    config = Config(app, lifespan="off", log_level="warning")
    config.load()
    guarded = protocol(DEFAULT_LIMITS)(config=config, server_state=ServerState(), app_state={})
    transport = Recording()
    guarded.connection_made(transport)
    guarded.data_received(requests)
    for _ in range(200):  # loop steps, not time: the answers need a handful
        if between is not None and transport.writes and not between.is_set():
            between.set()
        if b"".join(transport.writes).count(b"HTTP/1.1 200") >= answers and transport.writes[-1].endswith(b"hello"):
            break
        await asyncio.sleep(0)
    guarded.connection_lost(None)
    return transport.writes


async def _hello(scope: dict[str, Any], receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"5")]})
    await send({"type": "http.response.body", "body": b"hello"})


def test_an_answer_is_one_write_of_its_head_and_body() -> None:
    writes = asyncio.run(_answered(_hello, REQUEST, 1))
    assert len(writes) == 1, writes
    assert writes[0].startswith(b"HTTP/1.1 200 OK\r\n") and writes[0].endswith(b"\r\n\r\nhello")


def test_each_of_two_pipelined_answers_is_one_write() -> None:
    writes = asyncio.run(_answered(_hello, REQUEST * 2, 2))
    assert len(writes) == 2, writes
    assert all(w.startswith(b"HTTP/1.1 200 OK\r\n") and w.endswith(b"hello") for w in writes)


def test_a_streamed_answer_sends_its_head_before_its_body_is_ready() -> None:
    """The head is not held back waiting for a body that comes later."""
    ready = asyncio.Event()

    async def streamed(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"5")]})
        await ready.wait()  # set only once the head is on the transport
        await send({"type": "http.response.body", "body": b"hello"})

    writes = asyncio.run(_answered(streamed, REQUEST, 1, between=ready))
    assert len(writes) == 2, writes
    assert writes[0].endswith(b"\r\n\r\n") and writes[1] == b"hello"


def test_the_writer_joins_the_writes_of_one_step_and_sends_a_lone_one_at_the_next() -> None:
    async def run() -> list[list[bytes]]:
        transport = Recording()
        out = Coalescing(transport, asyncio.get_running_loop())
        seen = []
        out.write(b"a")
        seen.append(list(transport.writes))  # held
        out.write(b"b")
        out.write(b"c")
        seen.append(list(transport.writes))  # a+b at once, c after it
        await asyncio.sleep(0)
        out.write(b"d")
        seen.append(list(transport.writes))
        await asyncio.sleep(0)
        seen.append(list(transport.writes))  # d alone, at the next step
        out.write(b"e")
        out.close()
        seen.append(list(transport.writes))  # close sends what is held first
        out.flush()  # nothing held, the connection closed: no write after close
        return seen

    assert asyncio.run(run()) == [[], [b"ab", b"c"], [b"ab", b"c"], [b"ab", b"c", b"d"], [b"ab", b"c", b"d", b"e"]]


def test_what_is_held_is_dropped_once_the_connection_is_gone() -> None:
    async def run() -> list[bytes]:
        transport = Recording()
        out = Coalescing(transport, asyncio.get_running_loop())
        out.write(b"head")
        transport.close()  # the peer went away
        await asyncio.sleep(0)
        return transport.writes

    assert asyncio.run(run()) == []
