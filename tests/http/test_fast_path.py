"""The pieces of the request path made lean for speed: the HTTP stack `serve` picks, reading the
body from the ASGI messages, the bearer header, JSON answers."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.requests import ClientDisconnect, Request

from stdbmod.http import inputs, render
from stdbmod.http.errors import HttpError
from stdbmod.http.serve import fast_stack

from .servers import start_server


def test_fast_stack_when_installed_else_the_pure_python_one(monkeypatch: pytest.MonkeyPatch) -> None:
    if importlib.util.find_spec("httptools") and importlib.util.find_spec("uvloop"):
        assert fast_stack() == ("httptools", "uvloop")
    monkeypatch.setitem(sys.modules, "httptools", None)  # what a missing or unloadable module looks like to import
    assert fast_stack() == ("h11", fast_stack().loop)
    monkeypatch.setitem(sys.modules, "uvloop", None)
    assert fast_stack() == ("h11", "asyncio")


def test_serve_without_the_fast_stack_still_answers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`python -m stdbmod.http` with httptools and uvloop unimportable runs on h11 and asyncio
    (had it asked uvicorn for either, uvicorn would fail to import it and not start)."""
    block = tmp_path / "block"
    block.mkdir()
    for name in ("httptools", "uvloop"):
        (block / f"{name}.py").write_text("raise ImportError('not on this machine')\n")
    monkeypatch.setenv("PYTHONPATH", str(block))  # after the worktree, before site-packages
    server = start_server(tmp_path / "data")
    try:
        token = server.owner_token()
        r = httpx.post(f"{server.base}/api:job-retry/jobs", json={"job_type": "x"}, headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 200 and r.json()["status"] == "queued"
    finally:
        server.stop()


def _request(messages: list[dict[str, Any]], headers: Sequence[tuple[bytes, bytes]] = ()) -> Request:
    queue = list(messages)

    async def receive() -> dict[str, Any]:
        return queue.pop(0)

    return Request({"type": "http", "method": "POST", "path": "/", "headers": list(headers), "query_string": b""}, receive)


def _read(messages: list[dict[str, Any]], limit: int = 100, headers: Sequence[tuple[bytes, bytes]] = ()) -> bytes:
    return asyncio.run(inputs.read_body(_request(messages, headers), limit))


def test_read_body_joins_the_messages_and_checks_the_limit_as_they_arrive() -> None:
    assert _read([{"type": "http.request", "body": b"abc"}]) == b"abc"
    assert _read([{"type": "http.request"}]) == b""
    parts: list[dict[str, Any]] = [{"type": "http.request", "body": b"ab", "more_body": True}, {"type": "http.request", "body": b"", "more_body": True},
             {"type": "http.request", "body": b"cd"}]
    assert _read(parts) == b"abcd"
    big: list[dict[str, Any]] = [{"type": "http.request", "body": b"x" * 60, "more_body": True}, {"type": "http.request", "body": b"x" * 60}]
    with pytest.raises(HttpError) as e:
        _read(big)
    assert e.value.status_code == 413
    with pytest.raises(HttpError) as e:  # a declared length over the limit is refused before reading
        _read([], headers=((b"content-length", b"101"),))
    assert e.value.status_code == 413
    with pytest.raises(HttpError) as e:
        _read([], headers=((b"content-length", b"-1"),))
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


def test_awaiting_the_writers_future() -> None:
    import threading
    from concurrent.futures import Future

    from stdbmod.http.answers import result as _result

    async def main() -> None:
        ok: Future[int] = Future()
        threading.Timer(0, ok.set_result, [7]).start()  # settled from another thread, as the writer does
        assert await _result(ok) == 7
        bad: Future[int] = Future()
        threading.Timer(0, bad.set_exception, [ValueError("no")]).start()
        with pytest.raises(ValueError, match="no"):
            await _result(bad)
        cancelled: Future[int] = Future()
        cancelled.cancel()
        with pytest.raises(asyncio.CancelledError):
            await _result(cancelled)
        late: Future[int] = Future()  # the request goes away first; the writer settles it later
        task = asyncio.ensure_future(_result(late))
        await asyncio.sleep(0)
        task.cancel()
        late.set_result(1)
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0)  # the settle callback runs and finds the waiter cancelled: no error

    asyncio.run(main())
