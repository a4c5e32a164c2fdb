"""The client's errors: what the server answered, as exceptions.

One root, `ClientError` (itself a `stdbmod.StdbError`, so one handler catches everything stdbmod
raises), and one class per kind of answer, each also the builtin it is closest to. Every error
the server sent carries its HTTP `status_code` and its `message` (the `{"error": ...}` of the
body); `TransportError` is the one that never reached an answer (`status_code` is None).
"""

from __future__ import annotations

from ..errors import StdbError


class ClientError(StdbError):
    """Root of the client's errors: the server refused a request, failed, or could not be reached."""

    def __init__(self, message: str, status_code: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status_code = status_code  # type: ignore[assignment]  # per instance: the server's answer

    def __str__(self) -> str:
        return self.message if self.status_code is None else f"{self.status_code}: {self.message}"


class TransportError(ClientError, ConnectionError):
    """No answer: the server is down, refused the connection, or timed out (httpx's error is the cause)."""


class BadRequest(ClientError, ValueError):
    """400: a body, parameter or argument the server refused."""


class PayloadTooLarge(BadRequest):
    """413: the body is over the server's limit (1 MiB)."""


class Unauthorized(ClientError, PermissionError):
    """401: no token, or one the server does not accept (malformed, expired, forged)."""


class Forbidden(ClientError, PermissionError):
    """403: the identity lacks the role (worker, admin, owner)."""


class NotFound(ClientError, LookupError):
    """404: no such job, database, reducer or route."""


class Conflict(ClientError):
    """409: the job's state does not allow it, or the lease is no longer the caller's."""


class ReducerError(ClientError):
    """530 from `/v1/.../call/{reducer}`: the reducer refused (its message) or crashed."""


class ServerError(ClientError):
    """5xx: the server failed (500 a bug, 503 storage trouble). Worth retrying."""


BY_STATUS: dict[int, type[ClientError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: PayloadTooLarge,
    530: ReducerError,
}


def error_for(status_code: int, message: str) -> ClientError:
    """The exception for an answer with this status and message."""
    cls = BY_STATUS.get(status_code) or (ServerError if status_code >= 500 else ClientError)
    return cls(message, status_code)


def is_retryable(exc: BaseException) -> bool:
    """Worth sending again after a pause: no answer at all, or the server's own failure (5xx, but
    not a reducer's refusal, which would only refuse again)."""
    return isinstance(exc, (TransportError, ServerError))
