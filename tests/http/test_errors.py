"""The one error-to-status mapping: every StdbError answers with its own status_code."""

from __future__ import annotations

import asyncio
import json

import pytest
from starlette.requests import Request

from stdbmod.errors import (
    ArgumentError,
    ConstraintViolation,
    NoSuchReducer,
    ReducerFailed,
    RowNotFound,
    SenderError,
    StdbError,
    StorageError,
    UniqueConstraintViolation,
)
from stdbmod.http.errors import HttpError, on_stdb_error
from stdbmod.retry import InvalidArgument, InvalidTransition, NotAuthorized, StaleLease, TaskNotFound


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (SenderError("no"), 400),  # a reducer's refusal: a bad request...
        (RowNotFound("gone"), 400),
        (ConstraintViolation("broke"), 409),  # ...a conflict when it broke a constraint
        (UniqueConstraintViolation("t", "c", 1), 409),
        (NotAuthorized("role"), 403),
        (TaskNotFound(7), 404),
        (InvalidTransition("state"), 409),
        (StaleLease("lease"), 409),
        (InvalidArgument("arg"), 400),
        (ReducerFailed("crash"), 500),  # the module's bug
        (ArgumentError("args"), 400),
        (NoSuchReducer("who"), 404),
        (StorageError("disk"), 503),
        (HttpError(413, "big"), 413),
    ],
)
def test_an_error_answers_with_its_own_status(error: StdbError, status: int) -> None:
    assert error.status_code == status
    request = Request({"type": "http", "method": "POST", "path": "/api:job-retry/jobs", "headers": [], "query_string": b""})
    response = asyncio.run(on_stdb_error(request, error))
    assert response.status_code == status
    # the 409s a worker must tell apart carry a code beside the message (stale_lease, cancelled, timeout)
    expected = {"error": str(error)} if not isinstance(error, StaleLease) else {"error": str(error), "code": "stale_lease"}
    assert json.loads(bytes(response.body)) == expected
