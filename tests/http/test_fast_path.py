"""The pieces of the request path made lean for speed: the HTTP stack `serve` picks, reading the
body from the ASGI messages, the bearer header, JSON answers."""

from __future__ import annotations

import asyncio
import importlib.util
from typing import Any

import pytest
from starlette.requests import ClientDisconnect, Request

from stdbmod.http import inputs, render
from stdbmod.http.serve import fast_stack
from stdbmod.http.errors import HttpError


def test_fast_stack_when_installed_else_the_pure_python_one(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    if real("httptools") and real("uvloop"):
        assert fast_stack() == ("httptools", "uvloop")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in ("httptools", "uvloop") else real(name, *a))
    assert fast_stack() == ("h11", "asyncio")


def _request(messages: list[dict[str, Any]], headers: list[tuple[bytes, bytes]] = []) -> Request:
    queue = list(messages)

    async def receive() -> dict[str, Any]:
        return queue.pop(0)

    return Request({"type": "http", "method": "POST", "path": "/", "headers": headers, "query_string": b""}, receive)


def _read(messages: list[dict[str, Any]], limit: int = 100, headers: list[tuple[bytes, bytes]] = []) -> bytes:
    return asyncio.run(inputs.read_body(_request(messages, headers), limit))


def test_read_body_joins_the_messages_and_checks_the_limit_as_they_arrive() -> None:
    assert _read([{"type": "http.request", "body": b"abc"}]) == b"abc"
    assert _read([{"type": "http.request"}]) == b""
    parts = [{"type": "http.request", "body": b"ab", "more_body": True}, {"type": "http.request", "body": b"", "more_body": True},
             {"type": "http.request", "body": b"cd"}]
    assert _read(parts) == b"abcd"
    big = [{"type": "http.request", "body": b"x" * 60, "more_body": True}, {"type": "http.request", "body": b"x" * 60}]
    with pytest.raises(HttpError) as e:
        _read(big)
    assert e.value.status_code == 413
    with pytest.raises(HttpError) as e:  # a declared length over the limit is refused before reading
        _read([], headers=[(b"content-length", b"101")])
    assert e.value.status_code == 413
    with pytest.raises(HttpError) as e:
        _read([], headers=[(b"content-length", b"-1")])
    assert e.value.status_code == 400
    with pytest.raises(ClientDisconnect):
        _read([{"type": "http.request", "body": b"ab", "more_body": True}, {"type": "http.disconnect"}])


def test_bearer_reads_the_first_authorization_header() -> None:
    assert inputs.bearer(_request([])) is None
    assert inputs.bearer(_request([], [(b"authorization", b"Bearer abc"), (b"authorization", b"Bearer def")])) == "abc"
    assert inputs.bearer(_request([], [(b"authorization", b"bearer  abc ")])) == "abc"
    assert inputs.bearer(_request([], [(b"authorization", b"Basic abc")])) == ""
    assert inputs.bearer(_request([], [(b"authorization", b"Bearer ")])) == ""


@pytest.mark.parametrize("status", [200, 201, 202, 400, 404, 204])
def test_json_answers_have_starlettes_headers(status: int) -> None:
    from starlette.responses import Response

    ours = render.json_response({"a": [1, "é"]}, status)
    theirs = Response(b'{"a":[1,"\xc3\xa9"]}', status, media_type="application/json")
    assert ours.status_code == status and ours.body == theirs.body and ours.raw_headers == theirs.raw_headers
    with_header = render.json_response({"error": "x"}, 401, headers={"WWW-Authenticate": "Bearer"})
    assert (b"www-authenticate", b"Bearer") in with_header.raw_headers
