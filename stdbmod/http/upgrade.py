"""Refusing a WebSocket upgrade: an HTTP answer with a JSON body where the server can send one
(uvicorn supports ASGI's denial response), else a close with the reason."""

from __future__ import annotations

from starlette.responses import JSONResponse
from starlette.websockets import WebSocket


async def deny_upgrade(ws: WebSocket, status: int, message: str) -> None:
    try:
        await ws.send_denial_response(JSONResponse({"error": message}, status))
    except RuntimeError:
        await ws.close(1008, message[:123])  # a close reason is at most 123 bytes
