"""The guarded protocol's own spelling of uvicorn's callbacks (guard.py). The head's
(on_message_begin, on_url, on_header) against uvicorn's: the same bytes give the same scope,
headers, target and `Expect: 100-continue` flag; if uvicorn changes what they record, this says
so. And `on_response_complete`, whose keep-alive wait is the guard's head timer, armed once for
many requests: the timers are fired by hand here, the loop's clock read, never waited for."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from stdbmod.http.guard import GuardedProtocol, protocol
from stdbmod.http.limits import DEFAULT_LIMITS

from .test_coalesce import Recording

Seen = tuple[dict[str, Any], list[tuple[bytes, bytes]], bytes, bool]


class _Plain(HttpToolsProtocol):
    seen: list[Seen]

    def on_headers_complete(self) -> None:
        self.seen.append((dict(self.scope), list(self.headers), self.url, self.expect_100_continue))

    def on_message_complete(self) -> None:
        """No request runs here: only its head is compared."""


def _guarded() -> type[GuardedProtocol]:
    class Guarded(protocol(DEFAULT_LIMITS)):  # type: ignore[misc]
        seen: list[Seen]

        def on_headers_complete(self) -> None:
            self._head_arrived()  # the guard's own bookkeeping, as its on_headers_complete does
            self.seen.append((dict(self.scope), list(self.headers), self.url, self.expect_100_continue))

        def on_message_complete(self) -> None:
            """No request runs here: only its head is compared."""

    return Guarded


async def _heads(cls: type[HttpToolsProtocol], chunks: list[bytes]) -> list[Seen]:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        raise AssertionError("no request reaches the app here")

    config = Config(app, lifespan="off", log_config=None, interface="asgi3", root_path="/base")
    config.load()
    proto: Any = cls(config=config, server_state=ServerState(), app_state={"started": True})
    proto.seen = []
    proto.connection_made(Recording())
    for chunk in chunks:
        proto.data_received(chunk)
    proto.connection_lost(None)
    return list(proto.seen)


REQUESTS = [
    [b"GET /a/b?c=d HTTP/1.1\r\nHost: t\r\n\r\n"],
    [b"POST /jobs HTTP/1.1\r\nHOST: t\r\nContent-Type: application/json \t\r\nExpect: 100-Continue \r\nContent-Length: 0\r\n\r\n"],
    [b"POST /jo", b"bs/%41/complete HTTP/1.1\r\nX-Mixed-Case: Value\t\r\n", b"Expect: nothing\r\nContent-Length: 0\r\n\r\n"],
    [b"GET / HTTP/1.0\r\n\r\n"],
    [b"GET /one HTTP/1.1\r\nHost: t\r\n\r\nGET /two HTTP/1.1\r\nHost: u\r\n\r\n"],  # pipelined: a scope each
]


@pytest.mark.parametrize("chunks", REQUESTS)
def test_the_guard_records_a_head_as_uvicorn_does(chunks: list[bytes]) -> None:
    plain = asyncio.run(_heads(_Plain, chunks))
    guarded = asyncio.run(_heads(_guarded(), chunks))
    assert plain, "uvicorn saw no head"
    assert guarded == plain


class _Transport(Recording):
    def can_write_eof(self) -> bool:
        return False


async def _answered_once(keep_alive: int, header_timeout: float) -> tuple[Any, _Transport, float, float]:
    """A guarded connection that served one request: the protocol, its transport, and how far
    off its timer was when the connection opened and after the answer."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    limits = dataclasses.replace(DEFAULT_LIMITS, header_timeout=header_timeout, keep_alive_timeout=keep_alive)
    config = Config(app, lifespan="off", log_config=None, interface="asgi3", timeout_keep_alive=keep_alive)
    config.load()
    loop = asyncio.get_running_loop()
    proto: Any = protocol(limits)(config=config, server_state=ServerState(), app_state={})
    transport = _Transport()
    proto.connection_made(transport)
    fresh = proto._head_timer.when() - loop.time()
    await _answer(proto, transport)
    return proto, transport, fresh, proto._head_timer.when() - loop.time()


