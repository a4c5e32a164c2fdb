"""Errors as HTTP answers: every failure is JSON ``{"error": "..."}`` with a fitting status.

One mapping for the whole app: a `StdbError` answers with its own `status_code` (errors.py, and
the retry module's errors: 403, 404, 409...), an `HttpError` with its own, Starlette's routing
errors (404, 405) keep theirs, and anything else is a 500 whose details go to the server log
only. The one rule on top is SpacetimeDB's call route's 530 for a reducer's refusal or crash
(routes_v1.py).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from ..errors import ReducerFailed, SenderError, StdbError
from ..local.tokens import InvalidToken
from .render import json_response

log = logging.getLogger("stdbmod.http")


class HttpError(StdbError):
    """A request the server refuses, with the status and message to answer."""

    def __init__(self, status_code: int, message: str) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message


def error_response(status_code: int, message: str, headers: Mapping[str, str] | None = None, code: str | None = None) -> Response:
    body = {"error": message} if code is None else {"error": message, "code": code}
    return json_response(body, status_code, headers=headers)


async def on_http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HttpError)
    return error_response(exc.status_code, exc.message)


async def on_starlette_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return error_response(exc.status_code, str(exc.detail), headers=exc.headers)


async def on_stdb_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StdbError)
    if isinstance(exc, InvalidToken):
        return error_response(401, str(exc), headers={"WWW-Authenticate": 'Bearer realm="stdbmod"'})
    if exc.status_code >= 500 and not isinstance(exc, (SenderError, ReducerFailed)):
        log.error("%s on %s %s: %s", type(exc).__name__, request.method, request.url.path, exc)
    return error_response(exc.status_code, str(exc) or type(exc).__name__, code=getattr(exc, "code", None))


async def on_client_gone(request: Request, exc: Exception) -> Response:
    """The client closed the connection before its body was whole (inputs.read_body): nobody
    reads an answer and nothing was done, so one log line, not an unhandled exception."""
    log.warning("client disconnected before sending the whole body: %s %s", request.method, request.url.path)
    return error_response(400, "the client disconnected before sending the whole body")


async def on_unexpected(request: Request, exc: Exception) -> Response:
    # Starlette's ServerErrorMiddleware logs the traceback; the client learns nothing more.
    return error_response(500, "internal server error")
