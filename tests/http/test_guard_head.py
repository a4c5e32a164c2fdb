"""The guarded protocol's own spelling of uvicorn's head callbacks (guard.py: on_message_begin,
on_url, on_header) against uvicorn's: the same bytes give the same scope, headers, target and
`Expect: 100-continue` flag. If uvicorn changes what they record, this says so."""

from __future__ import annotations

import asyncio
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
            self._in_head = False
            self._cancel_head_timer()
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