async def _answer(proto: Any, transport: _Transport) -> None:
    answered = len(transport.writes)
    proto.data_received(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
    await _until_answered(proto)
    assert b"ok" in b"".join(transport.writes[answered:])


async def _until_answered(proto: Any) -> None:
    for _ in range(100):  # loop steps, not time
        if proto.cycle.response_complete:
            return
        await asyncio.sleep(0)


def _due(proto: Any) -> None:
    """The head wait's due time, reached (as if that much time had gone by)."""
    proto._head_due = asyncio.get_running_loop().time()


def test_after_an_answer_one_timer_waits_the_keep_alive_timeout() -> None:
    async def run() -> None:
        proto, transport, fresh, after = await _answered_once(keep_alive=5, header_timeout=10.0)
        assert 9.0 < fresh <= 10.0  # a new connection waits for its first head: header_timeout
        assert 4.0 < after <= 5.0  # after an answer: the keep-alive timeout, the shorter
        assert proto.timeout_keep_alive_task is None  # uvicorn's own timer is never armed
        _due(proto)
        proto._head_timed_out()  # the keep-alive wait ends with no byte of a next request
        assert transport.closed and not any(b"408" in w for w in transport.writes)

    asyncio.run(run())


def test_a_head_begun_during_the_keep_alive_wait_has_until_its_deadline() -> None:
    async def run() -> None:
        proto, transport, _, _ = await _answered_once(keep_alive=5, header_timeout=10.0)
        loop = asyncio.get_running_loop()
        proto.data_received(b"GET /slow HTTP/1.1\r\nHo")  # a head begins, and stops
        _due(proto)
        proto._head_timed_out()  # the keep-alive wait's end: not this head's deadline
        assert not transport.closed
        assert 4.0 < proto._head_timer.when() - loop.time() <= 10.0  # re-armed for what is left
        assert proto._head_due == proto._head_deadline
        proto._head_deadline = proto._head_due = loop.time()  # its deadline now passed
        proto._head_timer.cancel()
        proto._head_timed_out()
        assert any(w.startswith(b"HTTP/1.1 408") for w in transport.writes)
        proto.connection_lost(None)

    asyncio.run(run())


def test_a_header_timeout_shorter_than_keep_alive_bounds_the_idle_wait() -> None:
    async def run() -> None:
        proto, _, fresh, after = await _answered_once(keep_alive=5, header_timeout=2.0)
        assert 1.0 < fresh <= 2.0 and 1.0 < after <= 2.0
        proto.connection_lost(None)

    asyncio.run(run())


Check = Callable[[Any, _Transport, asyncio.AbstractEventLoop], Awaitable[None]]


def _after_an_answer(check: Check) -> None:
    """`check` a connection that served one request (keep-alive 5 s, header timeout 10 s)."""

    async def run() -> None:
        proto, transport, _, _ = await _answered_once(keep_alive=5, header_timeout=10.0)
        await check(proto, transport, asyncio.get_running_loop())
        proto.connection_lost(None)

    asyncio.run(run())


def test_one_timer_serves_a_connections_requests_one_after_another() -> None:
    async def check(proto: Any, transport: _Transport, loop: asyncio.AbstractEventLoop) -> None:
        timer = proto._head_timer
        when = timer.when()
        for _ in range(3):
            await _answer(proto, transport)
        assert proto._head_timer is timer and timer.when() == when and not timer.cancelled()  # neither cancelled nor armed again
        assert 4.0 < proto._head_due - loop.time() <= 5.0  # the wait moved on with the last answer
        proto.connection_lost(None)
        assert timer.cancelled()

    _after_an_answer(check)


def test_a_timer_that_fires_before_the_waits_due_time_arms_itself_for_what_is_left() -> None:
    async def check(proto: Any, transport: _Transport, loop: asyncio.AbstractEventLoop) -> None:
        proto._head_due = loop.time() + 3.0  # the wait was moved on since the timer was armed
        proto._head_timer.cancel()
        proto._head_timed_out()
        assert not transport.closed
        assert 2.0 < proto._head_timer.when() - loop.time() <= 3.0

    _after_an_answer(check)


def test_a_timer_that_fires_while_a_request_is_served_lapses_and_the_next_wait_arms_one() -> None:
    async def check(proto: Any, transport: _Transport, loop: asyncio.AbstractEventLoop) -> None:
        proto.data_received(b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nab")  # served, its body still coming
        _due(proto)
        proto._head_timer.cancel()
        proto._head_timed_out()  # no head awaited: nothing to time out
        assert not transport.closed and proto._head_timer is None
        proto.data_received(b"cde")
        await _until_answered(proto)
        armed: Any = proto._head_timer  # (mypy keeps the assert's None for the attribute)
        assert 4.0 < armed.when() - loop.time() <= 5.0  # the keep-alive wait has its timer

    _after_an_answer(check)


@pytest.mark.parametrize(
    ("extra", "refused"),
    [({"count": 0}, False), ({"count": 1}, True), ({"size": 0}, False), ({"size": 1}, True)],
    ids=["max_headers", "one_header_more", "max_header_bytes", "one_byte_more"],
)
def test_a_head_at_its_limits_is_read_and_one_past_them_refused(extra: dict[str, int], refused: bool) -> None:
    limits = DEFAULT_LIMITS
    if "count" in extra:  # Host: t, then single-byte names and values up to the count
        names = [b"Host"] + [b"x"] * (limits.max_headers - 1 + extra["count"])
        values = [b"t"] * len(names)
    else:  # two headers whose names and values add up to the byte limit (and one more)
        names, values = [b"Host", b"X-Big"], [b"t", b"a" * (limits.max_header_bytes - 4 - 1 - 5 + extra["size"])]
    head = b"GET / HTTP/1.1\r\n" + b"".join(n + b": " + v + b"\r\n" for n, v in zip(names, values)) + b"\r\n"

    async def run() -> list[bytes]:
        proto: Any = _guarded()(config=_config(), server_state=ServerState(), app_state={})
        proto.seen = []
        transport = _Transport()
        proto.connection_made(transport)
        proto.data_received(head)
        proto.connection_lost(None)
        assert bool(proto.seen) != refused  # the head was whole, or refused before its end
        return transport.writes

    writes = asyncio.run(run())
    assert any(w.startswith(b"HTTP/1.1 431") for w in writes) == refused


def _config() -> Config:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        raise AssertionError("no request reaches the app here")

    config = Config(app, lifespan="off", log_config=None, interface="asgi3")
    config.load()
    return config
