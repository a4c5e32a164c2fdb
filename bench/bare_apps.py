"""The same bare app for two servers, with a fixed amount of Python work a request: uvicorn's ASGI
(httptools, uvloop, as `serve` runs it) and Granian's RSGI. bench/server_gil.py serves each in turn.

`BARE_WORK_LOOPS` (the environment) sets the work: a loop of that many additions, which holds the
GIL as a route's handler and the writer's call do."""

from __future__ import annotations

import os
from typing import Any

ANSWER = b'{"ok":true}'
_LOOPS = int(os.environ.get("BARE_WORK_LOOPS", "0"))


def work(loops: int = _LOOPS) -> int:
    total = 0
    for i in range(loops):
        total += i
    return total


async def asgi_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    await receive()
    work()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": ANSWER})


async def rsgi_app(scope: Any, proto: Any) -> None:
    await proto()
    work()
    proto.response_bytes(200, [("content-type", "application/json")], ANSWER)
